# SPDX-License-Identifier: Apache-2.0
"""LMCache's MUSA host-pinning tests, ported to this plugin's pin-memory backend.

Source: LMCache 0.5.6 tests/v1/platform/devices/musa/test_musa_pin_memory.py. The
originals install a fake ``musart`` whose ``musaHostRegister`` and
``musaHostUnregister`` record calls or fail on demand; here the plugin's backend
registers real host memory with the device runtime, whose entry points
(``host_register``, ``host_unregister``) are replaced only to remove them or make
them raise.

Departures (each also in README.md beside this module):
- ``flags`` (0x02, musaHostRegisterMapped) is not forwarded: this runtime's
  registration takes none; kept is that the exact range is registered.
- A nonzero MUSA status becomes the emulator's injected ``host_register`` fault
  (emulator only); 713 on unregistration becomes a pointer never registered.
- Warning texts (``musaHostRegister failed``, ``returned error code 713``) are
  MUSA's: required is a warning naming the pointer.
- 64 MiB at 0x1000 (a fake address) becomes a real host buffer.
- Not ported: test_musa_device_spec_does_not_affect_other_platforms (LMCache's own
  base DeviceSpec) and test_lazy_allocator_pins_and_unpins_only_successful_chunks
  (LMCache's allocator with a fake spec; no plugin class is involved).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import logging

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.distributed import config as distributed_config
from lmcache.v1.distributed.config import L1MemoryManagerConfig
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    plugin_class,
    runtime_name,
)

SIZE = 1 << 20


def new_backend():
    return plugin_class("pin_memory", "PinMemoryBackend")()


class BaseMusaPinMemoryTests(PortTests):
    """LMCache's musa/test_musa_pin_memory.py against the plugin's pin-memory
    backend."""

    @pytest.fixture
    def host(self) -> Iterator[int]:
        buffer = torch.empty(SIZE, dtype=torch.uint8)
        yield buffer.data_ptr()
        del buffer

    def test_is_pin_supported_when_both_runtime_functions_exist(
        self, runtime: Any
    ) -> None:
        assert new_backend().is_pin_supported is True

    @pytest.mark.parametrize("missing", ["host_register", "host_unregister"])
    def test_is_not_pin_supported_when_an_entry_point_is_missing(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch, missing: str
    ) -> None:
        monkeypatch.delattr(runtime, missing)
        assert new_backend().is_pin_supported is False

    def test_pin_memory_registers_the_pointer_and_size(
        self, emulator: Any, host: int
    ) -> None:
        assert new_backend().pin_memory(host, SIZE) is True
        assert emulator.host_is_pinned(host, SIZE)
        new_backend().unpin_memory(host)

    def test_pin_memory_returns_false_when_the_runtime_refuses(
        self, emulator: Any, host: int
    ) -> None:
        emulator.inject_faults("host_register")
        try:
            assert new_backend().pin_memory(host + 1, 4096) is False
        finally:
            emulator.inject_faults()

    def test_pin_memory_returns_false_and_warns_when_the_runtime_raises(
        self,
        runtime: Any,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
        host: int,
    ) -> None:
        def failing(*_args: object) -> bool:
            raise RuntimeError("register failed")

        monkeypatch.setattr(runtime, "host_register", failing)
        with caplog.at_level(logging.WARNING):
            result = new_backend().pin_memory(host, 4096)
        assert result is False
        assert any(f"{host:#x}" in r.getMessage() for r in caplog.records)

    def test_unpin_memory_releases_the_base_pointer(
        self, emulator: Any, host: int
    ) -> None:
        backend = new_backend()
        backend.pin_memory(host, SIZE)
        assert backend.unpin_memory(host) is True
        assert not emulator.host_is_pinned(host, SIZE)

    def test_unpin_memory_returns_false_and_warns_when_the_runtime_refuses(
        self, runtime: Any, caplog: pytest.LogCaptureFixture, host: int
    ) -> None:
        with caplog.at_level(logging.WARNING):
            result = new_backend().unpin_memory(host)
        assert result is False
        assert any(f"{host:#x}" in r.getMessage() for r in caplog.records)

    def test_unpin_memory_returns_false_and_warns_when_the_runtime_raises(
        self,
        runtime: Any,
        monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture,
        host: int,
    ) -> None:
        def failing(*_args: object) -> bool:
            raise RuntimeError("unregister failed")

        monkeypatch.setattr(runtime, "host_unregister", failing)
        with caplog.at_level(logging.WARNING):
            result = new_backend().unpin_memory(host)
        assert result is False
        assert any(f"{host:#x}" in r.getMessage() for r in caplog.records)

    def test_operations_return_false_when_the_backend_is_unsupported(
        self, monkeypatch: pytest.MonkeyPatch, host: int
    ) -> None:
        monkeypatch.delattr(torch, runtime_name(), raising=False)
        backend = new_backend()
        assert backend.pin_memory(host, 4096) is False
        assert backend.unpin_memory(host) is False

    def test_the_device_spec_uses_the_plugins_pin_backend(
        self, lmcache_driven: Any
    ) -> None:
        assert lmcache_driven.pin_memory_backend is plugin_class(
            "pin_memory", "PinMemoryBackend"
        )
        assert lmcache_driven.is_pin_supported is True

    def test_lazy_config_remains_enabled_when_the_backend_is_supported(
        self, lmcache_driven: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(distributed_config, "current_device_spec", lmcache_driven)
        config = L1MemoryManagerConfig(size_in_bytes=1 << 30, use_lazy=True)
        assert config.use_lazy is True

    def test_lazy_config_is_disabled_when_the_runtime_is_missing(
        self, lmcache_driven: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delattr(torch, runtime_name())
        monkeypatch.setattr(distributed_config, "current_device_spec", lmcache_driven)
        config = L1MemoryManagerConfig(size_in_bytes=1 << 30, use_lazy=True)
        assert config.use_lazy is False

    def test_the_runtime_registers_and_unregisters_64_mib(self, runtime: Any) -> None:
        backend = new_backend()
        buffer = torch.empty(64 << 20, dtype=torch.uint8)
        assert backend.pin_memory(buffer.data_ptr(), buffer.numel()) is True
        assert backend.unpin_memory(buffer.data_ptr()) is True
