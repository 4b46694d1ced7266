# SPDX-License-Identifier: Apache-2.0
"""What the plugin does per request, counted by foo's emulator, in ``nox -s bench``.

Every process of a foo setup runs with ``COUNTERS_ENV_VAR`` naming a directory of
its lane, so its emulator keeps its counters in ``counters-<pid>.bin`` there (the
emulator's ``_counters.py`` says what each counter covers; the kit's
``lmcache_device_kit.counters`` reads them). A lane reads its directory around the
store and the retrieve of each measured round and adds the differences, split into
the server and the worker ranks, with the server's CPU time (from
``/proc/<pid>/task/*/schedstat``, nanoseconds): every thread's but the emulator's
stream workers (named ``emulated-stream``: they do the device's work, which a device
does off the host), so it is the host work of LMCache and the plugin. The report divides them by the
requests and payload bytes of those rounds: counts are exact, not sampled, so a
per-request figure that is not a whole number says the work per request varies.

Imports the standard library and the kit (no torch).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bench_plan import BLOCK, CHUNK, CHUNK_BYTES, EMULATOR_ENV_VAR, cell_id
from lmcache_device_kit import counters as kit_counters
from lmcache_device_kit import projection
from lmcache_device_kit.projection import Counted

#: A directory: the emulator of every process of a foo setup keeps its counters there.
COUNTERS_ENV_VAR = f"{EMULATOR_ENV_VAR}_COUNTERS"
ROLES = ("server", "workers")


#: The emulator's stream worker threads (its csrc/streams.cpp names them).
DEVICE_THREAD = "emulated-stream"


def cpu_seconds(pid: int) -> float:
    """CPU time so far of every live thread of ``pid`` but the emulated device's (0
    once it has exited)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip() != DEVICE_THREAD:
                total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread exited meanwhile
    return total / 1e9


class Meter:
    """One lane's counters: its directory, its server's pid, its ranks' pids."""

    def __init__(self, directory: Path, server_pid: int) -> None:
        self.directory, self.server_pid = directory, server_pid
        self.rank_pids: set[int] = set()
        self.totals: dict = {}
        self.rounds = 0  # counted this cell

    def start_cell(self) -> None:
        self.rounds = 0
        self.totals = {kind: {"server": {}, "workers": {}, "server_cpu_s": 0.0} for kind in ("store", "retrieve")}

    def snapshot(self) -> tuple[dict[str, dict[str, int]], float]:
        """(counts by role, summed over its processes; the server's CPU seconds)."""
        by_role: dict[str, dict[int, dict[str, int]]] = {"server": {}, "workers": {}}
        for pid, counts in kit_counters.read_dir(self.directory).items():
            by_role["workers" if pid in self.rank_pids else "server"][pid] = counts
        return {role: kit_counters.total(by_role[role]) for role in ROLES}, cpu_seconds(self.server_pid)

    def add(self, kind: str, before: tuple, after: tuple) -> None:
        for role in ROLES:
            diff = kit_counters.difference(after[0][role], before[0][role])
            mine = self.totals[kind][role]
            for name, n in diff.items():
                mine[name] = mine.get(name, 0) + n
        self.totals[kind]["server_cpu_s"] += after[1] - before[1]
        self.rounds += kind == "retrieve"


def counted(totals: dict, rounds: int, cell: dict[str, int]) -> Counted:
    """A kind's totals over ``rounds`` measured rounds of ``cell``, as the kit's
    projection takes them."""
    return Counted(
        requests=rounds * cell["concurrency"],
        chunks=cell["chunks"],
        ranks=cell["tp"],
        blocks=cell["chunks"] * CHUNK // BLOCK,
        payload=cell["chunks"] * CHUNK_BYTES,
        server=totals["server"],
        workers=totals["workers"],
        server_cpu_s=totals["server_cpu_s"],
    )


def per_request(totals: dict, rounds: int, cell: dict[str, int]) -> dict:
    """A kind's totals over ``rounds`` measured rounds, per request, per chunk and per
    payload byte (the kit's figures); the raw totals kept."""
    c = counted(totals, rounds, cell)
    return {
        "cell": cell,
        "rounds": rounds,
        "requests": c.requests,
        "payload_bytes": c.payload * c.requests,
        **projection.per_request(c),
        "totals": totals,
    }


COLUMNS = (
    ("bnd x", "boundary_x_payload", "{:.3f}"),
    ("bnd-pl B/rq", "boundary_extra_bytes_per_request", "{:.0f}"),
    ("dev x", "device_internal_x_payload", "{:.3f}"),
    ("h2h x", "host_to_host_x_payload", "{:.3f}"),
    ("lnch/ch", "launches_per_chunk", "{:.2f}"),
    ("ops/ch", "device_ops_per_chunk", "{:.1f}"),
    ("cp/ch", "copies_per_chunk", "{:.2f}"),
    ("Ssync/ch", "server_host_syncs_per_chunk", "{:.2f}"),
    ("Wsync/rq", "worker_host_syncs_per_request", "{:.2f}"),
    ("hfn/rq", "host_functions_per_request", "{:.2f}"),
    ("ipc/rq", "ipc_opens_per_request", "{:.2f}"),
    ("srvCPU ms/ch", "server_cpu_ms_per_chunk", "{:.2f}"),
)


def counted_rows(e2e: dict, head: str) -> Iterator[tuple[str, str, str, dict, dict]]:
    """Every (cell id, setup, kind, its result, its counts) of a foo setup, by mode,
    after printing the mode's heading with ``head``."""
    for mode in dict.fromkeys(m for by_mode in e2e.values() for m in by_mode):
        print(f"\n  {mode}\n  {'cell':<28}{'setup':<14}{'kind':<9}{head}")
        for setup, by_mode in e2e.items():
            if not setup.startswith(("native", "baseline")) or mode not in by_mode:
                continue
            for cell, result in by_mode[mode].items():
                for kind in ("store", "retrieve"):
                    if result[kind].get("counts"):
                        yield cell, setup, kind, result[kind], result[kind]["counts"]


def print_table(e2e: dict) -> None:
    """Per mode, cell, setup and kind, the counted figures (foo setups only)."""
    print(
        "\nCounted by foo's emulator, per measured request (bnd: bytes across the device boundary, "
        "h2d + d2h; bnd-pl: those beyond the payload, bytes per request; dev: device to device; h2h: host to host, kernels' only; each x payload. lnch: "
        "kernel launches, ops: device ops, cp: copies, per chunk; Ssync: the server's host syncs per "
        "chunk; Wsync: the workers' per request, the benchmark worker's own synchronize after each round "
        "included; hfn: host functions, ipc: IPC opens, per request; "
        "srvCPU: the server's CPU time per chunk, the emulated device's threads left out)"
    )
    head = "".join(f"{title:>{max(9, len(title) + 1)}}" for title, _, _ in COLUMNS)
    for cell, setup, kind, _, got in counted_rows(e2e, head):
        row = "".join(f"{fmt.format(got[key]):>{max(9, len(title) + 1)}}" for title, key, fmt in COLUMNS)
        print(f"  {cell:<28}{setup:<14}{kind:<9}{row}")


def native_counts(e2e: dict, mode: str) -> list[tuple[dict[str, int], str, Counted]]:
    """(cell, kind, what was counted) of every measured cell of native foo in ``mode``."""
    out = []
    for result in e2e.get("native foo", {}).get(mode, {}).values():
        for kind in ("store", "retrieve"):
            got = result[kind].get("counts")
            if got:
                out.append((got["cell"], kind, counted(got["totals"], got["rounds"], got["cell"])))
    return out


def targets(e2e: dict, modes: list[str]) -> list[dict]:
    """The counted targets (the kit's ``projection.targets``) of native foo, one row per
    target and mode over every cell and kind: met when each is, exact (no interval);
    a miss names the cells that missed. Then, per mode, host syncs per request equal
    at the fewest and the most chunks (one request, TP=1)."""
    rows = []
    for mode in modes:
        found = native_counts(e2e, mode)
        if not found:
            continue
        checked: dict[str, list[str]] = {}
        for cell, kind, c in found:
            for name, met, detail in projection.targets(c):
                checked.setdefault(name, [])
                if not met:
                    checked[name].append(f"{cell_id(cell)} {kind}: {detail}")
        for name, misses in checked.items():
            rows.append({"name": f"{mode}: {name}", "met": not misses, "misses": misses})
        sweep = {(c.chunks, kind): c for cell, kind, c in found if cell["concurrency"] == 1 and cell["tp"] == 1}
        for kind in ("store", "retrieve"):
            sizes = sorted(chunks for chunks, k in sweep if k == kind)
            if len(sizes) > 1:
                name, met, detail = projection.syncs_grow_with_chunks(sweep[sizes[0], kind], sweep[sizes[-1], kind])
                rows.append({"name": f"{mode} {kind}: {name}", "met": met, "misses": [] if met else [detail]})
    for row in rows:
        row["verdict"] = "MET" if row["met"] else "MISS"
    return rows


def print_projection(e2e: dict, device: projection.Device) -> None:
    """Per mode, cell, foo setup and kind: the measured p50 beside the time the counts
    take on ``device`` (the kit's ``projection.project``), by term."""
    print("\nProjected per request on a device, from the counts (serial: nothing overlaps; host: the server's CPU "
          "time measured here)")  # fmt: skip
    for line in projection.describe(device):
        print(f"  {line}")
    terms = ("bus", "memory", "launches", "syncs", "host")
    head = f"{'measured':>10}{'projected':>10}" + "".join(f"{t:>9}" for t in terms)
    for cell, setup, kind, result, got in counted_rows(e2e, head + "  (ms per request)"):
        projected = projection.project(device, counted(got["totals"], got["rounds"], got["cell"]))
        figures = "".join(f"{projected[t] * 1e3:>9.3f}" for t in terms)
        print(f"  {cell:<28}{setup:<14}{kind:<9}{result['p50_ms']:>10.2f}"
              f"{projected['total'] * 1e3:>10.3f}{figures}")  # fmt: skip
