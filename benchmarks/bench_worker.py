# SPDX-License-Identifier: Apache-2.0
"""One benchmark worker rank: an LMCache worker adapter over large KV caches.

Run by ``_bench_e2e.py`` in its own process (LMCache builds its device registry
once per process, from this process's environment). It registers one KV cache
sized for the largest request, then answers commands on stdin with one JSON
line each on stdout (LMCache's logs go to stderr, which the benchmark sends to
a file):

  store <first token> <chunks> <concurrency>
      ``concurrency`` requests of ``chunks`` chunks each, submitted at once from
      disjoint block ranges; each gets its own prompt ``first + i * 10**7 ...``
      -> {"latencies": [s per request], "wall": s, "ok": bool}
  retrieve <first token> <chunks> <request id> [<request id> ...]
      retrieves, submitted at once, into the second half of the cache (the
      scheduler looked each up first); with ``check`` appended as a last word,
      the retrieved blocks are compared with the stored ones
      -> {"latencies": [...], "wall": s, "ok": bool, "bytes_match": bool|None}
  paths
      -> {"transfer_context": class name, "native_bound": bool|None,
          "native_calls": {...}, "slow_paths": {...}}

Latency is submit to completion of each request; wall is first submit to last
completion, after a device synchronization.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
import time
import uuid

import torch

from bench_plan import PROMPT_STRIDE



def report(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--mode", required=True, choices=["engine_driven", "lmcache_driven"])
    parser.add_argument("--device", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True, help="this rank's heads")
    parser.add_argument("--head-size", type=int, required=True)
    parser.add_argument("--block-size", type=int, required=True)
    parser.add_argument("--chunk", type=int, required=True, help="tokens per chunk")
    parser.add_argument("--max-chunks", type=int, required=True, help="per direction")
    parser.add_argument("--package", required=True, help="the plugin's package")
    parser.add_argument("--device-index", type=int, default=0, help="a node's device (bench_cluster.py: B's is 1)")
    args = parser.parse_args()

    import zmq

    import lmcache  # noqa: F401 - selects the backend from the environment

    # LMCache's names through the kit's tables (what doctor --api checks), as the suite's workers take them
    compat = importlib.import_module("lmcache_device_kit.harness.lmcache_calls")
    shims = importlib.import_module("lmcache_device_kit.compat")
    torch.set_num_threads(1)
    per_chunk = args.chunk // args.block_size
    blocks = 2 * args.max_chunks * per_chunk  # stores read the first half, retrieves fill the second
    device = torch.device(args.device) if args.device == "cpu" else torch.device(args.device, args.device_index)
    if device.type != "cpu":
        getattr(torch, device.type).set_device(device)
    shape = (2, blocks, args.block_size, args.heads, args.head_size)
    kv = {f"layer.{i}": torch.empty(shape, dtype=torch.float16, device=device) for i in range(args.layers)}
    for i, layer in enumerate(kv.values()):  # distinct bytes per layer and block
        host = torch.empty(shape, dtype=torch.float16).view(torch.int16)
        host.random_(-(2**15), 2**15 - 1, generator=torch.Generator().manual_seed(args.rank * 1000 + i))
        layer.copy_(host.view(torch.float16))
    strategy = compat.lazy("ParallelStrategy")(
        mla_only=False, vllm_world_size=args.world_size, vllm_worker_id=args.rank,
        tp_size=args.world_size, pp_size=1, n_servers=1,
    )  # fmt: skip
    adapter = compat.lazy("LMCacheMPWorkerAdapter")(
        args.url, zmq.Context.instance(), args.model, args.block_size, strategy,
        extra_config={"lmcache.mp.mq_timeout": 60.0, "lmcache.mp.mp_transfer_mode": args.mode,
                      "lmcache.mp.heartbeat_interval": 1.0},
    )  # fmt: skip
    compat.register_kv_caches(adapter, kv)
    half = args.max_chunks * per_chunk

    def prompt(first: int, request: int, chunks: int) -> list[int]:
        start = first + request * PROMPT_STRIDE
        return list(range(start, start + chunks * args.chunk))

    def run(futures: list, started: list[float]) -> tuple[list[float], float, bool]:
        """Wait for every future on a thread of its own (no polling: the two cores
        belong to the transfer), stamping its completion."""
        done = [0.0] * len(futures)
        results = [False] * len(futures)

        def wait(index: int) -> None:
            futures[index].wait(timeout=120)
            done[index] = time.perf_counter()
            results[index] = bool(futures[index].result(timeout=0))

        waiters = [threading.Thread(target=wait, args=(i,)) for i in range(len(futures))]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join()
        if device.type != "cpu":
            getattr(torch, device.type).synchronize(device)
        end = time.perf_counter()
        return [d - s for d, s in zip(done, started, strict=True)], end - min(started), all(results)

    def store(first: int, chunks: int, concurrency: int) -> None:
        futures, started = [], []
        for request in range(concurrency):
            tokens = prompt(first, request, chunks)
            ids = list(range(request * chunks * per_chunk, (request + 1) * chunks * per_chunk))
            op = compat.load_store_op(tokens, [ids], 0, len(tokens))
            request_id = f"store-{uuid.uuid4().hex}"
            started.append(time.perf_counter())
            adapter.submit_store_request(request_id, op, compat.recorded_event(adapter, device.type))
            futures.append(adapter.store_futures[request_id])
        latencies, wall, ok = run(futures, started)
        report(latencies=latencies, wall=wall, ok=ok)

    def retrieve(first: int, chunks: int, request_ids: list[str], check: bool) -> None:
        futures, started, targets = [], [], []
        for request, request_id in enumerate(request_ids):
            tokens = prompt(first, request, chunks)
            ids = list(range(half + request * chunks * per_chunk, half + (request + 1) * chunks * per_chunk))
            targets.append(ids)
            if check:  # a retrieve that writes nothing must not pass on old bytes
                for layer in kv.values():
                    layer[:, ids] = 0
            op = compat.load_store_op(tokens, [ids], 0, len(tokens))
            started.append(time.perf_counter())
            adapter.submit_retrieve_request(request_id, op, compat.recorded_event(adapter, device.type))
            futures.append(adapter.retrieve_futures[request_id][0])
        latencies, wall, ok = run(futures, started)
        match = None
        if check:
            bits = [layer.view(torch.int16) for layer in kv.values()]  # NaN bit patterns compare
            match = all(
                torch.equal(layer[:, target].cpu(), layer[:, [t - half for t in target]].cpu())
                for layer in bits
                for target in targets
            )
        report(latencies=latencies, wall=wall, ok=ok, bytes_match=match)

    def paths() -> None:
        native = sys.modules.get(f"{args.package}.native_ops")
        support = sys.modules.get(f"{args.package}._lmcache_compat")
        ops = shims.lazy("resolve_device_ops")(device.type)
        report(
            transfer_context=type(adapter.transfer_ctx).__name__,
            native_bound=getattr(ops, "_native_bound", None),
            native_calls=dict(getattr(native, "_calls", {})),
            slow_paths=dict(getattr(support, "slow_paths", {})),
        )

    report(phase="ready")
    for line in sys.stdin:
        command, *words = line.split()
        if command == "store":
            store(*(int(word) for word in words))
        elif command == "retrieve":
            check = words[-1] == "check"
            retrieve(int(words[0]), int(words[1]), words[2 : len(words) - check], check)
        elif command == "paths":
            paths()
        else:
            break
    adapter.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
