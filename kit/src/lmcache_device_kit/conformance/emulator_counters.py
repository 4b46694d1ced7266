# SPDX-License-Identifier: Apache-2.0
"""The CPU emulator's counters are exact: what a call does is counted, once, and
nothing else.

Why it exists: the benchmark reports what the plugin does per request (bytes across
the device boundary, launches, host synchronizations, IPC opens) from these
counters, and holds it to exact targets; a miscount there reads as a plugin's cost.
Each test does one thing and compares every counter's difference with what that
thing is (the emulator's ``_counters.py`` says what each covers). Skipped, with the
reason, without the emulator (a device has no counters; its profiler counts).

Imports torch: import it from a project's tests only, after ``conftest.py`` set the
environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
import ctypes
import json
import os

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit import counters as kit_counters
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.host_memory import device_ops, transfer_direction
from lmcache_device_kit.conformance.native_contract import transfers
from lmcache_device_kit.conformance.native_transfers import gather_into, scatter
from lmcache_device_kit.conformance.support import (
    BLOCK_IDS,
    BS,
    HS,
    KV_LAYOUTS,
    LAYERS,
    NH,
    page_aligned,
    run_python,
    seeded_kv,
)

MIB = 1 << 20
#: libc's ``free``: with a NULL argument a kernel or host function that does nothing
#: and takes no GIL.
FREE = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p).value
LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
)
#: A kernel launch: (stream, kernel, parameter block, its bytes).
KERNEL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64
)
#: libc's ``time``: as a kernel, it writes 8 bytes into its parameter block.
TIME = ctypes.cast(ctypes.CDLL(None).time, ctypes.c_void_p).value


class Counted:
    """What a ``counted()`` block did: every counter's difference, zeros dropped."""

    def __init__(self) -> None:
        self.did: dict[str, int] = {}


@contextmanager
def counted(emulator: Any) -> Iterator[Counted]:
    """Count what the block does, once the work it queued has run: the device is
    synchronized before and after it, and the closing synchronization (one host sync)
    is not the block's."""
    emulator.synchronize()
    before = emulator.counters()
    result = Counted()
    yield result
    emulator.synchronize()
    did = kit_counters.difference(emulator.counters(), before)
    did["host_syncs"] -= 1
    result.did = {name: n for name, n in did.items() if n}


def device(index: int = 0) -> torch.device:
    return torch.device(kit_backend.current().device_type, index)


class BaseEmulatorCountersTests(ConformanceTests):
    """Each counter of the emulator against one call whose cost is known."""

    requires = frozenset({"emulator"})

    def test_a_1_mib_copy_to_the_device_counts_1_mib_host_to_device_and_nothing_else(
        self, emulator: Any
    ) -> None:
        """A blocking copy from pageable memory: one copy, one host sync."""
        host = torch.ones(MIB, dtype=torch.uint8)
        with counted(emulator) as copy:
            on_device = host.to(device())
        assert copy.did == {"bytes_h2d": MIB, "copies": 1, "host_syncs": 1}
        with counted(emulator) as back:
            on_device.cpu()
        assert back.did == {"bytes_d2h": MIB, "copies": 1, "host_syncs": 1}
        with counted(emulator) as within:
            on_device.clone()
        assert within.did == {"bytes_d2d": MIB, "copies": 1}

    def test_a_non_blocking_copy_from_pinned_memory_waits_for_nothing(
        self, emulator: Any
    ) -> None:
        host = torch.ones(MIB, dtype=torch.uint8, pin_memory=True)
        on_device = torch.empty(MIB, dtype=torch.uint8, device=device())
        with counted(emulator) as copy:
            on_device.copy_(host, non_blocking=True)
        assert copy.did == {"bytes_h2d": MIB, "copies": 1}

    def test_each_host_wait_counts_one_host_sync_and_queries_wait_for_nothing(
        self, emulator: Any
    ) -> None:
        stream = emulator.Stream()
        event = emulator.Event()
        event.record(stream)
        waits: list[Callable[[], object]] = [
            stream.synchronize,
            emulator.synchronize,
            event.synchronize,
            lambda: emulator.synchronize_stream_handle(emulator.stream_handle(stream)),
        ]
        for wait in waits:
            with counted(emulator) as waited:
                wait()
            assert waited.did == {"host_syncs": 1}, wait
        with counted(emulator) as queried:
            event.query()
            stream.query()
            emulator.current_stream().wait_event(event)
        assert queried.did == {"queries": 2}

    def test_a_kernel_and_a_host_function_count_one_launch_each(
        self, emulator: Any
    ) -> None:
        handle = emulator.stream_handle(emulator.current_stream())
        params = ctypes.c_int64(0)
        with counted(emulator) as kernel:
            launch = KERNEL(emulator.kernel_launcher())
            assert launch(handle, TIME, ctypes.addressof(params), 8) == 0
        assert kernel.did == {"launches": 1}
        if not hasattr(emulator, "host_func_launcher"):
            return  # a runtime without host functions (the emulator's option)
        with counted(emulator) as host_function:
            assert LAUNCH(emulator.host_func_launcher())(handle, FREE, None) == 0
        assert host_function.did == {"host_functions": 1}

    def test_an_ipc_open_and_close_count_one_each(self, emulator: Any) -> None:
        memory = torch.empty(MIB, dtype=torch.uint8, device=device())
        if emulator.ipc_memory_is_vmm(memory.data_ptr()):  # shared as a descriptor
            fd, _, size = emulator.ipc_export_fd(memory.data_ptr())
            with counted(emulator) as opened:
                address = emulator.ipc_open_fd(fd, size, 0)
            os.close(fd)
        else:
            handle, _, size = emulator.ipc_export_handle(memory.data_ptr())
            with counted(emulator) as opened:
                address = emulator.ipc_open_handle(handle, size, 0)
        with counted(emulator) as closed:
            emulator.ipc_close_handle(address)
        assert (opened.did, closed.did) == ({"ipc_opens": 1}, {"ipc_closes": 1})

    @pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "pageable"])
    def test_a_native_block_transfer_counts_exactly_its_payload_each_way(
        self, emulator: Any, native: Any, pinned: bool
    ) -> None:
        """The kernels' copies, through the address translator: every KV byte of the
        blocks once, across the device boundary, besides the block ids the kernels read
        on the device; one launch per native op call (up to four chunks each).
        Pageable chunks are copied by the ops class instead (no kernel reads them)."""
        shape, hints = KV_LAYOUTS["flash_nhd"]
        kv = {k: v.to(device()) for k, v in seeded_kv(shape, seed=21).items()}
        payload = len(BLOCK_IDS) * LAYERS * 2 * BS * NH * HS * 2  # fp16 K and V
        chunk = torch.empty(2, LAYERS, 2 * BS, NH * HS, dtype=torch.float16)
        out = [torch.empty_like(chunk, pin_memory=pinned) for _ in range(3)]
        assert sum(c.nbytes for c in out) == payload
        calls = transfers(native)["native"]
        with counted(emulator) as store:
            gather_into(kv, BLOCK_IDS, 2, layout_hints=hints, out=out)
        calls = transfers(native)["native"] - calls
        ids = 8 * len(BLOCK_IDS) * calls  # the block ids the kernels read on the device
        assert calls >= 1 and store.did.get("bytes_d2h") == payload, store.did
        assert store.did.get("bytes_h2d", 0) <= ids, store.did
        assert not {"bytes_d2d", "bytes_h2h"} & set(store.did)
        if pinned:
            assert store.did.get("launches") == calls, store.did
        with counted(emulator) as load:
            scatter(kv, BLOCK_IDS, out, 2, layout_hints=hints)
        assert payload <= load.did.get("bytes_h2d", 0) <= payload + ids, load.did
        assert not {"bytes_d2h", "bytes_d2d", "bytes_h2h"} & set(load.did)

    def test_a_pointer_copy_is_one_async_copy_per_registration_and_no_launch(
        self, emulator: Any, native: Any, lmcache_driven: Any
    ) -> None:
        """Pointer-mode lmcache_memcpy_async (the LMCache-driven server's staging
        copies) goes through the runtime's copy engine, as LMCache's CUDA backend
        uses cudaMemcpyAsync: one async copy per pinned registration the range
        crosses, and no kernel (a copy kernel over mapped host memory spends the
        device's compute on what its copy engine does)."""
        ops, h2d = device_ops(), transfer_direction().H2D
        registered, half = page_aligned(MIB, 3), MIB // 2
        pins = lmcache_driven.pin_memory_backend()
        halves = [registered.data_ptr(), registered.data_ptr() + half]
        assert all(pins.pin_memory(address, half) for address in halves)
        on_device = torch.zeros(MIB, dtype=torch.uint8, device=device())
        try:
            with counted(emulator) as copied:
                ops.lmcache_memcpy_async(
                    on_device.data_ptr(), halves[0], MIB, h2d, 0, half
                )
        finally:
            assert all(pins.unpin_memory(address) for address in halves)
        assert copied.did == {"bytes_h2d": MIB, "copies": 2}, copied.did


PROGRAM = """
import json, os, torch
runtime = getattr(torch, {device!r})
host = torch.ones({nbytes}, dtype=torch.uint8)
before = runtime.counters()
host.to({device!r})
after = runtime.counters()
print(json.dumps([os.getpid(), before, after]))
"""


class BaseEmulatorCounterFilesTests(ConformanceTests):
    """Another process's counters, read from its file."""

    requires = frozenset({"emulator"})

    def test_a_process_keeps_its_counters_in_a_file_another_process_reads(
        self, tmp_path: Path
    ) -> None:
        backend = kit_backend.current()
        code = PROGRAM.format(device=backend.device_type, nbytes=MIB)
        env = {
            backend.emulator_env_var: "1",
            kit_counters.env_var(backend): str(tmp_path),
        }
        done = run_python(code, env=env)
        assert done.returncode == 0, done.stderr
        pid, before, after = json.loads(done.stdout.strip().splitlines()[-1])
        files = kit_counters.read_dir(tmp_path)
        assert list(files) == [pid], (
            f"one file per process: {sorted(tmp_path.iterdir())}"
        )
        assert files[pid] == after
        assert kit_counters.difference(after, before)["bytes_h2d"] == MIB
