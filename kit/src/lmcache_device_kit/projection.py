# SPDX-License-Identifier: Apache-2.0
"""What a request costs: the emulator's counts, the targets on them, and a projection
of them onto a device.

Why it exists: timings on a CPU emulator say little about a device, but what a plugin
*does* per request (bytes across the device boundary and within the device, kernel
launches, host synchronizations, host functions) is exact and carries to hardware.
A benchmark or the kit's ``costs`` command counts a request with the emulator (the
kit's ``counters`` reads them) and gives them here as a ``Counted``; this module
says, exactly and without timing, whether the plugin met each counted target, and
what the request would take on a device described by a few numbers: the defaults
below (a PCIe Gen5 accelerator, each number with its source) or the vendor's own, in
``[tool.lmcache-device-kit.device]`` of the project's ``pyproject.toml``.

Imports only the standard library (``tomli`` on Python 3.10): never LMCache, torch
or the plugin.
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

try:
    # Standard
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    # Third Party
    import tomli as tomllib

#: Where a project describes its device: ``pyproject.toml``'s table.
TABLE = ("tool", "lmcache-device-kit", "device")
#: Bytes of one block id the kernels index (int64), per KV block and rank.
BLOCK_ID_BYTES = 8
#: Launches (kernels and device ops) per chunk and rank a native path may take: one
#: kernel moves a chunk between the paged cache and contiguous memory, and a path that
#: stages it (LMCache-driven: LMCache's own CUDA path gathers into a staging buffer,
#: then copies that to pinned L1) takes one more to cross the boundary.
LAUNCHES_PER_CHUNK = 2


@dataclass(frozen=True)
class Device:
    """A device as the projection sees it; GB/s are 1e9 bytes per second."""

    name: str = "PCIe Gen5 x16 accelerator (the kit's defaults)"
    bus_host_to_device_gbps: float = 63.0
    bus_device_to_host_gbps: float = 63.0
    memory_gbps: float = 2000.0
    launch_us: float = 5.0
    sync_us: float = 10.0


#: Where each default comes from: the projection prints them with the figures.
SOURCES = {
    "bus_host_to_device_gbps": "PCIe 5.0 x16 link rate each way: 32 GT/s per lane, "
    "16 lanes, 128b/130b encoding (PCI-SIG, PCI Express Base Specification 5.0) = "
    "63.0 GB/s before packet overheads, an upper bound (NVIDIA's H100 PCIe datasheet "
    "states 128 GB/s for both directions together); put your measured DMA rate",
    "bus_device_to_host_gbps": "as host to device",
    "memory_gbps": "HBM2e of an NVIDIA H100 PCIe, 2.0 TB/s (NVIDIA H100 Tensor Core "
    "GPU datasheet)",
    "launch_us": "a kernel launch costs 'on the order of microseconds' (NVIDIA CUDA "
    "Programming Guide, 4.2 CUDA Graphs; Modal GPU Glossary, 'CUDA Graph'); 5 us taken",
    "sync_us": "an estimate, not a measurement: a host wait's round trip (the device "
    "signals, a blocked host thread wakes), taken as two launches; time your runtime's "
    "synchronize of an idle stream",
}


class DeviceDescriptionError(ValueError):
    """A device description the projection cannot use; the message says how to fix
    it."""


def load(pyproject: Path | str) -> Device:
    """The device ``pyproject`` describes in ``[tool.lmcache-device-kit.device]``,
    the defaults for what it leaves out (all of them without the table)."""
    where = f"[{'.'.join(TABLE)}] of {pyproject}"
    try:
        table: Any = tomllib.loads(Path(pyproject).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise DeviceDescriptionError(f"cannot read {pyproject}: {error}") from error
    for key in TABLE:
        table = table.get(key, {}) if isinstance(table, dict) else None
    if not isinstance(table, dict):
        raise DeviceDescriptionError(f"{where} must be a table of numbers")
    known = {f.name: f for f in fields(Device)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise DeviceDescriptionError(
                f"{where}: unknown key {key!r}; the keys are {', '.join(known)}"
            )
        if key == "name":
            if not isinstance(value, str) or not value:
                raise DeviceDescriptionError(
                    f"{where}: name must be a non-empty string"
                )
        elif (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
        ):
            raise DeviceDescriptionError(
                f"{where}: {key} must be a positive number, e.g. "
                f"{key} = {getattr(Device(), key)} (the default), not {value!r}"
            )
        values[key] = value if key == "name" else float(value)
    if values and "name" not in values:
        values["name"] = f"the device {pyproject} describes"
    return replace(Device(), **values)


@dataclass(frozen=True)
class Counted:
    """What the emulator counted over ``requests`` requests of one path and kind
    (store or retrieve), split into the server's and the workers' processes."""

    requests: int
    chunks: int  # per request
    ranks: int  # TP ranks of a request
    blocks: int  # KV blocks per request and rank
    payload: int  # KV bytes per request, every rank's
    server: dict[str, int]
    workers: dict[str, int]
    server_cpu_s: float = 0.0  # the server's host CPU time over the requests

    def n(self, name: str) -> int:
        return self.server.get(name, 0) + self.workers.get(name, 0)

    @property
    def boundary(self) -> int:
        return self.n("bytes_h2d") + self.n("bytes_d2h")

    @property
    def launched(self) -> int:
        """Kernel launches and device ops: each device op is at least one launch."""
        return self.n("launches") + self.n("device_ops")

    def per_request(self, name: str, role: str = "") -> float:
        """Counter ``name`` per request, of one role ("server", "workers") or both."""
        total = getattr(self, role).get(name, 0) if role else self.n(name)
        return total / self.requests


def per_request(c: Counted) -> dict[str, float]:
    """The figures a report prints: bytes as multiples of the payload, the rest per
    request or chunk."""
    payload, chunks = c.payload * c.requests, c.chunks * c.requests
    return {
        "boundary_x_payload": c.boundary / payload,
        "boundary_extra_bytes_per_request": (c.boundary - payload) / c.requests,
        "device_internal_x_payload": c.n("bytes_d2d") / payload,
        "host_to_host_x_payload": c.n("bytes_h2h") / payload,
        "launches_per_chunk": c.n("launches") / chunks,
        "device_ops_per_chunk": c.n("device_ops") / chunks,
        "copies_per_chunk": c.n("copies") / chunks,
        "server_host_syncs_per_chunk": c.server.get("host_syncs", 0) / chunks,
        "worker_host_syncs_per_request": c.per_request("host_syncs", "workers"),
        "host_functions_per_request": c.per_request("host_functions"),
        "ipc_opens_per_request": c.per_request("ipc_opens"),
        "server_cpu_ms_per_chunk": c.server_cpu_s * 1e3 / chunks,
    }


def targets(c: Counted) -> list[tuple[str, bool, str]]:
    """Each counted target of a native path: (what it asks, met, what was counted).
    Exact: counts are whole numbers, no interval."""
    r = c.requests
    payload, ids = c.payload * r, BLOCK_ID_BYTES * c.blocks * c.ranks * r
    allowed = LAUNCHES_PER_CHUNK * c.chunks * c.ranks * r
    return [
        (
            "bytes across the device boundary = payload + at most its block ids "
            f"({BLOCK_ID_BYTES} B per block)",
            payload <= c.boundary <= payload + ids,
            f"{c.boundary - payload:+d} B beyond {payload} B of payload "
            f"(block ids: {ids} B)",
        ),
        (
            "device-internal bytes <= payload",
            c.n("bytes_d2d") <= payload,
            f"{c.n('bytes_d2d')} B for {payload} B",
        ),
        (
            "no host-to-host copy by the device",
            c.n("bytes_h2h") == 0,
            f"{c.n('bytes_h2h')} B",
        ),
        (
            f"launches and device ops <= {LAUNCHES_PER_CHUNK} per chunk and rank",
            c.launched <= allowed,
            f"{c.launched} for {c.chunks * c.ranks * r} chunk-ranks",
        ),
        (
            "the server never waits for the device (0 host syncs)",
            c.server.get("host_syncs", 0) == 0,
            f"{c.server.get('host_syncs', 0)} over {r} requests",
        ),
    ]


def syncs_grow_with_chunks(small: Counted, large: Counted) -> tuple[str, bool, str]:
    """The counted target across request sizes: the host waits per request, not per
    chunk (the same count per request at ``small.chunks`` and ``large.chunks``)."""
    a, b = small.per_request("host_syncs"), large.per_request("host_syncs")
    return (
        "host syncs per request do not grow with its chunks",
        a == b,
        f"{a:g} at {small.chunks} chunk(s), {b:g} at {large.chunks}",
    )


def project(device: Device, c: Counted) -> dict[str, float]:
    """Seconds per request on ``device``, by term, and their sum as "total": serial
    (no copy overlaps another or host work; a device that overlaps does better). Host
    work is the server's CPU time as measured here, for a host as fast as this one."""
    r = c.requests
    terms = {
        "bus": c.n("bytes_h2d") / (device.bus_host_to_device_gbps * 1e9)
        + c.n("bytes_d2h") / (device.bus_device_to_host_gbps * 1e9),
        # a copy within the device reads and writes each byte
        "memory": 2 * c.n("bytes_d2d") / (device.memory_gbps * 1e9),
        "launches": c.launched * device.launch_us * 1e-6,
        "syncs": (c.n("host_syncs") + c.n("host_functions")) * device.sync_us * 1e-6,
        "host": c.server_cpu_s,
    }
    out = {term: seconds / r for term, seconds in terms.items()}
    out["total"] = sum(out.values())
    return out


def describe(device: Device) -> list[str]:
    """The device's numbers, one line each, with the default's source where it is the
    default."""
    default = Device()
    lines = [f"device: {device.name}"]
    for f in fields(Device)[1:]:
        value = getattr(device, f.name)
        source = SOURCES[f.name] if value == getattr(default, f.name) else "yours"
        lines.append(f"  {f.name} = {value:g}  ({source})")
    return lines
