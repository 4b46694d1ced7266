# SPDX-License-Identifier: Apache-2.0
"""One serving-engine worker (one TP rank) driving a real ``lmcache server``.

Run as ``python -m lmcache_device_kit.harness.worker`` by ``engine.Worker``:
LMCache builds its device registry once per process, so each worker selects the
backend under test from its own environment (``LMCACHE_DEVICE_BACKEND``). It uses
the same classes vLLM's ``LMCacheMPConnector`` uses (``LMCacheMPWorkerAdapter``),
with KV caches on tensors of the backend's device (``backend.current()``'s device
type, unless ``--device`` names another), and prints one JSON line per step.

Protocol (one JSON line per step on stdout; logs go to stderr):
  start        register seeded random KV, store ``--tokens`` tokens
               -> {"phase": "store", ...}
               register a second, all-zero KV cache -> {"phase": "ready"}
  stdin line   ``retrieve <request_id> [first token]`` (after the scheduler's
               lookup with that id): retrieve into disjoint zeroed blocks,
               compare bytes -> {"phase": "retrieve", ...}
               (per layer, the block positions restored byte-exact and the
               layers with bytes written outside them, padding included: a
               sliding window restores only its window)
  stdin line   ``store <first token> [tokens]``: store another prompt
               (``--tokens`` long unless given), with KV bytes seeded by it (so
               a retrieve that returned another prompt's chunks shows)
               -> {"phase": "store", ...}
  stdin EOF    unregister both caches and exit.

It imports lmcache once its arguments are parsed (``import lmcache`` selects the
backend) and never the plugin under test: LMCache loads it.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import argparse
import faulthandler
import json
import signal
import sys
import threading
import time
import uuid

# Third Party
import torch

# First Party
from lmcache_device_kit import backend
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.worker_kv import (
    BLOCK_SIZE,
    KV_DTYPES,
    add_kv_arguments,
    check_kv_arguments,
    compare,
    engine_groups,
    make_adapter,
    on_device,
    padding_intact,
    planes_of,
    source_kv,
    token_ids,
    write_layer,
)


def report(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--model", default="e2e-model")
    parser.add_argument("--device", help="default: the backend under test's device")
    parser.add_argument(
        "--device-index",
        type=int,
        help="default: rank %% device count (another node's rank 0 on device 1)",
    )
    parser.add_argument("--mq-timeout", type=float, default=20.0)
    parser.add_argument(
        "--mode",
        default="engine_driven",
        choices=["engine_driven", "lmcache_driven", "auto"],
    )
    add_kv_arguments(parser)
    parser.add_argument(
        "--first-token", type=int, default=7, help="distinct prompts for repeated runs"
    )
    parser.add_argument(
        "--sw-windows",
        type=lambda text: [int(window) for window in text.split(",")],
        default=[-1],
        help="one engine group per entry, its sliding window in tokens (-1: full "
        "attention); more than one: a hybrid model, layer i in group i %% entries, "
        "LMCache-driven only",
    )
    args = parser.parse_args()
    check_kv_arguments(parser, args)
    args.device = args.device or backend.current().device_type
    dtype = KV_DTYPES[args.dtype]
    # SIGUSR1 (the test's, before it kills a stalled worker): the stacks, in its log.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    # First Party
    import lmcache  # noqa: F401 - selects the backend (creates torch.<device>)

    torch.set_num_threads(1)
    used_blocks = args.tokens // BLOCK_SIZE
    num_blocks = 2 * used_blocks + 2
    index = args.device_index
    if index is None:
        index = args.rank % max(1, _device_count(args.device))
    device = torch.device(args.device, index)
    # as a vLLM worker does: LMCache uses the current device
    getattr(torch, device.type).set_device(device)

    def kv_for(first_token: int) -> dict[str, torch.Tensor]:
        """The KV bytes stored under the prompt starting at ``first_token`` (CPU,
        recomputed on demand)."""
        seed = 1000 + args.rank + 7919 * (first_token - args.first_token)
        geometry = args.layers, num_blocks, seed, args.heads, args.head_size
        return source_kv(*geometry, args.layout, dtype)

    expected = kv_for(args.first_token)
    # Source worker: seeded KV in blocks [g, g + used_blocks) of engine group g.
    groups = engine_groups(args.layers, args.sw_windows)
    group_of = {
        f"layer.{layer}": group
        for group, layers in enumerate(groups)
        for layer in layers
    }
    source_blocks = [
        [g + block for block in range(used_blocks)] for g in range(len(groups))
    ]
    source_kv_device = {
        name: on_device(t, device, args.layout, args.memory)
        for name, t in expected.items()
    }
    source = make_adapter(args, source_kv_device)

    def store(first_token: int, tokens: int = args.tokens) -> None:
        # the registered tensors stay; their bytes change
        if first_token != args.first_token:
            for name, values in kv_for(first_token).items():
                write_layer(source_kv_device[name], values)
        prompt = token_ids(tokens, first_token)
        op = lmcache_calls.load_store_op(
            prompt, [b[: -(-tokens // BLOCK_SIZE)] for b in source_blocks], 0, tokens
        )
        # A fresh id per store: the server keeps a request's hashes by id until its
        # session ends; a reused id "stores" nothing and still says True.
        store_id = f"store-{uuid.uuid4().hex}"
        started = time.perf_counter()
        error = ""
        # a dead or silent server must end in a reported failure, not a crashed worker
        try:
            source.submit_store_request(
                store_id, op, lmcache_calls.recorded_event(source, device.type)
            )
            ok = bool(source.store_futures[store_id].result(timeout=args.mq_timeout))
            lmcache_calls.engine_step(source, {store_id})  # the request is done
        except Exception as exc:  # noqa: BLE001 - reported to the test
            ok, error = False, f"{type(exc).__name__}: {exc}"
        report(
            phase="store",
            request_id=store_id,  # its session ends when the scheduler says so
            rank=args.rank,
            ok=ok,
            error=error,
            kv_device_type=device.type,
            kv_device=str(device),
            transfer_context=type(source.transfer_ctx).__name__,
            sub_path=lmcache_calls.engine_sub_path(source.transfer_ctx),
            elapsed_ms=round((time.perf_counter() - started) * 1000, 2),
        )

    # Destination worker: a second engine instance with all-zero KV caches.
    # Both stay registered, as live vLLM workers are, so the scheduler's
    # lookups find this model's layout on the server.
    target = {
        name: on_device(
            torch.zeros(t.shape, dtype=dtype), device, args.layout, args.memory
        )
        for name, t in expected.items()
    }
    destination = make_adapter(args, target)
    # LMCache starts an adapter's heartbeat (which re-registers its caches after a
    # server restart) at its first store; vLLM's one adapter per worker stores early.
    # This second instance only retrieves, so start it here (private API, test harness
    # only).
    getattr(destination, "_ensure_heartbeat_started", lambda: None)()
    # Reversed and disjoint from the stored range: retrieval must not depend
    # on block positions.
    target_blocks = [
        list(range(num_blocks - 1 - g, num_blocks - 1 - g - used_blocks, -1))
        for g in range(len(groups))
    ]

    def retrieve(request_id: str, first_token: int) -> None:
        for layer in target.values():
            for plane in planes_of(layer):
                plane.zero_()
        prompt = token_ids(args.tokens, first_token)
        op = lmcache_calls.load_store_op(prompt, target_blocks, 0, args.tokens)
        started = time.perf_counter()
        error = ""
        try:
            destination.submit_retrieve_request(
                request_id, op, lmcache_calls.recorded_event(destination, device.type)
            )
            future, _ = destination.retrieve_futures[request_id]
            ok = bool(future.result(timeout=args.mq_timeout))
            lmcache_calls.engine_step(destination, set())
        except Exception as exc:  # noqa: BLE001 - reported to the test
            ok, error = False, f"{type(exc).__name__}: {exc}"
        # the rank's device, not the current one
        getattr(torch, device.type).synchronize(device)
        elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
        stored = kv_for(first_token)
        restored, stray = {}, []
        for name, values in stored.items():
            group = group_of[name]
            restored[name], written_elsewhere = compare(
                target[name],
                values,
                target_blocks[group],
                source_blocks[group],
                args.layout,
            )
            # a padded layer's padding is elsewhere too
            if written_elsewhere or not padding_intact(target[name]):
                stray.append(name)
        report(
            phase="retrieve",
            rank=args.rank,
            ok=ok,
            error=error,
            bytes_match=not stray
            and all(len(p) == used_blocks for p in restored.values()),
            restored=restored,
            stray=stray,
            kv_device_type=planes_of(next(iter(target.values())))[0].device.type,
            kv_device=str(planes_of(next(iter(target.values())))[0].device),
            elapsed_ms=elapsed_ms,
        )

    store(args.first_token)
    report(phase="ready", rank=args.rank)
    for line in sys.stdin:
        command, *operands = line.split()
        if command == "store":  # store <first token> [tokens]: another prompt
            store(*(int(operand) for operand in operands))
        elif command == "retrieve":  # retrieve <request id> [first token]
            retrieve(
                operands[0], int(operands[1]) if len(operands) > 1 else args.first_token
            )
        else:
            break
    # Both unregister at once: each waits up to a heartbeat interval for its thread.
    closing = threading.Thread(target=destination.shutdown)
    closing.start()
    source.shutdown()
    closing.join()
    return 0


def _device_count(device_type: str) -> int:
    module = getattr(torch, device_type, None)
    return int(module.device_count()) if module is not None else 1


if __name__ == "__main__":
    sys.exit(main())
