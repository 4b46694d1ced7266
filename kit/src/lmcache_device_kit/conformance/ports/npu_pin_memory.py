# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU host-pinning tests, ported to this plugin's pin-memory backend.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_pin_memory.py. The
originals drive ``NpuPinMemoryBackend`` against a fake ``acl.rt`` that records
registrations; here the plugin's backend registers real host memory with the
device runtime, which says what is registered (``host_is_pinned``).

Departures (each also in README.md beside this module):
- Page widening (``register_calls == [(2 * PAGE, 2 * PAGE, 0)]``) is observed through
  what the runtime says is pinned (``host_is_pinned``): exactly those two pages, in
  host memory starting on a page, until the pointer pinned is unpinned.
- Unpinning a pointer never pinned: NPU's bookkeeping answers True, LMCache's CUDA
  backend answers False (cudaHostUnregister fails); the plugin answers as CUDA does.
  Kept: nothing else is unregistered (the pinned range stays pinned).
- A failing unregistration (AscendCL 507911) cannot be injected into this runtime:
  test_failed_unregister_keeps_region_for_retry is not ported.
- ACL status 507899 on registration becomes the emulator's injected
  ``host_register`` fault (emulator only).
- Not ported (AscendCL binding discovery, which the plugin does not have):
  test_unavailable_npu_skips_library_discovery,
  test_unpin_refuses_after_context_failure_latch,
  test_backend_without_acl_or_lib_is_unsupported,
  test_ctypes_fallback_used_when_acl_module_missing.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import os

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    plugin_class,
    runtime_name,
)
from lmcache_device_kit.conformance.support import page_aligned

PAGE = os.sysconf("SC_PAGESIZE")


def new_backend():
    return plugin_class("pin_memory", "PinMemoryBackend")()


class BaseNpuPinMemoryTests(PortTests):
    """LMCache's npu/test_npu_pin_memory.py against the plugin's pin-memory backend."""

    @pytest.fixture
    def host(self) -> Iterator[int]:
        """Host memory (five pages, the first at ``host``) for the test to pin."""
        buffer = page_aligned(5 * PAGE)
        yield buffer.data_ptr()
        del buffer

    def test_device_spec_registers_the_plugins_pin_backend(
        self, lmcache_driven: Any
    ) -> None:
        backend = lmcache_driven.pin_memory_backend
        assert backend is plugin_class("pin_memory", "PinMemoryBackend")

    def test_pin_widens_region_to_whole_pages_and_unpin_uses_base(
        self, emulator: Any, host: int
    ) -> None:
        backend = new_backend()
        ptr, size = host + 2 * PAGE + 0xABC, PAGE
        assert backend.pin_memory(ptr, size) is True
        assert emulator.host_is_pinned(host + 2 * PAGE, 2 * PAGE)
        assert not emulator.host_is_pinned(host + PAGE, 2 * PAGE)
        assert not emulator.host_is_pinned(host + 3 * PAGE, 2 * PAGE)

        assert backend.unpin_memory(ptr) is True
        assert not emulator.host_is_pinned(host + 2 * PAGE, PAGE)

    def test_unpin_of_a_never_pinned_pointer_unregisters_nothing(
        self, emulator: Any, host: int
    ) -> None:
        backend = new_backend()
        backend.pin_memory(host, PAGE)

        assert backend.unpin_memory(host + 2 * PAGE) is False
        assert emulator.host_is_pinned(host, PAGE)
        assert backend.unpin_memory(host) is True

    def test_pin_returns_false_when_the_runtime_refuses(
        self, emulator: Any, host: int
    ) -> None:
        """A refused registration is not reported as success."""
        backend = new_backend()
        unaligned = host + 1
        emulator.inject_faults("host_register")  # it refuses every registration
        try:
            assert backend.pin_memory(unaligned, PAGE) is False
        finally:
            emulator.inject_faults()
        assert not emulator.host_is_pinned(unaligned, PAGE)

    def test_pin_fails_without_raising_when_the_runtime_goes_away(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch, host: int
    ) -> None:
        """A missing device module degrades pin to False and the gate to unsupported."""
        backend = new_backend()
        assert backend.is_pin_supported is True
        monkeypatch.delattr(torch, runtime_name())

        assert backend.pin_memory(host, PAGE) is False
        assert backend.is_pin_supported is False
        assert backend.pin_memory(host, PAGE) is False

    def test_an_unavailable_runtime_is_unsupported_at_construction(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch, host: int
    ) -> None:
        """``is_pin_supported`` is accurate before any ``pin_memory`` call (LMCache's
        ``use_lazy`` guard asks it first)."""
        monkeypatch.delattr(torch, runtime_name())

        backend = new_backend()

        assert backend.is_pin_supported is False
        assert backend.pin_memory(host, PAGE) is False
        monkeypatch.undo()
        assert not runtime.host_is_pinned(host, PAGE)

    def test_the_runtime_registers_and_unregisters_an_unaligned_region(
        self, runtime: Any
    ) -> None:
        backend = new_backend()
        if not backend.is_pin_supported:
            pytest.skip(f"torch.{runtime_name()} cannot register host memory here")

        size = 1 << 20
        buffer = torch.empty(size + PAGE, dtype=torch.uint8)
        ptr = buffer.data_ptr() + 1
        assert backend.pin_memory(ptr, size) is True
        assert backend.unpin_memory(ptr) is True
