# SPDX-License-Identifier: Apache-2.0
"""Op level of ``nox -s bench``: one setup's gather (D2H) and scatter (H2D) of a request.

Run as ``python bench_ops.py REPS PACKAGE DEVICE`` in a process of its own per setup (LMCache
builds its registry once per process, from the environment the setup sets).
Moves OP_CHUNKS chunks through LMCache's engine-driven call sites
(``gather_paged_kv_to_cpu``, ``scatter_cpu_to_paged_kv``), synchronizing the
device before each clock stop, and a plain memcpy of the same bytes between
two warm host buffers. Prints one JSON line: seconds per op, and what the
plugin's ops say of the path they took.
"""

from __future__ import annotations

import json
import sys
import time

from bench_plan import BLOCK, CHUNK, HEAD_SIZE, HEADS, LAYERS, OP_CHUNKS, SETTLE


def measure(reps: int, package: str, device: str) -> dict:
    import torch

    import lmcache  # noqa: F401 - selects the backend from the environment
    from lmcache_device_kit.compat import lazy
    from lmcache_device_kit.harness.lmcache_calls import lazy as harness_lazy

    # LMCache's names through the kit's tables (what doctor --api checks), never by their path
    gather_paged_kv_to_cpu = harness_lazy("gather_paged_kv_to_cpu")
    scatter_cpu_to_paged_kv = harness_lazy("scatter_cpu_to_paged_kv")
    resolve_device_ops = lazy("resolve_device_ops")

    torch.set_num_threads(1)
    per_chunk = CHUNK // BLOCK
    blocks = 2 * OP_CHUNKS * per_chunk
    generator = torch.Generator().manual_seed(0)
    kv = {
        f"layer.{i}": torch.randn((2, blocks, BLOCK, HEADS, HEAD_SIZE), generator=generator).to(torch.float16)
        for i in range(LAYERS)
    }
    sync = (lambda: None) if device == "cpu" else getattr(torch, device).synchronize
    if device != "cpu":
        kv = {name: t.to(device) for name, t in kv.items()}
    ids = torch.randperm(blocks, generator=generator)[: OP_CHUNKS * per_chunk].tolist()
    hints = {"kv_layout": "NHD"}
    shape = (2, LAYERS, CHUNK, HEADS * HEAD_SIZE)
    # Device setups get pinned chunks, as LMCache's SHM pool and staging are.
    out = [torch.empty(shape, dtype=torch.float16, pin_memory=device != "cpu") for _ in range(OP_CHUNKS)]
    src = torch.empty(sum(o.numel() for o in out) * 2, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src).fill_(2)
    times: dict[str, list[float]] = {"gather": [], "scatter": [], "memcpy": []}

    def gather() -> None:
        gather_paged_kv_to_cpu(kv, ids, per_chunk, layout_hints=hints, out=out)
        sync()

    def scatter() -> None:
        scatter_cpu_to_paged_kv(kv, ids, out, per_chunk, layout_hints=hints)
        sync()

    ops = {"gather": gather, "scatter": scatter, "memcpy": lambda: dst.copy_(src)}
    # Each op back to back in its steady state (its buffers warm, as in a serving
    # loop: the first SETTLE calls of a block are not counted), in blocks taken in
    # turn, so that a drift of the machine moves all three alike.
    rounds = 3
    for _ in range(rounds):
        for name, op in ops.items():
            for call in range(SETTLE + -(-reps // rounds)):
                start = time.perf_counter()
                op()
                if call >= SETTLE:
                    times[name].append(time.perf_counter() - start)
    native = sys.modules.get(f"{package}.native_ops")
    support = sys.modules.get(f"{package}._lmcache_compat")
    return {
        "device": device,
        "times": times,
        "native_bound": getattr(resolve_device_ops(device), "_native_bound", None),
        "native_calls": dict(getattr(native, "_calls", {})),
        "slow_paths": dict(getattr(support, "slow_paths", {})),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]), sys.argv[2], sys.argv[3])))
