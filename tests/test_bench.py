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


class FakeLane:
    """A setup's lane without a server: records its turns; ``seconds`` per measured round."""

    def __init__(self, setup: str, turns: list[str], seconds: float) -> None:
        self.setup, self.turns, self.seconds = setup, turns, seconds
        self.spent, self.measured, self.checked = 0.0, 0, 0

    def start_cell(self) -> None:
        self.spent, self.measured, self.checked = 0.0, 0, 0

    def round(self, cell: dict, measured: bool, check: bool) -> None:
        self.turns.append(self.setup)
        self.checked += check
        if measured:
            self.measured += 1
            self.spent += self.seconds


def test_the_setups_of_a_cell_take_turns_each_round_and_a_slow_one_stops_alone() -> None:
    """Side by side: a drift during the cell moves every setup alike, none always follows
    another, and LMCache's slow baseline leaves after its minimum without cutting the rest."""
    import bench_e2e

    turns: list[str] = []
    fast = [FakeLane(name, turns, 0.01) for name in ("a", "b")]
    slow = FakeLane("slow", turns, bench_plan.CELL_SECONDS)
    cell = {**bench_plan.BASE, "chunks": 16}
    copies = bench_e2e.run_cell([*fast, slow], cell, lambda: ([0.001, 0.002], [0.003]))
    assert turns[:9] == ["a", "b", "slow", "b", "slow", "a", "slow", "a", "b"]
    assert slow.measured == bench_plan.MIN_REPS
    assert [lane.measured for lane in fast] == [bench_plan.reps(cell)] * 2
    assert [lane.checked for lane in (*fast, slow)] == [1, 1, 1], "the first measured round compares bytes"
    assert len(copies["one"]) == 2 * bench_plan.reps(cell), "a memcpy after every measured round"
    assert len(copies["two"]) == bench_plan.reps(cell), "and two side by side"


def synthetic_run(
    native_ms: float, cpu_ms: float, cell_memcpy_ms: float, op_memcpy_ms: float, two_memcpys_ms: float | None = None,
    two_requests_ms: float | None = None,
) -> tuple:  # fmt: skip
    """ops, e2e and cell memcpys of a complete run whose every sample is the same (two
    concurrent requests take ``two_requests_ms``, two memcpys side by side ``two_memcpys_ms``:
    by default as long as one, twice the throughput)."""
    two = {**bench_plan.BASE, "concurrency": 2}
    cells = [bench_plan.BASE, {**bench_plan.BASE, "chunks": max(bench_plan.SWEEPS["chunks"])}, two]

    def summary(ms: float) -> dict:
        out = {}
        for c in cells:
            wall = (two_requests_ms or ms) if c == two else ms
            samples = {kind: [wall / 1e3] * 10 for kind in ("store", "retrieve", "store_wall", "retrieve_wall")}
            out[bench_plan.cell_id(c)] = bench_report.summarize(c, {**samples, "bytes_match": True})
        return out

    times = {"gather": [0.004] * 10, "scatter": [0.004] * 10, "memcpy": [op_memcpy_ms / 1e3] * 10}
    ops = {"native foo": {"times": times, "processes": [times, times]}}
    e2e = {setup: {mode: summary(native_ms if setup == "native foo" else cpu_ms) for mode in bench_plan.MODES}
           for setup in ("native foo", *bench_plan.CPU_SETUPS)}  # fmt: skip
    memcpys = {"one": [cell_memcpy_ms / 1e3] * 10, "two": [(two_memcpys_ms or cell_memcpy_ms) / 1e3] * 10}
    copies = {mode: {bench_plan.cell_id(c): memcpys for c in cells} for mode in bench_plan.MODES}
    return ops, e2e, copies


def test_an_end_to_end_target_reads_the_memcpy_timed_in_its_own_cells_rounds() -> None:
    """The yardstick of an end-to-end target is timed alongside it, not minutes earlier at op
    level: a drift between the two must not move the verdict."""
    rows = {r["name"]: r for r in bench_report.targets(*synthetic_run(10.0, 20.0, 3.0, 6.0))}
    within = next(r for name, r in rows.items() if name.startswith("lmcache-driven store") and "memcpy time" in name)
    assert within["ratio"] == pytest.approx(bench_plan.WITHIN_MEMCPY * 3.0 / 10.0) and not within["met"]
    vs_cpu = next(r for name, r in rows.items() if name.startswith("lmcache-driven store") and "/ native foo" in name)
    assert vs_cpu["ratio"] == pytest.approx(2.0) and vs_cpu["met"]
    big = next(r for name, r in rows.items() if "64 chunks" in name and name.startswith("engine-driven SHM retrieve"))
    assert big["ratio"] == pytest.approx(3.0 * 16 / 10.0)
    gather = next(r for name, r in rows.items() if "native gather" in name)
    assert gather["ratio"] == pytest.approx(6.0 / 4.0), "op level keeps the memcpy timed among its ops"


@pytest.mark.parametrize(
    ("two_memcpys_ms", "two_requests_ms", "limit", "met"),
    [
        (3.0, 15.0, 1.3, True),  # memcpys gain 2x: the target is 1.3x; two requests reach 2 x 10 / 15 = 1.33x
        (3.0, 16.0, 1.3, False),  # 1.25x
        (5.0, 16.0, 0.8 * 1.2, True),  # memcpys gain only 1.2x: 0.8 of that is enough
        (5.0, 22.0, 0.8 * 1.2, False),  # 0.91x: less than 0.96
    ],
)
def test_two_concurrent_requests_are_held_to_what_two_memcpys_side_by_side_reach_on_this_machine(
    two_memcpys_ms: float, two_requests_ms: float, limit: float, met: bool
) -> None:
    """2 cores: where two host memcpys gain less than 1.3x over one, two requests are held to
    0.8 of their gain, measured in the same cell's rounds."""
    rows = bench_report.targets(*synthetic_run(10.0, 20.0, 3.0, 6.0, two_memcpys_ms, two_requests_ms))
    concurrent = [r for r in rows if "2 concurrent requests" in r["name"]]
    assert len(concurrent) == 2 * len(bench_plan.MODES)
    assert all(r["limit"] == pytest.approx(limit) and r["met"] is met for r in concurrent)
    assert concurrent[0]["ratio"] == pytest.approx(2 * 10.0 / two_requests_ms)


def test_a_profile_charges_samples_to_the_transfer_not_to_the_benchmarks_own_waits(tmp_path: Path) -> None:
    import bench_profile

    wait = "_bootstrap (threading.py:1012);main (bench_worker.py:190);run (bench_worker.py:117);join (threading.py:1119)"
    server = "_bootstrap (threading.py:1012);wait (lmcache/v1/multiprocess/futures.py:86)"
    kernel = "0x7f00;start_thread (libc.so.6);block_copy_kernel (_kernels.so)"
    idle = "0x7f00;start_thread (libc.so.6);worker_loop (emulator.so);pthread_cond_wait (libc.so.6)"
    timed = "0x7f00;start_thread (libc.so.6);poll_loop (libzmq.so);pthread_cond_timedwait (libc.so.6)"
    path = tmp_path / "rank0.txt"
    path.write_text(f"{wait} 700\n{server} 200\n{kernel} 100\n{idle} 5000\n{timed} 900\n")
    assert bench_profile.top_frames(path) == [
        "66.7% wait (lmcache/v1/multiprocess/futures.py:86)",
        "33.3% block_copy_kernel (_kernels.so)",
    ]


def test_an_op_level_interval_spans_the_spread_between_processes_not_only_between_calls() -> None:
    """Each process's calls agree closely, but one process runs 10 % slower (where its
    buffers landed): a ratio near the limit must not read as met from one lucky process."""
    memcpy = [2.5 + 0.01 * (i % 3) for i in range(30)]
    pairs = [(memcpy, [3.1 + 0.01 * (i % 3) for i in range(30)]), (memcpy, [3.2 + 0.01 * (i % 3) for i in range(30)]),
             (memcpy, [3.5 + 0.01 * (i % 3) for i in range(30)])]  # fmt: skip
    ratio, low, high = bench_report.process_interval(pairs)
    assert low < 2.5 / 3.4 < 0.75 < high, "the slow process's ratio is inside the interval"
    pooled = bench_report.interval([x for a, _ in pairs for x in a], [x for _, b in pairs for x in b])
    assert pooled[1] > 0.75, "pooled calls alone would have called the target met"
    assert bench_report.verdict({"limit": 0.75, "ratio": ratio, "low": low, "high": high}) == "MISS (within noise)"


def test_counted_costs_are_divided_by_the_rounds_requests_chunks_and_payload_they_cover() -> None:
    """The emulator's counts of a cell's counted rounds, per request, chunk and payload byte: exact ratios."""
    import bench_counts

    cell = {"chunks": 4, "concurrency": 2, "tp": 1}
    payload = 3 * 2 * 4 * bench_plan.CHUNK_BYTES  # 3 rounds of 2 requests of 4 chunks
    server = {"bytes_d2h": payload, "bytes_h2d": 3 * 512, "bytes_d2d": payload, "launches": 48, "host_syncs": 0}
    workers = {"host_syncs": 6, "ipc_opens": 0, "host_functions": 12}
    got = bench_counts.per_request({"server": server, "workers": workers, "server_cpu_s": 0.024}, 3, cell)
    assert got["boundary_x_payload"] == (payload + 3 * 512) / payload
    assert got["boundary_extra_bytes_per_request"] == 3 * 512 / 6
    assert (got["device_internal_x_payload"], got["launches_per_chunk"]) == (1.0, 2.0)
    assert (got["server_host_syncs_per_chunk"], got["worker_host_syncs_per_request"]) == (0.0, 1.0)
    assert (got["host_functions_per_request"], got["server_cpu_ms_per_chunk"]) == (2.0, 1.0)


def test_a_timing_target_no_plugin_can_meet_here_says_what_bounds_it() -> None:
    """A request's fixed cost above what the limit allows is LMCache's floor on this machine, not a
    slow plugin: the row says so (the verdict stays a miss)."""
    slow = {r["name"]: r for r in bench_report.targets(*synthetic_run(10.0, 20.0, 3.0, 6.0))}
    within = [r for name, r in slow.items() if "memcpy time" in name]
    assert within and all(not r["met"] and "fixed cost here, 10.0 ms" in r["bound"] for r in within)
    fast = bench_report.targets(*synthetic_run(2.0, 20.0, 3.0, 6.0))
    assert not [r for r in fast if "bound" in r], "a floor below the limit bounds nothing"


def test_the_base_dimension_runs_the_base_cell_alone() -> None:
    """``--dimensions base``: a short run (the two-node cell beside it) measures only the cell it compares with."""
    assert bench_plan.cells(["base"]) == [bench_plan.BASE]
    assert bench_plan.cells(["base", "tp"]) == [bench_plan.BASE, {**bench_plan.BASE, "tp": 2}]


def test_a_two_node_request_pays_b_s_lookup_and_retrieve_of_the_same_round_over_their_median() -> None:
    """Node B's figure beside the single-node retrieve is its lookup (L2 or peer into B's L1) plus its retrieve,
    added round by round, not the two medians added: GB/s is the request's bytes over the median of the sums."""
    import bench_cluster

    samples = {"store": [0.004, 0.002, 0.003], "lookup": [0.010, 0.030, 0.020], "retrieve": [0.020, 0.002, 0.005],
               "bytes_match": True, "late": 1}  # fmt: skip
    summary = bench_cluster.summarize(samples, 32 << 20)
    assert summary["lookup+retrieve"]["latencies"] == pytest.approx([0.030, 0.032, 0.025])
    assert summary["lookup+retrieve"]["gbps"] == pytest.approx((32 << 20) / 0.030 / 1e9)  # the medians add to 0.025
    assert summary["lookup+retrieve"]["p50_ms"] == pytest.approx(30.0)
    assert summary["store"]["gbps"] == pytest.approx((32 << 20) / 0.003 / 1e9)
    assert summary["retrieve"]["p99_ms"] == pytest.approx(19.7)
    assert (summary["bytes_match"], summary["late_rounds"]) == (True, 1)
    assert bench_cluster.request_bytes() == 4 * bench_plan.CHUNK_BYTES


def test_the_bench_runs_on_the_release_its_lmcache_option_names_and_refuses_one_there_is_not() -> None:
    """``--lmcache <version|pre>`` is the session's, taken out of what goes to the benchmark: a tested release, or
    ``pre`` for the newest pre-release; without it, the newest final; any other value names those there are."""
    from tasks.variants import LMCACHE_RELEASES, NEWEST, PRERELEASES, chosen_release

    assert chosen_release(["--modes", "shm"]) == (NEWEST, ["--modes", "shm"])
    assert chosen_release(["--lmcache", LMCACHE_RELEASES[0], "--no-profile"]) == (LMCACHE_RELEASES[0], ["--no-profile"])
    if PRERELEASES:
        assert chosen_release(["--lmcache", "pre"]) == (PRERELEASES[-1], [])
    for bad in (["--lmcache", "9.9.9"], ["--lmcache"]):
        with pytest.raises(ValueError, match=f"choose one of {', '.join(LMCACHE_RELEASES)}"):
            chosen_release(bad)


def test_bench_json_says_which_lmcache_it_measured(tmp_path: Path) -> None:
    import json

    path = bench_report.write(tmp_path, {}, {}, {}, [], [], "", 0, {}, None, "0.5.7rc2")
    assert json.loads(path.read_text())["lmcache"] == "0.5.7rc2"
