# SPDX-License-Identifier: Apache-2.0
"""What ``nox -s bench`` measures, as data: geometry, setups, the sweep, the targets.

Imports nothing but the standard library: the orchestrator, the op-level
child and the report all read it.
"""

from __future__ import annotations

# KV geometry of one TP=1 rank (a 7-8B model's per-layer shape, 8 of its layers):
# fp16 K and V of 8 heads x 128 per token and layer, 256-token chunks.
LAYERS, HEADS, HEAD_SIZE, BLOCK, CHUNK = 8, 8, 128, 16, 256
CHUNK_BYTES = 2 * LAYERS * CHUNK * HEADS * HEAD_SIZE * 2  # 8 MiB
#: Op level moves one 32 MiB request: four chunks.
OP_CHUNKS = 4
#: Op-level processes per setup, the setups' taken in turn: the same op's figures
#: differ by up to 10 % from one process to the next (where its buffers landed), more
#: than between the calls of one process, so an op-level target's interval spans processes.
OP_PROCESSES = 3
#: Calls an op (or the memcpy) needs back to back to reach its steady state after
#: something else ran: here the first takes about twice the steady time and the
#: tenth is steady. Those calls are not counted (op level, and the memcpy yardstick
#: timed in the end-to-end rounds).
SETTLE = 10
#: Token ids of request i start at first + i * PROMPT_STRIDE (a request has at most
#: 64 chunks of 256 tokens; LMCache's wire packs token ids as uint32).
PROMPT_STRIDE = 2**15

NATIVE_ENV_VAR, EMULATOR_ENV_VAR, BACKEND_ENV_VAR = (
    "LMCACHE_FOO_NATIVE",
    "LMCACHE_FOO_EMULATOR",
    "LMCACHE_DEVICE_BACKEND",
)
#: foo's emulated launch latency in the benchmark, in microseconds: the order of a
#: discrete accelerator's kernel launch and event round trip. The conformance suite
#: keeps the emulator's default (200 us), which exaggerates it so that a missing wait
#: shows; here it would add about 0.3 ms to every native call.
LAUNCH_LATENCY_US = 20
LATENCY_ENV_VAR = "LMCACHE_FOO_EMULATOR_LATENCY_US"
#: glibc keeps freed memory: no mmap for large blocks, no trimming, so LMCache's
#: CPU temporaries reuse warm pages instead of paying page faults on every call.
KEEP_MEMORY = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}
#: Each setup: (environment of the worker and the server, KV device). None removes.
SETUPS: dict[str, tuple[dict[str, str | None], str]] = {
    "native foo": ({EMULATOR_ENV_VAR: "1", BACKEND_ENV_VAR: "foo", NATIVE_ENV_VAR: "1"}, "foo"),
    "baseline foo": ({EMULATOR_ENV_VAR: "1", BACKEND_ENV_VAR: "foo", NATIVE_ENV_VAR: "0"}, "foo"),
    "cpu, default malloc": ({EMULATOR_ENV_VAR: "0", BACKEND_ENV_VAR: None}, "cpu"),
    "cpu, glibc keeps memory": ({EMULATOR_ENV_VAR: "0", BACKEND_ENV_VAR: None, **KEEP_MEMORY}, "cpu"),
}  # fmt: skip
CPU_SETUPS = ("cpu, default malloc", "cpu, glibc keeps memory")
#: Transfer mode -> (server's --supported-transfer-mode, worker's mode, SHM pool).
MODES = {
    "engine-driven SHM": ("engine_driven", "engine_driven", True),
    "lmcache-driven": ("lmcache_driven", "lmcache_driven", False),
}

#: One dimension at a time around the base cell (4 chunks, 1 request, TP=1).
BASE = {"chunks": 4, "concurrency": 1, "tp": 1}
SWEEPS = {"chunks": [1, 4, 16, 64], "concurrency": [1, 2, 4], "tp": [1, 2]}
#: Measured rounds per cell (after WARMUP uncounted ones), by chunks per request; the
#: base cell (every target reads it) gets more. A cell stops early, after MIN_REPS,
#: once it has measured for CELL_SECONDS (LMCache's baseline on foo is slow).
REPS = {1: 12, 4: 10, 16: 6, 64: 4}
BASE_REPS = 30
MIN_REPS, CELL_SECONDS = 3, 6.0
WARMUP = 1


def reps(cell: dict[str, int]) -> int:
    return BASE_REPS if cell == BASE else REPS.get(cell["chunks"], MIN_REPS)


def cells(dimensions: list[str] | None = None) -> list[dict[str, int]]:
    """Every distinct cell of the sweep (of ``dimensions``; ``base``: the base cell
    alone), the base cell once."""
    out: list[dict[str, int]] = []
    for dimension in dimensions or SWEEPS:
        for value in SWEEPS.get(dimension, [None]):
            cell = dict(BASE) if value is None else {**BASE, dimension: value}
            if cell not in out:
                out.append(cell)
    return out


def cell_id(cell: dict[str, int]) -> str:
    return f"{cell['chunks']} chunks x {cell['concurrency']} req, TP={cell['tp']}"


#: Targets, all ratios measured in the same run (see bench_report.targets).
STORE_RETRIEVE_VS_CPU = 1.5  # native >= this x faster than the faster CPU regime
WITHIN_MEMCPY = 1.5  # native time <= this x memcpy time of the same bytes
OP_VS_MEMCPY = 0.75  # native gather/scatter bandwidth >= this x memcpy's
E2E_64_VS_MEMCPY = 0.60  # 64-chunk throughput >= this x memcpy bandwidth
#: Throughput of 2 concurrent requests >= this x one request's, or, where two host
#: memcpys side by side gain less than that over one, >= CONCURRENT_OF_MEMCPYS x
#: their gain (this machine has 2 cores: a request's processes share them).
CONCURRENT_VS_ONE, CONCURRENT_OF_MEMCPYS = 1.3, 0.8
