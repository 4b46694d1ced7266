# SPDX-License-Identifier: Apache-2.0
"""Soak: many store → lookup → retrieve cycles per transfer path via ``lmcache server``.

Not a unit test: ``python -m lmcache_device_kit.soak --package <import package>`` (a
project's ``nox -s soak``) prints figures and exits 1 when a target is missed. Per
transfer path (engine-driven pickle, engine-driven SHM, and LMCache-driven when the
spec offers it) it starts a server, one worker process (the kit's ``worker``) and a
scheduler, then runs ``--cycles`` cycles. Each
cycle stores a new prompt (its own KV bytes), polls the lookup until it hits,
retrieves into zeroed blocks and compares bytes; every tenth cycle also
re-reads a prompt stored five cycles earlier. The server's L1 holds about 300
prompts, so by the end of the warm-up (``--warmup`` cycles, before the measured
``--cycles``) LRU eviction keeps the cache at a constant size, and RSS growth
means a leak, not a fuller cache. Targets over the measured cycles: 0
mismatched bytes, RSS growth of worker and server under 5 %, no leaked
``/dev/shm`` segments or file descriptors. RSS is also printed every 250 cycles,
to tell a plateau from a leak.

Imports lmcache only once the backend is chosen (``--package``, else
``LMCACHE_DEVICE_KIT_PACKAGE``); its servers and worker import the installed plugin.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import argparse
import json
import os
import sys
import tempfile
import time

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.engine import Scheduler, Worker
from lmcache_device_kit.harness.servers import (
    CHUNK,
    plugin_server_env,
    running_server,
    shm_entries,
)
from lmcache_device_kit.harness.worker_kv import token_ids

TOKENS = 2 * CHUNK
#: How often RSS is sampled for its slope per cycle (printed every 250 cycles).
SAMPLE_EVERY = 25
#: ~20 MB: about 300 prompts of 2 layers x 128 tokens; eviction starts well inside the
#: warm-up.
L1_GB = 0.02


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def usage(worker_pid: int, server_pid: int) -> dict[str, int]:
    """RSS (KiB) and open file descriptors of the worker and the server."""
    return {
        "worker_rss": rss_kib(worker_pid),
        "server_rss": rss_kib(server_pid),
        "worker_fds": open_fds(worker_pid),
        "server_fds": open_fds(server_pid),
    }


def shm_mapped(*pids: int) -> set[str]:
    """The /dev/shm segments the processes ``pids`` map (what they created or opened):
    the only ones a soak may call its own."""
    names = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            if path.startswith("/dev/shm/"):
                names.add(path.removeprefix("/dev/shm/").removesuffix(" (deleted)"))
    return names


def kib_per_cycle(samples: list[tuple[int, int]]) -> float:
    """The least-squares slope of RSS (``samples``: cycle, KiB) per cycle, in KiB:
    about 0 for a plateau, a leak's size per cycle otherwise."""
    if len(samples) < 2:
        return 0.0
    mean_x = sum(x for x, _ in samples) / len(samples)
    mean_y = sum(y for _, y in samples) / len(samples)
    spread = sum((x - mean_x) ** 2 for x, _ in samples)
    return sum((x - mean_x) * (y - mean_y) for x, y in samples) / spread


def lmcache_driven_offered() -> bool:
    # First Party
    from lmcache.v1.platform import get_device_spec
    import lmcache  # noqa: F401 - selects the backend

    spec = get_device_spec(kit_backend.current().device_type)
    return bool(spec is not None and spec.is_lmcache_driven_available())


def soak_path(
    label: str,
    server_mode: str,
    worker_mode: str,
    shm: bool,
    cycles: int,
    warmup: int,
    work: Path,
) -> dict:
    shm_name = f"soak_{os.getpid()}" if shm else None
    server_env = plugin_server_env() if worker_mode == "lmcache_driven" else {}
    figures: dict = {
        "path": label,
        "cycles": cycles,
        "warmup": warmup,
        "rss_trace_mib": [],
    }
    with running_server(
        work / f"{label}-server.log".replace(" ", "_"),
        transfer_mode=server_mode,
        shm_name=shm_name,
        env=server_env,
        l1_size_gb=L1_GB,
        extra_args=lmcache_calls.kv_events_off(),
        wait_stop=True,
    ) as server:
        assert server.process is not None
        worker = Worker(
            server.url,
            model=f"soak-{worker_mode}",
            rank=0,
            world_size=1,
            tokens=TOKENS,
            log_path=work / f"{label}-worker.log".replace(" ", "_"),
            mode=worker_mode,
            env=server_env,
            extra_args=["--layers", "2"],
        )
        scheduler = Scheduler(server.url, f"soak-{worker_mode}", 1)
        mismatches = failures = rereads = 0
        baseline: dict[str, int] = {}
        samples: list[tuple[int, int, int]] = []  # cycle, worker KiB, server KiB
        started = time.monotonic()
        try:
            assert (
                worker.next_result()["phase"] == "store"
                and worker.next_result()["phase"] == "ready"
            )
            for cycle in range(warmup + cycles):
                first = 10_000 + cycle * TOKENS
                worker.store(first)
                stored = worker.next_result()
                failures += not stored["ok"]
                # the request is done: its session ends, as vLLM's scheduler ends it
                scheduler.end_session(stored["request_id"])
                reads = [first] + (
                    [first - 5 * TOKENS] if cycle >= 5 and cycle % 10 == 0 else []
                )
                for read in reads:
                    request_id, hit = scheduler.lookup_until(
                        f"c{cycle}-{read}", token_ids(TOKENS, read), TOKENS
                    )
                    if hit < TOKENS:
                        failures += 1
                        scheduler.end_session(request_id)
                        continue
                    worker.retrieve(request_id, read)
                    result = worker.next_result()
                    scheduler.end_session(request_id)
                    mismatches += not (result["ok"] and result["bytes_match"])
                    rereads += read != first
                if (cycle + 1) % SAMPLE_EVERY == 0:
                    sizes = (rss_kib(worker.process.pid), rss_kib(server.process.pid))
                    samples.append((cycle + 1, *sizes))
                if (cycle + 1) % 250 == 0:
                    figures["rss_trace_mib"].append(
                        (cycle + 1, *(round(kib / 1024) for kib in sizes))
                    )
                if cycle + 1 == warmup:
                    baseline = usage(worker.process.pid, server.process.pid)
            final = usage(worker.process.pid, server.process.pid)
            own_shm = shm_mapped(worker.process.pid, server.process.pid)
            own_shm |= {shm_name} if shm_name else set()
            figures["seconds"] = round(time.monotonic() - started, 1)
        finally:
            scheduler.close()
            worker.close()
    figures.update(
        mismatched_cycles=mismatches,
        failed_cycles=failures,
        rereads=rereads,
        worker_rss_growth_pct=round(
            100 * (final["worker_rss"] / baseline["worker_rss"] - 1), 2
        ),
        server_rss_growth_pct=round(
            100 * (final["server_rss"] / baseline["server_rss"] - 1), 2
        ),
        worker_rss_mib=round(final["worker_rss"] / 1024, 1),
        server_rss_mib=round(final["server_rss"] / 1024, 1),
        fd_growth=final["worker_fds"]
        - baseline["worker_fds"]
        + final["server_fds"]
        - baseline["server_fds"],
        leaked_shm=sorted(own_shm & shm_entries()),
    )
    # After the warm-up (the rings full): a plateau is about 0 KiB per cycle.
    for side, column in (("worker", 1), ("server", 2)):
        measured = [(t[0], t[column]) for t in samples if t[0] >= warmup]
        figures[f"{side}_kib_per_cycle"] = round(kib_per_cycle(measured), 2)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cycles", type=int, default=1000, help="measured cycles, after the warm-up"
    )
    parser.add_argument(
        "--warmup", type=int, default=1000, help="cycles before the RSS and fd baseline"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--paths",
        nargs="*",
        help="only these paths (default: all), e.g. 'engine-driven pickle'",
    )
    kit_backend.add_package_option(parser)
    args = parser.parse_args()
    if args.warmup < 1 or args.cycles < 1:
        parser.error("--warmup and --cycles must be positive")
    # the kit's harness serves this backend, here and in the worker and servers
    kit_backend.chosen(args.package)
    paths = [
        ("engine-driven pickle", "engine_driven", "engine_driven", False),
        ("engine-driven SHM", "engine_driven", "engine_driven", True),
    ]
    if lmcache_driven_offered():
        paths.append(("lmcache-driven", "lmcache_driven", "lmcache_driven", False))
    paths = [p for p in paths if not args.paths or p[0] in args.paths]
    results = []
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        for label, server_mode, worker_mode, shm in paths:
            results.append(
                soak_path(
                    label,
                    server_mode,
                    worker_mode,
                    shm,
                    args.cycles,
                    args.warmup,
                    Path(tmp),
                )
            )
            print(json.dumps(results[-1]), flush=True)
    print(
        f"\n{'path':<22}{'cycles':>7}{'s':>7}{'bad':>5}{'fail':>5}"
        f"{'wRSS%':>8}{'sRSS%':>8}{'wKiB/c':>8}{'sKiB/c':>8}{'fds':>5}  shm"
    )
    problems = []
    for r in results:
        print(
            f"{r['path']:<22}{r['cycles']:>7}{r['seconds']:>7}"
            f"{r['mismatched_cycles']:>5}{r['failed_cycles']:>5}"
            f"{r['worker_rss_growth_pct']:>8}{r['server_rss_growth_pct']:>8}"
            f"{r['worker_kib_per_cycle']:>8}{r['server_kib_per_cycle']:>8}"
            f"{r['fd_growth']:>5}  {r['leaked_shm'] or '-'}"
        )
        if r["mismatched_cycles"] or r["failed_cycles"]:
            problems.append(
                f"{r['path']}: {r['mismatched_cycles']} mismatched, "
                f"{r['failed_cycles']} failed cycles"
            )
        for side in ("worker", "server"):
            growth = r[f"{side}_rss_growth_pct"]
            if growth >= 5:
                problems.append(
                    f"{r['path']}: {side} RSS grew {growth} % after warm-up"
                )
        if r["fd_growth"] > 0 or r["leaked_shm"]:
            problems.append(
                f"{r['path']}: leaked {r['fd_growth']} fds, shm {r['leaked_shm']}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print("\n" + ("\n".join(problems) if problems else "all soak targets met"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
