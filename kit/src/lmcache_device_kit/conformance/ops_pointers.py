# SPDX-License-Identifier: Apache-2.0
"""The plugin's ops on raw addresses (pointer mode), as an LMCache-driven server and
LMCache's L1 call them: copies on the memory's own device, never through libcudart,
and views of device memory.

Why a module of its own: the transfers checked against LMCache's CPU baseline are
``ops_parity.py``; these take pointers, not tensors.

Imports torch (through ``support``); lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import importlib

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.ops_parity import device_ops
from lmcache_device_kit.conformance.support import (
    baseline_loaded_cuda_runtime,
    page_aligned,
    same_bytes,
)


def device_at(runtime: Any, index: int) -> str:
    """``<device>:index``, skipping the test on a host with fewer devices."""
    device = kit_backend.current().device_type
    if index >= runtime.device_count():
        pytest.skip(f"needs {index + 1} {device} devices")
    return f"{device}:{index}"


def package_module(name: str) -> Any:
    """The plugin's module ``name`` (``_lmcache_compat``: its binding to the shims,
    with LMCache's names and the slow-path counts)."""
    return importlib.import_module(f"{kit_backend.current().package}.{name}")


class BaseOpsPointerTests(ConformanceTests):
    """lmcache_memcpy_async on pointers, its slow-path verdicts, tensor_from_ptr."""

    requires = frozenset({"own_ops"})

    @pytest.mark.parametrize(
        "index", [0, 1], ids=["device0", "device1-while-device0-is-current"]
    )
    @pytest.mark.parametrize("direction", ["H2D", "D2H"])
    def test_memcpy_pointer_mode_copies_bytes_without_libcudart(
        self, runtime: Any, direction: str, index: int
    ) -> None:
        """Pointer-mode lmcache_memcpy_async moves the bytes on the memory's own
        device, never through libcudart."""
        directions = package_module("_lmcache_compat").TransferDirection
        nbytes = 4096 + 17
        host = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
        dev = torch.randint(0, 255, (nbytes,), dtype=torch.uint8).to(
            device_at(runtime, index)
        )
        expected = (host if direction == "H2D" else dev.cpu()).clone()
        ops = device_ops()
        if direction == "H2D":
            ops.lmcache_memcpy_async(
                dev.data_ptr(), host.data_ptr(), nbytes, directions.H2D, 0, 4096
            )
            runtime.synchronize(dev.device)  # the copy is asynchronous
            assert same_bytes(dev, expected)
        else:
            ops.lmcache_memcpy_async(
                host.data_ptr(), dev.data_ptr(), nbytes, directions.D2H, 0, 4096
            )
            runtime.synchronize(dev.device)  # not the current device
            assert same_bytes(host, expected)
        assert not baseline_loaded_cuda_runtime()

    def test_a_copy_is_quiet_only_from_host_memory_one_pinned_registration_holds(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """Pinned host memory copies quietly: allocated pinned, or registered in pieces
        as LMCache's lazy L1 does, the copy split at the pieces' size LMCache passes.
        One copy across two registrations is a pageable copy on a device, and so is a
        copy from memory never pinned: both are counted as a slow path (the pin
        backend is LMCache-driven transfer's)."""
        slow_paths = package_module("_lmcache_compat").slow_paths
        h2d = package_module("_lmcache_compat").TransferDirection.H2D
        nbytes = 1 << 16
        dev = torch.zeros(2 * nbytes, dtype=torch.uint8).to(
            kit_backend.current().device_type
        )
        allocated = torch.full((2 * nbytes,), 1, dtype=torch.uint8).pin_memory()
        registered = page_aligned(2 * nbytes, 2)
        pins = lmcache_driven.pin_memory_backend()
        halves = [registered.data_ptr(), registered.data_ptr() + nbytes]
        assert all(pins.pin_memory(address, nbytes) for address in halves)
        pageable = torch.full((2 * nbytes,), 3, dtype=torch.uint8)
        ops, kind = device_ops(), "pageable host memory"
        cases = [  # host memory, host_buffer_alignments, whether it is a slow path
            (allocated, 2 * nbytes, False),
            (registered, nbytes, False),
            (registered, 2 * nbytes, True),
            (pageable, 2 * nbytes, True),
        ]
        try:
            for host, alignment, slow in cases:
                before = slow_paths[kind]
                dev.zero_()
                pointers = dev.data_ptr(), host.data_ptr()
                ops.lmcache_memcpy_async(*pointers, 2 * nbytes, h2d, 0, alignment)
                emulator.synchronize()
                verdict = slow_paths[kind] > before
                assert verdict is slow, f"fill {int(host[0])}, pieces of {alignment}"
                assert same_bytes(dev, host)
        finally:
            assert all(pins.unpin_memory(address) for address in halves)

    @pytest.mark.parametrize(
        "index", [0, 1], ids=["device0", "device1-while-device0-is-current"]
    )
    def test_tensor_from_ptr_aliases_device_memory_on_the_memorys_own_device(
        self, runtime: Any, index: int
    ) -> None:
        """tensor_from_ptr(ptr, ..., a device without index) views the same memory, on
        the device that owns it."""
        base = torch.arange(64, dtype=torch.float32).to(device_at(runtime, index))
        view = device_ops().tensor_from_ptr(
            base.data_ptr() + 16 * 4,
            (4, 8),
            torch.float32,
            torch.device(kit_backend.current().device_type),
        )
        assert view.device == base.device and view.data_ptr() == base.data_ptr() + 64
        assert same_bytes(view, base.cpu()[16:48].reshape(4, 8))
        view.fill_(-1)
        assert bool((base.cpu()[16:48] == -1).all()) and float(base.cpu()[15]) == 15.0

    def test_a_range_pinned_once_is_copied_to_and_from_each_devices_memory(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """LMCache's server pins its L1 once, from a thread bound to device 0, and with
        TP=2 copies between it and two devices' memory: each copy is byte-exact (a
        kernel on device 1 reaches the range at device 1's address, where the runtime
        maps host memory per device)."""
        compat, nbytes, copy = package_module("_lmcache_compat"), 1 << 16, device_ops()
        h2d, d2h = compat.TransferDirection.H2D, compat.TransferDirection.D2H
        second = device_at(runtime, 1)
        host, pins = page_aligned(nbytes, 7), lmcache_driven.pin_memory_backend()
        assert pins.pin_memory(host.data_ptr(), nbytes) is True
        try:
            for device in (kit_backend.current().device_type + ":0", second):
                dev = torch.zeros(nbytes, dtype=torch.uint8, device=device)
                pointers = dev.data_ptr(), host.data_ptr()
                copy.lmcache_memcpy_async(*pointers, nbytes, h2d, 0, nbytes)
                runtime.synchronize(dev.device)
                assert same_bytes(dev, host)
                dev.fill_(3)
                copy.lmcache_memcpy_async(*pointers[::-1], nbytes, d2h, 0, nbytes)
                runtime.synchronize(dev.device)
                assert same_bytes(host, dev)
                host.fill_(7)
        finally:
            assert pins.unpin_memory(host.data_ptr()) is True

    @pytest.mark.parametrize("alignment", [0, 3, -4096])
    def test_a_host_buffer_alignment_that_is_not_a_power_of_two_is_refused(
        self, alignment: int
    ) -> None:
        """Pointer mode splits copies at ``host_buffer_alignments``: a value it cannot
        split at is a ValueError naming the argument, as in LMCache's own ops."""
        h2d = package_module("_lmcache_compat").TransferDirection.H2D
        host = torch.ones(64, dtype=torch.uint8)
        dev = torch.zeros(64).to(kit_backend.current().device_type)
        with pytest.raises(ValueError, match="host_buffer_alignments"):
            device_ops().lmcache_memcpy_async(
                dev.data_ptr(), host.data_ptr(), 64, h2d, 0, alignment
            )

    def test_tensor_from_ptr_refuses_a_null_pointer(self) -> None:
        """Pointer 0 is a ValueError naming the call, not a tensor over address 0."""
        device = torch.device(kit_backend.current().device_type)
        with pytest.raises(ValueError, match="non-zero"):
            device_ops().tensor_from_ptr(0, (4,), torch.uint8, device)

    def test_tensor_from_ptr_reports_a_view_it_cannot_build_as_runtime_error(
        self,
    ) -> None:
        """A shape the memory cannot hold fails as RuntimeError naming the address, not
        deep inside torch."""
        device = torch.device(kit_backend.current().device_type)
        base = torch.zeros(64, dtype=torch.uint8).to(device)
        with pytest.raises(RuntimeError, match="cannot view"):
            device_ops().tensor_from_ptr(base.data_ptr(), (-1, 4), torch.uint8, device)
