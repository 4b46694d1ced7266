# SPDX-License-Identifier: Apache-2.0
"""LMCache's CUDA and MUSA ``tensor_from_ptr`` tests, ported to this plugin's
DeviceOps.

Sources: LMCache 0.5.6 tests/v1/platform/devices/cuda/test_cuda_tensor_from_ptr.py
and tests/v1/platform/devices/musa/test_tensor_from_ptr.py. The originals replace
``torch.as_tensor`` (CUDA's ``__cuda_array_interface__`` path) or TorchMUSA's
constructors with recorders; here the plugin builds views over real device memory,
and what the recorders saw is read from the views.

Departures (each also in README.md beside this module):
- The CUDA array-interface dict (``data``, ``typestr``, ``version``) and TorchMUSA's
  metadata call are those runtimes' construction paths: asserted instead are the
  view's shape, dtype, device, strides, storage offset and that it aliases the
  memory (and, through the wrapped storage constructor, pointer and byte count).
- test_bfloat16_view_restores_requested_dtype: the int16 descriptor is CUDA's
  detail; kept is that the view is bfloat16 with the memory's values.
- test_reports_unavailable_copy_fallback: ``match="libcudart/libamdhip"`` is
  CUDA's wording; required is a RuntimeError that names the address.
- MUSA's explicit ``stride=(4, 1)`` is not ported: LMCache's ``tensor_from_ptr``
  has no stride argument (MUSA's helper does); views are contiguous.
- ``_normalize_device`` is MUSA's; a non-device pointer (``cpu``) must be refused
  naming this device, as a non-MUSA device is refused naming MUSA.
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


def ops():
    return resolve_device_ops(device_type())


class BaseCudaTensorFromPtrTests(PortTests):
    """LMCache's cuda/test_cuda_tensor_from_ptr.py and musa/test_tensor_from_ptr.py
    against the plugin's ``tensor_from_ptr``."""

    def test_constructs_a_zero_copy_view_with_the_requested_shape(
        self, runtime: Any
    ) -> None:
        """cuda: test_constructs_cuda_array_interface_view"""
        index = runtime.device_count() - 1  # CUDA's test asks for cuda:1
        device = torch.device(device_type(), index)
        memory = torch.arange(6, dtype=torch.float16).to(device)

        result = ops().tensor_from_ptr(memory.data_ptr(), (2, 3), torch.float16, device)

        assert result.shape == (2, 3) and result.dtype == torch.float16
        assert result.device == device
        assert result.data_ptr() == memory.data_ptr()
        result.fill_(5.0)
        assert torch.equal(memory.cpu(), torch.full((6,), 5.0, dtype=torch.float16))

    def test_bfloat16_view_restores_the_requested_dtype(self, runtime: Any) -> None:
        """cuda: test_bfloat16_view_restores_requested_dtype"""
        memory = torch.arange(4, dtype=torch.bfloat16, device=device_type())

        result = ops().tensor_from_ptr(
            memory.data_ptr(), (4,), torch.bfloat16, torch.device(device_type())
        )

        assert result.dtype == torch.bfloat16 and result.shape == (4,)
        assert torch.equal(result.cpu(), memory.cpu())

    def test_an_unavailable_construction_path_fails_explicitly(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """cuda: test_reports_unavailable_copy_fallback"""

        def unavailable(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError(f"{device_type()} storage construction unavailable")

        monkeypatch.setattr(
            torch._C, "_construct_storage_from_data_pointer", unavailable
        )

        with pytest.raises(RuntimeError, match="0x1000"):
            ops().tensor_from_ptr(
                0x1000, (4,), torch.float16, torch.device(device_type(), 0)
            )

    def test_contiguous_strides(self, runtime: Any) -> None:
        """musa: test_contiguous_strides"""
        memory = torch.zeros(24, dtype=torch.float32, device=device_type())
        view = ops().tensor_from_ptr(
            memory.data_ptr(), (2, 3, 4), torch.float32, torch.device(device_type())
        )
        assert view.stride() == (12, 4, 1)

    def test_constructs_a_non_owning_view_with_metadata(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """musa: test_constructs_non_owning_view_with_metadata"""
        calls: list[tuple[int, torch.device, int]] = []
        real = torch._C._construct_storage_from_data_pointer

        def construct_storage(ptr: int, device: torch.device, nbytes: int) -> Any:
            calls.append((ptr, device, nbytes))
            return real(ptr, device, nbytes)

        name = "_construct_storage_from_data_pointer"
        monkeypatch.setattr(torch._C, name, construct_storage)
        memory = torch.zeros(8, dtype=torch.float32, device=device_type())
        ptr = memory.data_ptr() + 4  # an interior pointer

        result = ops().tensor_from_ptr(
            ptr, (2, 3), torch.float32, torch.device(device_type())
        )

        assert calls == [(ptr, torch.device(device_type(), 0), 24)]
        assert result.shape == (2, 3) and result.stride() == (3, 1)
        assert result.dtype == torch.float32 and result.device == torch.device(
            device_type(), 0
        )
        assert result.storage_offset() == 0 and result.data_ptr() == ptr
        del memory  # the view does not own the memory: the caller's tensor does

    def test_rejects_an_invalid_pointer_and_device(self, runtime: Any) -> None:
        """musa: test_rejects_invalid_pointer_and_device"""
        with pytest.raises(ValueError, match="non-zero"):
            ops().tensor_from_ptr(0, (1,), torch.float32, torch.device("cpu"))
        with pytest.raises(ValueError, match=device_type()):
            ops().tensor_from_ptr(1, (1,), torch.float32, torch.device("cpu"))
