# SPDX-License-Identifier: Apache-2.0
"""End-to-end cells of ``nox -s bench``: real ``lmcache server`` processes, worker ranks.

Per (setup, transfer mode) one server (its log in the log directory), and per TP
size one set of ``bench_worker.py`` ranks kept alive over its cells, as a serving
engine's are. Each measured round: empty the server's cache (so a store reuses
pool memory instead of waiting for eviction), store ``concurrency`` requests at
once on every rank, look each up with the scheduler, retrieve them at once. A
request's latency is the slowest rank's; the first measured round of each cell
compares the retrieved bytes.

Uses the rendered project's own harness (``tests/_servers.py``,
``tests/_scheduler.py``), so servers start as the conformance suite starts them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from bench_plan import (
    BLOCK, CELL_SECONDS, CHUNK, CHUNK_BYTES, HEAD_SIZE, HEADS, LAYERS, MIN_REPS, MODES, PROMPT_STRIDE, SETUPS,
    WARMUP, cell_id, reps,
)  # fmt: skip

WORKER = Path(__file__).with_name("bench_worker.py")


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
    project: Path, package: str, setup: str, mode: str, cells: list[dict[str, int]], log_dir: Path,
    child_env: Callable[[dict], dict[str, str]], progress: Callable[[str], None],
    profile: Callable[[dict[str, int]], AbstractContextManager[list[Path]]] | None = None,
) -> tuple[dict[str, dict], dict, list[Path]]:  # fmt: skip
    """All cells of one (setup, mode): {cell id: samples}; what the ranks and the
    server said of the paths they took ({"ranks": [...], "server_log": path, ...});
    with ``profile`` (pids by role -> a sampler), the profiles it wrote."""
    if str(project / "tests") not in sys.path:
        sys.path.insert(0, str(project / "tests"))
    from _scheduler import Scheduler
    from _servers import running_server

    overrides, device = SETUPS[setup]
    server_mode, worker_mode, shm = MODES[mode]
    slug = f"{setup}-{mode}".replace(" ", "_").replace(",", "")
    env = child_env({**overrides, "OMP_NUM_THREADS": "1"})
    largest = max(c["chunks"] * c["concurrency"] for c in cells)
    results: dict[str, dict] = {}
    paths: dict = {"ranks": [], "server_log": str(log_dir / f"server-{slug}.log"), "rank_logs": []}
    profiles: list[Path] = []
    with running_server(
        log_dir / f"server-{slug}.log", transfer_mode=server_mode, shm_name=f"bench_{slug}"[:40] if shm else None,
        chunk_size=CHUNK, env={**overrides, "LMCACHE_LOG_LEVEL": None},
        l1_size_gb=2 * largest * CHUNK_BYTES / 2**30 + 0.5, wait_stop=True,
    ) as server:  # fmt: skip
        for tp in sorted({c["tp"] for c in cells}):
            group = [c for c in cells if c["tp"] == tp]
            model = f"bench-{slug}-tp{tp}"
            most = max(c["chunks"] * c["concurrency"] for c in group)
            ranks = []
            for rank in range(tp):
                log = log_dir / f"rank{rank}-tp{tp}-{slug}.log"
                paths["rank_logs"].append(str(log))
                argv = [sys.executable, str(WORKER), "--url", server.url, "--model", model, "--mode", worker_mode,
                        "--device", device, "--rank", str(rank), "--world-size", str(tp), "--layers", str(LAYERS),
                        "--heads", str(HEADS // tp), "--head-size", str(HEAD_SIZE), "--block-size", str(BLOCK),
                        "--chunk", str(CHUNK), "--max-chunks", str(most), "--package", package]  # fmt: skip
                ranks.append(Rank(argv, env, log))
            scheduler = Scheduler(server.url, model, tp, BLOCK, mq_timeout=60.0)
            pids = {"server": server.process.pid, **{f"rank{i}": r.process.pid for i, r in enumerate(ranks)}}
            try:
                with profile(pids) if profile else nullcontext([]) as written:
                    for cell in group:
                        progress(f"{setup} / {mode} / {cell_id(cell)}")
                        results[cell_id(cell)] = run_cell(server, scheduler, ranks, cell)
                profiles += written
                for rank in ranks:
                    rank.send("paths")
                    paths["ranks"].append({"tp": tp, **rank.expect("transfer_context")})
            finally:
                scheduler.close()
                for rank in ranks:
                    rank.close()
    return results, paths, profiles


_round = iter(range(1, 10**6))


def run_cell(server, scheduler, ranks: list[Rank], cell: dict[str, int]) -> dict:  # type: ignore[no-untyped-def]
    chunks, concurrency = cell["chunks"], cell["concurrency"]
    tokens = chunks * CHUNK
    samples: dict = {"store": [], "retrieve": [], "store_wall": [], "retrieve_wall": [], "bytes_match": None}
    measured_from = None
    for rep in range(WARMUP + reps(cell)):
        if rep == WARMUP:
            measured_from = time.monotonic()
        elif measured_from and rep - WARMUP >= MIN_REPS and time.monotonic() - measured_from > CELL_SECONDS:
            break
        first = next(_round) * 4 * PROMPT_STRIDE
        clear_cache(server.http_port)
        for rank in ranks:
            rank.send(f"store {first} {chunks} {concurrency}")
        stored = [rank.expect("latencies") for rank in ranks]
        assert all(s["ok"] for s in stored), f"{cell_id(cell)}: a store failed"
        ids = []
        for request in range(concurrency):
            start = first + request * PROMPT_STRIDE
            prompt = list(range(start, start + tokens))
            request_id, hit = scheduler.lookup_until(f"r{first}-{request}", prompt, tokens, timeout=60)
            assert hit == tokens, f"{cell_id(cell)}: lookup found {hit} of {tokens} tokens (store dropped?)"
            ids.append(request_id)
        check = rep == WARMUP
        for rank in ranks:
            rank.send(f"retrieve {first} {chunks} {' '.join(ids)}" + (" check" if check else ""))
        retrieved = [rank.expect("latencies") for rank in ranks]
        for request_id in ids:
            scheduler.end_session(request_id)
        assert all(r["ok"] for r in retrieved), f"{cell_id(cell)}: a retrieve failed"
        if check:
            samples["bytes_match"] = all(r["bytes_match"] for r in retrieved)
        if rep >= WARMUP:
            for kind, got in (("store", stored), ("retrieve", retrieved)):
                samples[kind] += [max(rank["latencies"][i] for rank in got) for i in range(concurrency)]
                samples[f"{kind}_wall"].append(max(rank["wall"] for rank in got))
    return samples
