# SPDX-License-Identifier: Apache-2.0
"""End-to-end cells of ``nox -s bench``: real ``lmcache server`` processes, worker ranks.

Per transfer mode, every setup side by side: one server per setup (its log in
the log directory) and, per TP size, one set of ``bench_worker.py`` ranks per
setup kept alive over its cells, as a serving engine's are. A cell's rounds
take the setups in turn (the order rotating every round), with a host memcpy
of the base cell's bytes timed in its steady state after each round, so that a
drift of the machine during the run moves every figure a target compares alike
(idle servers cost about 1 % of a core each). Each round of a setup: empty its server's cache (so
a store reuses pool memory instead of waiting for eviction), store
``concurrency`` requests at once on every rank, look each up with the
scheduler, retrieve them at once. A request's latency is the slowest rank's;
the first measured round of each cell compares the retrieved bytes. Processes of a
foo setup keep the emulator's counters in ``<out>/counters/<setup-mode>``; each
round's store and retrieve are counted (bench_counts.py).

Servers and the scheduler are the kit's (``lmcache_device_kit.harness``: ``servers``,
``scheduler``), so servers start as the conformance suite starts them; nothing of a
render's tests is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

from bench_counts import COUNTERS_ENV_VAR, Meter, per_request
from bench_plan import (
    BLOCK, CELL_SECONDS, CHUNK, CHUNK_BYTES, HEAD_SIZE, HEADS, LAYERS, MIN_REPS, MODES, OP_CHUNKS, PROMPT_STRIDE,
    SETTLE, SETUPS, WARMUP, cell_id, reps,
)  # fmt: skip

WORKER = Path(__file__).with_name("bench_worker.py")


def worker_argv(
    package: str, url: str, model: str, worker_mode: str, device: str, max_chunks: int, *, rank: int = 0, tp: int = 1,
    device_index: int = 0,
) -> list[str]:  # fmt: skip
    """A ``bench_worker.py`` rank's command line: the benchmark's KV geometry, its heads
    split over ``tp`` ranks, on device ``device_index`` of its type."""
    return [sys.executable, str(WORKER), "--url", url, "--model", model, "--mode", worker_mode, "--device", device,
            "--device-index", str(device_index), "--rank", str(rank), "--world-size", str(tp), "--layers", str(LAYERS),
            "--heads", str(HEADS // tp), "--head-size", str(HEAD_SIZE), "--block-size", str(BLOCK), "--chunk",
            str(CHUNK), "--max-chunks", str(max_chunks), "--package", package]  # fmt: skip


class Rank:
    """One ``bench_worker.py`` process: JSON lines in, JSON lines out, stderr to a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log_path = log
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink, env=env, text=True
            )
        self.expect("phase")

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, key: str) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            tail = self.log_path.read_text(errors="replace")[-4000:]
            raise SystemExit(f"benchmark worker exited ({self.log_path}):\n{tail}")
        result = json.loads(line)
        assert key in result, result
        return result

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()


def clear_cache(http_port: int) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/cache/clear", method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200, reply.status


def run_mode(
    package: str, setups: list[str], mode: str, cells: list[dict[str, int]], log_dir: Path,
    child_env: Callable[[dict], dict[str, str]], progress: Callable[[str], None],
    profile: Callable[[dict[str, int]], AbstractContextManager[list[Path]]] | None = None,
) -> tuple[dict[str, dict[str, dict]], dict[str, dict[str, list[float]]], dict[str, dict], list[Path]]:  # fmt: skip
    """All cells of one transfer mode, ``setups`` side by side: ({setup: {cell id:
    samples}}, {cell id: {"one": memcpy samples, "two": memcpy pairs side by side}}, what
    each setup's ranks and server said of the paths they took ({setup: {"ranks": [...], "server_log": path, ...}}); with
    ``profile`` (pids by role -> a sampler; one setup), the profiles it wrote."""
    from lmcache_device_kit.harness.scheduler import Scheduler
    from lmcache_device_kit.harness.servers import running_server

    server_mode, worker_mode, shm = MODES[mode]
    largest = max(c["chunks"] * c["concurrency"] for c in cells)
    results: dict[str, dict[str, dict]] = {setup: {} for setup in setups}
    copies: dict[str, dict[str, list[float]]] = {}
    paths: dict[str, dict] = {}
    profiles: list[Path] = []
    memcpy = memcpy_timer()
    slugs = {setup: f"{setup}-{mode}".replace(" ", "_").replace(",", "") for setup in setups}
    with ExitStack() as servers:
        started, counted, env_of = {}, {}, {}
        for setup, slug in slugs.items():
            overrides, device = SETUPS[setup]
            if device != "cpu":  # foo's emulator counts
                counted[setup] = log_dir.parent / "counters" / slug
                overrides = {**overrides, COUNTERS_ENV_VAR: str(counted[setup])}
            env_of[setup] = overrides  # the server's and its ranks'
            paths[setup] = {"ranks": [], "server_log": str(log_dir / f"server-{slug}.log"), "rank_logs": []}
            started[setup] = servers.enter_context(running_server(
                log_dir / f"server-{slug}.log", transfer_mode=server_mode, shm_name=f"bench_{slug}"[:40] if shm else None,
                chunk_size=CHUNK, env={**overrides, "LMCACHE_LOG_LEVEL": None},
                l1_size_gb=2 * largest * CHUNK_BYTES / 2**30 + 0.5, wait_stop=True,
            ))  # fmt: skip
        for tp in sorted({c["tp"] for c in cells}):
            group = [c for c in cells if c["tp"] == tp]
            most = max(c["chunks"] * c["concurrency"] for c in group)
            lanes: list[Lane] = []
            try:
                for setup, slug in slugs.items():
                    device = SETUPS[setup][1]
                    server, model = started[setup], f"bench-{slug}-tp{tp}"
                    env = child_env({**env_of[setup], "OMP_NUM_THREADS": "1"})
                    lane = Lane(setup, server, Scheduler(server.url, model, tp, BLOCK, mq_timeout=60.0))
                    if setup in counted:
                        lane.meter = Meter(counted[setup], server.process.pid)
                    lanes.append(lane)
                    for rank in range(tp):
                        log = log_dir / f"rank{rank}-tp{tp}-{slug}.log"
                        paths[setup]["rank_logs"].append(str(log))
                        argv = worker_argv(package, server.url, model, worker_mode, device, most, rank=rank, tp=tp)
                        lane.ranks.append(Rank(argv, env, log))
                        if lane.meter:
                            lane.meter.rank_pids.add(lane.ranks[-1].process.pid)
                pids = {"server": lanes[0].server.process.pid}
                pids.update({f"rank{i}": r.process.pid for i, r in enumerate(lanes[0].ranks)})
                with profile(pids) if profile else nullcontext([]) as written:
                    for cell in group:
                        progress(f"{mode} / {cell_id(cell)} / {len(lanes)} setup(s) in turn")
                        copies[cell_id(cell)] = run_cell(lanes, cell, memcpy)
                        for lane in lanes:
                            lane.end_cell(cell)
                            results[lane.setup][cell_id(cell)] = lane.samples
                profiles += written
                for lane in lanes:
                    for rank in lane.ranks:
                        rank.send("paths")
                        paths[lane.setup]["ranks"].append({"tp": tp, **rank.expect("transfer_context")})
            finally:
                for lane in lanes:
                    lane.close()
    return results, copies, paths, profiles


def memcpy_timer(kept: int = 4) -> Callable[[], tuple[list[float], list[float]]]:
    """The yardsticks, timed in the cells' rounds: host memcpys of the base cell's bytes
    back to back between two warm buffers, ``kept`` counted after SETTLE uncounted
    (after a round the first takes about 5 ms here, the tenth 2.7 ms): the steady
    state, as at op level, not a memcpy slowed by what ran before it. Then as many
    pairs of such memcpys run side by side, two threads on their own buffers (a torch
    copy leaves the GIL): what two concurrent requests could reach on this machine.
    Returns (one memcpy's times, a pair's times: both started to both done)."""
    import torch

    torch.set_num_threads(1)
    buffers = [torch.empty(OP_CHUNKS * CHUNK_BYTES, dtype=torch.uint8).fill_(i) for i in range(4)]
    src, dst = buffers[0], buffers[1]
    pool = ThreadPoolExecutor(2, thread_name_prefix="bench-memcpy")

    def run() -> tuple[list[float], list[float]]:
        times = []
        for _ in range(SETTLE + kept):
            start = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - start)
        pairs = []
        for _ in range(SETTLE + kept):
            start = time.perf_counter()
            done = [pool.submit(b.copy_, a) for a, b in ((src, dst), (buffers[2], buffers[3]))]
            for future in done:
                future.result()
            pairs.append(time.perf_counter() - start)
        return times[SETTLE:], pairs[SETTLE:]

    return run


_round = iter(range(1, 10**6))


class Lane:
    """One setup in a transfer mode: its server, its ranks for one TP size, its
    scheduler, and the samples of the cell being measured."""

    def __init__(self, setup: str, server, scheduler) -> None:  # type: ignore[no-untyped-def]
        self.setup, self.server, self.scheduler = setup, server, scheduler
        self.ranks: list[Rank] = []
        self.samples: dict = {}
        self.spent = 0.0
        self.meter: Meter | None = None

    def start_cell(self) -> None:
        self.samples = {"store": [], "retrieve": [], "store_wall": [], "retrieve_wall": [], "bytes_match": None}
        self.spent = 0.0
        if self.meter:
            self.meter.start_cell()

    def end_cell(self, cell: dict[str, int]) -> None:
        """The cell's counts per request (foo setups), into its samples."""
        if self.meter and self.meter.rounds:
            self.samples["counts"] = {
                kind: per_request(self.meter.totals[kind], self.meter.rounds, cell) for kind in ("store", "retrieve")
            }

    def round(self, cell: dict[str, int], measured: bool, check: bool) -> None:
        """Store ``concurrency`` requests, look them up, retrieve them; a measured round
        adds its latencies and walls to the samples and its duration to ``spent``."""
        chunks, concurrency = cell["chunks"], cell["concurrency"]
        tokens = chunks * CHUNK
        began = time.monotonic()
        first = next(_round) * 4 * PROMPT_STRIDE
        clear_cache(self.server.http_port)
        meter = self.meter if measured and not check else None  # a check's own copies are not a request's
        snapshots = [meter.snapshot()] if meter else []
        for rank in self.ranks:
            rank.send(f"store {first} {chunks} {concurrency}")
        stored = [rank.expect("latencies") for rank in self.ranks]
        assert all(s["ok"] for s in stored), f"{self.setup} / {cell_id(cell)}: a store failed"
        if meter:
            snapshots.append(meter.snapshot())
        ids = []
        for request in range(concurrency):
            start = first + request * PROMPT_STRIDE
            prompt = list(range(start, start + tokens))
            request_id, hit = self.scheduler.lookup_until(f"r{first}-{request}", prompt, tokens, timeout=60)
            assert hit == tokens, f"{self.setup} / {cell_id(cell)}: lookup found {hit} of {tokens} tokens (store dropped?)"
            ids.append(request_id)
        for rank in self.ranks:
            rank.send(f"retrieve {first} {chunks} {' '.join(ids)}" + (" check" if check else ""))
        retrieved = [rank.expect("latencies") for rank in self.ranks]
        if meter:  # the lookups count with the retrieve: a retrieve needs them
            meter.add("store", *snapshots)
            meter.add("retrieve", snapshots[1], meter.snapshot())
        for request_id in ids:
            self.scheduler.end_session(request_id)
        assert all(r["ok"] for r in retrieved), f"{self.setup} / {cell_id(cell)}: a retrieve failed"
        if check:
            self.samples["bytes_match"] = all(r["bytes_match"] for r in retrieved)
        if measured:
            for kind, got in (("store", stored), ("retrieve", retrieved)):
                self.samples[kind] += [max(rank["latencies"][i] for rank in got) for i in range(concurrency)]
                self.samples[f"{kind}_wall"].append(max(rank["wall"] for rank in got))
            self.spent += time.monotonic() - began

    def close(self) -> None:
        self.scheduler.close()
        for rank in self.ranks:
            rank.close()


def run_cell(
    lanes: list, cell: dict[str, int], memcpy: Callable[[], tuple[list[float], list[float]]]
) -> dict[str, list[float]]:
    """One cell, the lanes' rounds in turn, the order rotating every round (no setup
    always follows the slow one); the memcpys timed after each measured round. A lane
    stops after MIN_REPS measured rounds once they took CELL_SECONDS (LMCache's
    baseline on foo is slow), the others go on. Returns the memcpy samples: "one"
    memcpy's, "two" side by side."""
    for lane in lanes:
        lane.start_cell()
    copies: dict[str, list[float]] = {"one": [], "two": []}
    active = list(lanes)
    for rep in range(WARMUP + reps(cell)):
        turn = rep % len(active)
        for lane in active[turn:] + active[:turn]:
            lane.round(cell, measured=rep >= WARMUP, check=rep == WARMUP)
        if rep >= WARMUP:
            one, two = memcpy()
            copies["one"] += one
            copies["two"] += two
        active = [lane for lane in active if rep + 1 - WARMUP < MIN_REPS or lane.spent <= CELL_SECONDS]
        if not active:
            break
    return copies
