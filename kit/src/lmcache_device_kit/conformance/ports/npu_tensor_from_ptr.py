# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU ``tensor_from_ptr`` tests, ported to this plugin's DeviceOps.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_tensor_from_ptr.py. The
originals redirect NPU storage construction to CPU storage and forward a stand-in
``meta`` device; here the plugin builds a view over real device memory.

Departures (each also in README.md beside this module):
- The storage constructor is wrapped (it records, then calls the real one) instead
  of redirected to CPU; the device it receives is the memory's own (index 0), since
  LMCache passes a device without an index and the plugin resolves it.
- ``match="non-owning tensor"``: the NPU wording; only RuntimeError is required.
  The failing call passes device index 0 so that it reaches the constructor
  (without an index the plugin first asks the runtime which device owns the
  pointer).
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform import resolve_device_ops
from lmcache_device_kit.conformance.ports.common import PortTests, device_type


def recorded_storage_constructor(monkeypatch) -> list[tuple[int, torch.device, int]]:
    calls: list[tuple[int, torch.device, int]] = []
    real = torch._C._construct_storage_from_data_pointer

    def recording(ptr: int, device: torch.device, nbytes: int) -> Any:
        calls.append((ptr, device, nbytes))
        return real(ptr, device, nbytes)

    monkeypatch.setattr(torch._C, "_construct_storage_from_data_pointer", recording)
    return calls


class BaseNpuTensorFromPtrTests(PortTests):
    """LMCache's npu/test_npu_tensor_from_ptr.py against the plugin's
    ``tensor_from_ptr``."""

    def test_constructs_aliasing_view_from_data_pointer(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The view aliases the pointed-to buffer with the requested metadata."""
        calls = recorded_storage_constructor(monkeypatch)
        original = torch.arange(24, dtype=torch.float32, device=device_type())

        view = resolve_device_ops(device_type()).tensor_from_ptr(
            original.data_ptr(), (4, 6), torch.float32, torch.device(device_type())
        )

        assert view.shape == (4, 6)
        assert view.stride() == (6, 1)
        assert view.dtype == torch.float32
        assert calls == [(original.data_ptr(), torch.device(device_type(), 0), 96)]

        # A copy fallback would break the paged-buffer ownership contract:
        # writes through the view must reach the caller's buffer.
        view.fill_(7.0)
        assert torch.equal(original.cpu(), torch.full((24,), 7.0))

    def test_constructor_failure_raises_runtime_error(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Storage-construction failures surface as RuntimeError."""

        def broken(ptr: int, device: torch.device, nbytes: int) -> Any:
            raise RuntimeError(f"no {device_type()} runtime")

        monkeypatch.setattr(torch._C, "_construct_storage_from_data_pointer", broken)

        with pytest.raises(RuntimeError):
            resolve_device_ops(device_type()).tensor_from_ptr(
                0x1000, (2, 3), torch.float16, torch.device(device_type(), 0)
            )
