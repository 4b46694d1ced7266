# SPDX-License-Identifier: Apache-2.0
"""The benchmark's verdicts: a silently degraded path is caught, targets are ratios.

``nox -s bench`` fails when a process took a slower path than its setup asks
for; these feed ``benchmarks/bench_paths.py`` the logs and reports of degraded
runs (the traps vendors meet) and check each is named, and that a healthy run
passes. No server runs here: the measuring itself is the benchmark's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_paths  # noqa: E402
import bench_plan  # noqa: E402
import bench_report  # noqa: E402

MARK = "foo slow path:"
SHM_WORKER = "\x1b[32m[x] LMCache INFO:\x1b[0m Worker engine-driven context registered (..., mode=SHM)\n"
PICKLE_WORKER = SHM_WORKER.replace("mode=SHM", "mode=pickle")
NATIVE_SERVER = "FooDeviceOps: serving pointer-mode multi_layer_block_kv_transfer (native kernels)\n"
NATIVE_RANK = {
    "transfer_context": "AsyncEngineDrivenTransferContext",
    "native_bound": True,
    "native_calls": {"multi_layer_block_kv_transfer:native": 12},
    "slow_paths": {},
}


def run(mode: str, rank: dict, rank_log: str, server_log: str, setup: str = "native foo") -> list[str]:
    paths = {"server_log": "server.log", "rank_logs": ["rank0.log"], "ranks": [rank]}
    return bench_paths.findings(setup, mode, paths, {"server.log": server_log, "rank0.log": rank_log}, MARK)


def test_healthy_runs_of_both_modes_have_no_findings() -> None:
    assert run("engine-driven SHM", NATIVE_RANK, SHM_WORKER, "") == []
    lmcache_rank = {**NATIVE_RANK, "transfer_context": "LMCacheDrivenTransferContext", "native_calls": {}}
    assert run("lmcache-driven", lmcache_rank, "", NATIVE_SERVER) == []


def test_a_worker_served_by_pickle_by_an_shm_server_is_degraded() -> None:
    """The lazy-L1 trap: the server has an SHM pool, the worker still gets pickle."""
    (finding,) = run("engine-driven SHM", NATIVE_RANK, PICKLE_WORKER, "")
    assert "served by pickle" in finding and finding.startswith("native foo / engine-driven SHM")


def test_a_slow_path_line_in_any_log_is_degraded() -> None:
    line = f"\x1b[33mLMCache WARNING:\x1b[0m {MARK} pageable host memory: copies 8 bytes\n"
    found = run("lmcache-driven", {**NATIVE_RANK, "transfer_context": "LMCacheDrivenTransferContext"}, "",
                NATIVE_SERVER + line)  # fmt: skip
    assert found == [f"native foo / lmcache-driven: server: {MARK} pageable host memory: copies 8 bytes"]


@pytest.mark.parametrize(
    ("rank", "expected"),
    [
        ({**NATIVE_RANK, "native_bound": False}, "not bound"),
        ({**NATIVE_RANK, "native_calls": {"multi_layer_block_kv_transfer:fallback": 3}}, "fell back"),
        ({**NATIVE_RANK, "transfer_context": "LMCacheDrivenTransferContext"}, "not engine-driven"),
    ],
    ids=["native-not-bound", "native-fell-back", "wrong-mode"],
)
def test_a_native_setup_whose_worker_did_not_run_the_kernels_is_degraded(rank: dict, expected: str) -> None:
    (finding,) = run("engine-driven SHM", rank, SHM_WORKER, "")
    assert expected in finding


def test_a_server_running_pointer_mode_on_the_baseline_degrades_the_native_setup() -> None:
    rank = {**NATIVE_RANK, "transfer_context": "LMCacheDrivenTransferContext"}
    on_baseline = NATIVE_SERVER.replace("native kernels", "torch baseline")
    assert "on the torch baseline" in run("lmcache-driven", rank, "", on_baseline)[0]
    assert "never ran" in run("lmcache-driven", rank, "", "")[0]
    assert run("lmcache-driven", {**rank, "native_bound": False}, "", on_baseline, setup="baseline foo") == []


def test_the_sweep_varies_one_dimension_at_a_time_around_one_base_cell() -> None:
    cells = bench_plan.cells()
    assert len(cells) == len({bench_plan.cell_id(c) for c in cells}) == 7
    for cell in cells:
        assert sum(cell[d] != bench_plan.BASE[d] for d in bench_plan.BASE) <= 1
    assert bench_plan.OP_CHUNKS == bench_plan.BASE["chunks"], "memcpy time must be for the base cell's bytes"


def test_percentiles_interpolate_and_p99_of_few_samples_is_near_the_slowest() -> None:
    samples = [float(v) for v in range(1, 11)]
    assert bench_report.pct(samples, 50) == pytest.approx(5.5)
    assert bench_report.pct(samples, 99) == pytest.approx(9.91)
    assert bench_report.pct([3.0], 99) == 3.0


def test_a_ratio_within_the_runs_noise_of_its_limit_is_a_miss_not_a_coin_toss() -> None:
    """Met needs the whole 95% interval above the limit; an interval across it is a miss
    in every run (two runs agree), and the interval is the same for the same samples."""
    fast, slow = [1.0, 1.02, 0.98, 1.01, 0.99] * 6, [1.5, 1.53, 1.47, 1.52, 1.48] * 6
    noisy = [1.0, 1.6, 0.7, 1.3, 0.8] * 6
    clear = {"limit": 1.4, **dict(zip(("ratio", "low", "high"), bench_report.interval(slow, fast), strict=True))}
    assert bench_report.verdict(clear) == "MET"
    across = {"limit": 1.4, **dict(zip(("ratio", "low", "high"), bench_report.interval(slow, noisy), strict=True))}
    assert across["ratio"] >= 1.4 and bench_report.verdict(across) == "MISS (within noise)"
    assert bench_report.verdict({**clear, "limit": 2.0}) == "MISS"
    assert bench_report.interval(slow, noisy) == bench_report.interval(slow, noisy)
