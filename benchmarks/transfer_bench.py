# SPDX-License-Identifier: Apache-2.0
"""KV transfer benchmark of a rendered, installed sample plugin (run by ``nox -s bench``).

Measures in one run on one machine, side by side (bench_plan.py holds the plan):

* op level: gather (D2H) and scatter (H2D) of one request through LMCache's
  engine-driven call sites, per setup (native foo, LMCache's torch baseline on
  foo, LMCache's CPU path with glibc's default allocator and with glibc keeping
  freed memory), and a host memcpy of the same bytes, in OP_PROCESSES
  processes per setup;
* end to end through real ``lmcache server`` processes: store and retrieve per
  setup and transfer mode (engine-driven SHM, LMCache-driven), sweeping the
  prompt (1-64 chunks), concurrent requests (1-4) and TP (1, 2) one at a time;
  p50/p99 latency and GB/s. The setups of a mode run side by side, their rounds
  in turn, with the memcpy yardstick timed between rounds (bench_e2e.py);
* with ``--cluster``, two nodes: store on node A, retrieve on node B through
  each L2 (fs, resp on a real Redis, P2P through nixl), beside the single-node
  base cell (bench_cluster.py).

Then it checks that nothing took a silent slow path (bench_paths.py), prints
the tables and every target as met or missed, and writes bench.json, one plot
per swept dimension and, for a missed target, a py-spy profile of its cell.
LMCache's own logs go to files under ``<out>/logs``. Exit status 1 when a path
degraded or a target was missed (``--no-fail-on-miss`` to only report misses).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cluster  # noqa: E402
import bench_counts  # noqa: E402
import bench_e2e  # noqa: E402
import bench_paths  # noqa: E402
import bench_report  # noqa: E402
from lmcache_device_kit import projection  # noqa: E402
from bench_plan import (  # noqa: E402
    LATENCY_ENV_VAR, LAUNCH_LATENCY_US, MODES, OP_PROCESSES, SETUPS, SWEEPS, cell_id, cells,
)  # fmt: skip

HERE = Path(__file__).resolve().parent
#: The environment of every process the benchmark starts (they log to files).
BASE_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "LMCACHE_TRACK_USAGE": "false", "PYTHONPATH": str(HERE)}
# This process's own LMCache (the scheduler's lookups) logs errors only: the terminal
# shows progress and figures.
os.environ["LMCACHE_LOG_LEVEL"] = "ERROR"


def child_env(overrides: dict[str, str | None]) -> dict[str, str]:
    env = dict(BASE_ENV)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, what: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {what}", flush=True)


def run_ops(reps: int, package: str, setups: list[str], progress: Progress) -> dict:
    """Each setup's op level in OP_PROCESSES processes, the setups in turn, ``reps``
    calls per op in all: {setup: report with every call's times and, under
    "processes", each process's}."""
    results: dict = {}
    for run in range(OP_PROCESSES):
        for setup in setups:
            overrides, device = SETUPS[setup]
            progress(f"op level / {setup} ({run + 1}/{OP_PROCESSES})")
            done = subprocess.run(
                [sys.executable, str(HERE / "bench_ops.py"), str(-(-reps // OP_PROCESSES)), package, device],
                env=child_env(overrides), capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"op benchmark {setup!r} failed:\n{done.stderr[-4000:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            merged = results.setdefault(setup, {**report, "times": {}, "processes": [], "native_calls": {},
                                                "slow_paths": {}})  # fmt: skip
            merged["processes"].append(report["times"])
            for op, times in report["times"].items():
                merged["times"].setdefault(op, []).extend(times)
            for key in ("native_calls", "slow_paths"):
                for name, count in report[key].items():
                    merged[key][name] = merged[key].get(name, 0) + count
            if report["native_bound"] != merged["native_bound"]:
                merged["native_bound"] = False  # bound in some processes only: degraded
    return results


def op_findings(ops: dict) -> list[str]:
    """What the op-level processes' reports say degraded (native ops, slow paths)."""
    found = []
    for setup, result in ops.items():
        found += [f"{setup} / op level: {f}" for f in bench_paths.native_findings(setup, result)]
        found += [f"{setup} / op level: slow path {kind} x{n}" for kind, n in result["slow_paths"].items()]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="lmcache_foo", help="the installed plugin's import package")
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--op-reps", type=int, default=100)
    parser.add_argument("--modes", nargs="+", choices=[*MODES], default=[*MODES], help="(default: all)")
    parser.add_argument("--setups", nargs="+", choices=[*SETUPS], default=[*SETUPS], help="(default: all)")
    parser.add_argument("--dimensions", nargs="+", choices=[*SWEEPS, "base"], default=[*SWEEPS],
                        help="swept dimensions (default: all; base: the base cell alone); targets need every setup, "
                        "mode and dimension")
    parser.add_argument("--cluster", action="store_true",
                        help="also the two-node cell (bench_cluster.py): store on node A, retrieve on node B through "
                        "each L2 (fs, resp, p2p), beside the single-node base cell")
    parser.add_argument("--no-fail-on-miss", action="store_true", help="exit 0 on a missed target")
    parser.add_argument("--no-profile", action="store_true", help="no py-spy profile of missed targets")
    parser.add_argument("--device", type=Path,
                        help="a pyproject.toml whose [tool.lmcache-device-kit.device] describes the device the counts "
                        "are projected on (default: the kit's PCIe Gen5 accelerator)")
    parser.add_argument("--launch-latency-us", type=int, default=LAUNCH_LATENCY_US,
                        help=f"foo's emulated launch latency (default {LAUNCH_LATENCY_US}; the test suite's is 200)")
    args = parser.parse_args()
    try:  # before measuring: a description the projection cannot use stops the run here
        device = projection.load(args.device) if args.device else projection.Device()
    except projection.DeviceDescriptionError as error:
        parser.error(str(error))
    BASE_ENV[LATENCY_ENV_VAR] = str(args.launch_latency_us)
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    mark = importlib.import_module(f"{args.package}.names").SLOW_PATH_MARK
    lmcache = metadata.version("lmcache")  # every cell's: servers and ranks run in this environment
    progress = Progress()
    progress(f"lmcache {lmcache}, torch {metadata.version('torch')}")
    ops = run_ops(args.op_reps, args.package, args.setups, progress)
    complete = (args.modes, args.setups, args.dimensions) == ([*MODES], [*SETUPS], [*SWEEPS])
    found = op_findings(ops)
    e2e: dict = {}
    plan = cells(args.dimensions)
    copies: dict = {}
    for mode in args.modes:
        samples, copies[mode], paths, _ = bench_e2e.run_mode(
            args.package, args.setups, mode, plan, logs, child_env, progress
        )
        for setup in args.setups:
            e2e.setdefault(setup, {})[mode] = {
                cell_id(c): {**bench_report.summarize(c, samples[setup][cell_id(c)]), "lmcache": lmcache} for c in plan
            }
            logged = (paths[setup]["server_log"], *paths[setup]["rank_logs"])
            texts = {p: Path(p).read_text(errors="replace") for p in logged}
            found += bench_paths.findings(setup, mode, paths[setup], texts, mark)
            found += [f"{setup} / {mode} / {c}: retrieved bytes differ"
                      for c, r in e2e[setup][mode].items() if r["bytes_match"] is False]  # fmt: skip
    cluster = bench_cluster.run(args.package, args.setups, args.modes, logs, child_env, progress) if args.cluster else {}
    for by_l2 in (by_l2 for by_setup in cluster.values() for by_l2 in by_setup.values()):
        for result in by_l2.values():
            result["lmcache"] = lmcache
    for mode, by_setup in cluster.items():
        found += [f"{setup} / {mode} / two nodes via {l2}: retrieved bytes differ"
                  for setup, by_l2 in by_setup.items() for l2, r in by_l2.items() if r.get("bytes_match") is False]  # fmt: skip
    progress("done measuring")
    print(f"\nlmcache {lmcache}; foo's emulated launch latency: {args.launch_latency_us} us (--launch-latency-us)")
    bench_report.print_tables(ops, e2e, copies)
    if cluster:
        bench_cluster.print_table(cluster, e2e)
    bench_counts.print_table(e2e)
    bench_counts.print_projection(e2e, device)
    counted = bench_counts.targets(e2e, args.modes)
    print("\nCounted targets (exact: whole counts, no interval; native foo, every cell and kind)")
    for row in counted:
        print(f"  {row['verdict']:<20} {row['name']}")
        for miss in row["misses"]:
            print(f"  {'':<22}{miss}")
    note = bench_report.regime_note(ops, e2e) if complete else ""
    print(f"\n{note}")
    rows = bench_report.targets(ops, e2e, copies) if complete else []
    print("\nTargets (ratios of figures of this run)")
    for row in rows:
        print(f"  {row['verdict']:<20} {row['name']}: {row['ratio']:.2f} "
              f"(95% interval {row['low']:.2f}-{row['high']:.2f}, limit {row['limit']:g})")  # fmt: skip
        if "bound" in row:
            print(f"  {'':<22}bound: {row['bound']}")
    print("\nSlow paths: " + ("none: every process took the path its setup asks for" if not found else ""))
    for finding in found:
        print(f"  DEGRADED {finding}")
    written = [bench_report.write(args.out, ops, e2e, copies, rows + counted, found, note, args.launch_latency_us,
                                    dataclasses.asdict(device), cluster, lmcache)]
    if complete:
        written += bench_report.plot(e2e, args.out)
    print("\nwrote " + ", ".join(str(p) for p in written))
    missed = [row for row in rows if not row["met"]]
    missed_counts = [row for row in counted if not row["met"]]
    if missed and not args.no_profile:
        print("profiles of missed targets: " + ", ".join(profile_missed(args, missed, progress)))
    return 1 if found or ((missed or missed_counts) and not args.no_fail_on_miss) else 0


def profile_missed(args: argparse.Namespace, missed: list[dict], progress: Progress) -> list[str]:
    """Re-run what is behind missed targets under py-spy: an end-to-end cell (server and
    ranks), or the op-level benchmark."""
    import bench_profile

    return bench_profile.profile(args, missed, child_env, progress)


if __name__ == "__main__":
    sys.exit(main())
