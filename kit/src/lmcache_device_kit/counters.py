# SPDX-License-Identifier: Apache-2.0
"""Read the CPU emulator's counters of any process, at any time, without signals.

Why it exists: what a plugin does per request (bytes across the device boundary,
launches, host synchronizations, IPC opens) carries to hardware where timings on
an emulator do not. The emulator counts it per process (its ``_counters.py`` says
what each counter covers); a process started with ``env_var(backend)`` naming a
directory keeps its counters in ``<dir>/counters-<pid>.bin``, which this module
reads: a benchmark or a test reads servers and workers before and after what it
measures and takes the difference. Counters only grow, so there is no reset.

The file is self-describing (the emulator's ``csrc/counters.cpp`` defines it):

====== ============ =====================================================
offset size         what
====== ============ =====================================================
0      8 bytes      magic ``LMCCNT01``
8      uint64       N, the number of counters
16     uint64       B, bytes of the names block (a multiple of 8)
24     B bytes      the names, ``\\n``-separated, NUL-padded
24+B   N x uint64   the counters, in the names' order
====== ============ =====================================================

Integers are in the host's byte order (little-endian wherever torch runs). Each
counter is read with one aligned 8-byte load of a shared mapping, so a read while
the process counts sees each counter whole.

Imports only the standard library (and the kit's ``backend`` for the variable's
name).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import mmap
import re
import struct

# First Party
from lmcache_device_kit.backend import Backend

MAGIC = b"LMCCNT01"
HEADER = struct.Struct("=8sQQ")
FILE_NAME = re.compile(r"counters-(\d+)\.bin")


def env_var(backend: Backend) -> str:
    """The variable naming the directory a backend's emulator keeps counters in."""
    return f"{backend.emulator_env_var}_COUNTERS"


def read(path: Path | str) -> dict[str, int]:
    """One process's counters, by name, from its file."""
    with (
        open(path, "rb") as file,
        mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
    ):
        magic, count, names_bytes = HEADER.unpack_from(mapped, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not an emulator counter file ({magic!r})")
        start = HEADER.size
        names = mapped[start : start + names_bytes].rstrip(b"\0")
        with memoryview(mapped) as whole:
            with whole[start + names_bytes :].cast("Q") as counters:
                values = [int(counters[i]) for i in range(count)]
    return dict(zip(names.decode().split("\n")[:count], values, strict=True))


def read_dir(directory: Path | str) -> dict[int, dict[str, int]]:
    """Every process's counters in ``directory``, by pid ({} for none)."""
    out = {}
    for path in sorted(Path(directory).glob("counters-*.bin")):
        found = FILE_NAME.fullmatch(path.name)
        if found:
            out[int(found.group(1))] = read(path)
    return out


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """What was counted between two reads of one process (``before`` may be {})."""
    return {name: value - before.get(name, 0) for name, value in after.items()}


def total(by_process: dict[int, dict[str, int]]) -> dict[str, int]:
    """The sum over processes."""
    out: dict[str, int] = {}
    for counts in by_process.values():
        for name, value in counts.items():
            out[name] = out.get(name, 0) + value
    return out
