# SPDX-License-Identifier: Apache-2.0
"""The two-node cell of ``nox -s bench`` (``--cluster``): store on node A, retrieve on node B.

Two real ``lmcache server`` processes stand for two nodes, as in the kit's cluster
tests (``lmcache_device_kit.harness``: ``nodes``, ``redis``, ``coordinator``): they
share an ``fs`` directory or a real Redis (``resp``), or have no L2 and move KV peer
to peer through a coordinator (``p2p``, where its transfer engine is installed).
Per transfer mode, setup and L2: one ``bench_worker.py`` rank per node (A's on
device 0, B's on device 1), the base cell's request (4 chunks x 1 request, TP=1).
Each round: A stores a new prompt; after SETTLE_S (A's L2 write lands in the
background within 10-30 ms here; P2P has nothing to wait for) B looks it up once,
timed (its server loads the chunks from the L2 or the peer into its L1), then B's
rank retrieves it, timed; the first measured round compares the retrieved bytes.
The figure beside the single-node cell is B's lookup plus retrieve: what a request
on another node pays that one on the same node does not.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Any

from bench_e2e import Rank, clear_cache, worker_argv
from bench_plan import BASE, BLOCK, CHUNK, CHUNK_BYTES, MODES, PROMPT_STRIDE, SETUPS, cell_id
from bench_report import pct

L2S = ("fs", "resp", "p2p")
#: Measured rounds per cell, after one uncounted round; each leaves a request in the L2.
ROUNDS, WARMUP = 8, 1
SETTLE_S = 0.3
#: Each node's L1: two requests and room, a multiple of 4 KiB (P2P channels register it in pages).
L1_GB = 0.5625
_prompts = itertools.count(1 << 14)  # first tokens past bench_e2e's rounds


def request_bytes() -> int:
    return BASE["chunks"] * BASE["concurrency"] * CHUNK_BYTES


def summarize(samples: dict[str, list[float]], nbytes: int) -> dict:
    """p50/p99 (ms) and GB/s (bytes over the median) of each timed step, and of B's
    lookup plus retrieve, round by round."""
    both = [a + b for a, b in zip(samples["lookup"], samples["retrieve"], strict=True)]
    out: dict = {"bytes_match": samples.get("bytes_match"), "late_rounds": samples.get("late", 0)}
    for kind, times in (*((k, samples[k]) for k in ("store", "lookup", "retrieve")), ("lookup+retrieve", both)):
        out[kind] = {"p50_ms": pct(times, 50) * 1e3, "p99_ms": pct(times, 99) * 1e3,
                     "gbps": nbytes / statistics.median(times) / 1e9, "latencies": times}  # fmt: skip
    return out


def unavailable(l2: str) -> str | None:
    """Why an L2 cannot run here (what to install), or None."""
    if l2 == "p2p":
        from lmcache_device_kit.harness.coordinator import missing_engine

        return missing_engine("nixl")
    if l2 == "resp":
        from lmcache_device_kit.harness.redis import find_binary

        try:
            find_binary()
        except FileNotFoundError as error:
            return str(error)
    return None


@contextmanager
def shared(l2: str, work: Path) -> Iterator[tuple[dict | None, Callable[[], tuple[str, ...]]]]:
    """The L2 both nodes' servers name (the kit's ``new_shared_l2``; none for P2P), and
    each server's extra flags (P2P's, through a coordinator)."""
    from lmcache_device_kit.harness.coordinator import Coordinator
    from lmcache_device_kit.harness.shared_l2 import new_shared_l2

    if l2 == "p2p":
        with Coordinator(work / "coordinator.log") as hub:
            yield None, hub.server_args
        return
    with new_shared_l2(l2, work) as l2_of_both:
        yield l2_of_both.adapter, tuple


def run_cell(package: str, setup: str, mode: str, l2: str, work: Path,
             child_env: Callable[[dict], dict[str, str]]) -> dict:  # fmt: skip
    """One two-node cell: its samples ({"store", "lookup", "retrieve": [s per round]})."""
    from lmcache_device_kit.harness import nodes
    from lmcache_device_kit.harness.coordinator import wait_for_peers
    from lmcache_device_kit.harness.scheduler import Scheduler

    overrides, device = SETUPS[setup]
    server_mode, worker_mode, _ = MODES[mode]
    slug = f"{setup}-{mode}-{l2}".replace(" ", "_").replace(",", "")
    work = work / slug
    work.mkdir(parents=True, exist_ok=True)
    with shared(l2, work) as (adapter, flags), ExitStack() as stack:
        pair = [nodes.start_server(name, server_mode, adapter, work, flags(), chunk_size=CHUNK,
                                   l1_size_gb=L1_GB, env={**overrides, "LMCACHE_LOG_LEVEL": None})
                for name in "AB"]  # fmt: skip
        stack.enter_context(nodes.running_pair(pair))
        if l2 == "p2p":
            wait_for_peers(pair)
        model = f"bench-cluster-{slug}"
        env = child_env({**overrides, "OMP_NUM_THREADS": "1"})
        a, b = (stack.enter_context(closing(Rank(
            worker_argv(package, server.url, model, worker_mode, device, BASE["chunks"], device_index=index), env,
            work / f"rank-{name}.log"))) for index, (name, server) in enumerate(zip("AB", pair, strict=True)))  # fmt: skip
        scheduler = Scheduler(pair[1].url, model, 1, BLOCK, mq_timeout=60.0)
        stack.callback(scheduler.close)
        samples: dict = {"store": [], "lookup": [], "retrieve": [], "bytes_match": None, "late": 0}
        for rep in range(WARMUP + ROUNDS):
            one_round(pair, a, b, scheduler, samples, measured=rep >= WARMUP, check=rep == WARMUP)
    return samples


def one_round(pair: list, a: Rank, b: Rank, scheduler: Any, samples: dict, measured: bool, check: bool) -> None:
    """A stores a new prompt, B looks it up (timed) and retrieves it (timed)."""
    chunks, first = BASE["chunks"], next(_prompts) * 4 * PROMPT_STRIDE
    tokens = list(range(first, first + chunks * CHUNK))
    for server in pair:
        clear_cache(server.http_port)
    a.send(f"store {first} {chunks} 1")
    stored = a.expect("latencies")
    assert stored["ok"], "node A's store failed"
    time.sleep(SETTLE_S)
    request_id = f"cluster-{first}"
    began = time.perf_counter()
    hit = scheduler.lookup(request_id, tokens)
    lookup = time.perf_counter() - began
    if hit < len(tokens):  # the L2 write had not landed: not a figure of the transfer
        scheduler.release(request_id, tokens, hit)
        request_id, hit = scheduler.lookup_until(f"{request_id}-late", tokens, len(tokens), timeout=60)
        assert hit == len(tokens), f"node B found {hit} of {len(tokens)} tokens node A stored"
        samples["late"] += measured
        measured = False
    b.send(f"retrieve {first} {chunks} {request_id}" + (" check" if check else ""))
    retrieved = b.expect("latencies")
    scheduler.end_session(request_id)
    assert retrieved["ok"], "node B's retrieve failed"
    if check:
        samples["bytes_match"] = retrieved["bytes_match"]
    if measured:
        samples["store"] += stored["latencies"]
        samples["lookup"].append(lookup)
        samples["retrieve"] += retrieved["latencies"]


def run(package: str, setups: list[str], modes: list[str], log_dir: Path,
        child_env: Callable[[dict], dict[str, str]], progress: Callable[[str], None]) -> dict:  # fmt: skip
    """Every two-node cell: {mode: {setup: {l2: summary or {"skipped": why}}}}."""
    from lmcache_device_kit import backend

    backend.use(package)  # the kit's nodes start LMCache-driven servers with this plugin
    results: dict = {}
    for mode in modes:
        for setup in setups:
            for l2 in L2S:
                why = unavailable(l2)
                cell = results.setdefault(mode, {}).setdefault(setup, {})
                if why:
                    cell[l2] = {"skipped": why}
                    continue
                progress(f"two nodes / {mode} / {setup} / {l2}")
                samples = run_cell(package, setup, mode, l2, log_dir / "cluster", child_env)
                cell[l2] = summarize(samples, request_bytes())
    return results


def print_table(cluster: dict, e2e: dict) -> None:
    print(f"\nTwo nodes, {cell_id(BASE)} ({request_bytes() >> 20} MiB): store on A (device 0); B (device 1) looks"
          " up (L2 or peer -> B's L1) and retrieves; one node: the same cell on one server")  # fmt: skip
    print(f"  {'mode':<19}{'setup':<14}{'L2':<6}{'A store':>8}{'B lookup':>9}{'B retr':>8}{'B both':>8}"
          f"{'1 node store':>13}{'retr':>6}   (GB/s; B lookup p50 ms)")  # fmt: skip
    for mode, by_setup in cluster.items():
        for setup, by_l2 in by_setup.items():
            one = e2e.get(setup, {}).get(mode, {}).get(cell_id(BASE))
            single = f"{one['store']['gbps']:>13.2f}{one['retrieve']['gbps']:>6.2f}" if one else f"{'n/a':>13}{'':>6}"
            for l2, r in by_l2.items():
                if "skipped" in r:
                    print(f"  {mode:<19}{setup:<14}{l2:<6}skipped: {r['skipped']}")
                    continue
                bad = "" if r["bytes_match"] else "  BYTES DIFFER"
                print(f"  {mode:<19}{setup:<14}{l2:<6}{r['store']['gbps']:>8.2f}{r['lookup']['p50_ms']:>9.1f}"
                      f"{r['retrieve']['gbps']:>8.2f}{r['lookup+retrieve']['gbps']:>8.2f}{single}{bad}")  # fmt: skip
