# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache's NPU ``tensor_from_ptr`` tests, ported to this plugin's DeviceOps.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_tensor_from_ptr.py. The
originals redirect NPU storage construction to CPU storage and forward a stand-in
``meta`` device; here the plugin builds a view over real device memory.

Departures (each also in tests/lmcache_ports/README.md):
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

DEVICE = "{{ cookiecutter.device_name }}"


def recorded_storage_constructor(monkeypatch) -> list[tuple[int, torch.device, int]]:  # type: ignore[no-untyped-def]
    calls: list[tuple[int, torch.device, int]] = []
    real = torch._C._construct_storage_from_data_pointer

    def recording(ptr: int, device: torch.device, nbytes: int) -> Any:
        calls.append((ptr, device, nbytes))
        return real(ptr, device, nbytes)

    monkeypatch.setattr(torch._C, "_construct_storage_from_data_pointer", recording)
    return calls


def test_constructs_aliasing_view_from_data_pointer(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The view aliases the pointed-to buffer with the requested metadata."""
    calls = recorded_storage_constructor(monkeypatch)
    original = torch.arange(24, dtype=torch.float32, device=DEVICE)

    view = resolve_device_ops(DEVICE).tensor_from_ptr(
        original.data_ptr(), (4, 6), torch.float32, torch.device(DEVICE)
    )

    assert view.shape == (4, 6)
    assert view.stride() == (6, 1)
    assert view.dtype == torch.float32
    assert calls == [(original.data_ptr(), torch.device(DEVICE, 0), 96)]

    # A copy fallback would break the paged-buffer ownership contract:
    # writes through the view must reach the caller's buffer.
    view.fill_(7.0)
    assert torch.equal(original.cpu(), torch.full((24,), 7.0))


def test_constructor_failure_raises_runtime_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Storage-construction failures surface as RuntimeError."""

    def broken(ptr: int, device: torch.device, nbytes: int) -> Any:
        raise RuntimeError(f"no {DEVICE} runtime")

    monkeypatch.setattr(torch._C, "_construct_storage_from_data_pointer", broken)

    with pytest.raises(RuntimeError):
        resolve_device_ops(DEVICE).tensor_from_ptr(
            0x1000, (2, 3), torch.float16, torch.device(DEVICE, 0)
        )
