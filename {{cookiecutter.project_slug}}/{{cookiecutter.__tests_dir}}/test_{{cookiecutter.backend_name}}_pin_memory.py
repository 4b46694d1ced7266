# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Host-memory pinning through the backend's pin backend.

As ``npu/test_npu_pin_memory.py`` does for NPU: LMCache pins its host buffers
through the active spec (``DeviceSpec.pin_memory``), which must pin and unpin real
ranges on the device, refuse what cannot be pinned with False (LMCache then keeps
the buffer unpinned), and report no support without the runtime.
"""

# Standard
import ctypes

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.pin_memory import (
    {{ cookiecutter.class_prefix }}PinMemoryBackend,
    host_range_is_pinned,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)

Backend = {{ cookiecutter.class_prefix }}PinMemoryBackend
SIZE = 1 << 16


def test_spec_names_its_pin_backend() -> None:
    assert {{ cookiecutter.class_prefix }}DeviceSpec().pin_memory_backend is Backend


def test_without_the_runtime_nothing_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, TORCH_MODULE_NAME, raising=False)
    backend = Backend()
    buffer = ctypes.create_string_buffer(SIZE)
    assert not backend.is_pin_supported
    assert backend.pin_memory(ctypes.addressof(buffer), SIZE) is False
    assert backend.unpin_memory(ctypes.addressof(buffer)) is False


@requires_device
def test_pin_and_unpin_a_host_range() -> None:
    """Through the spec, as LMCache's allocators pin: pinned until unpinned once."""
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    buffer = ctypes.create_string_buffer(SIZE)
    ptr = ctypes.addressof(buffer)
    assert spec.is_pin_supported
    assert host_range_is_pinned(ptr, SIZE) is False
    assert spec.pin_memory(ptr, SIZE)
    try:
        assert host_range_is_pinned(ptr, SIZE) is True
    finally:
        assert spec.unpin_memory(ptr)
    assert host_range_is_pinned(ptr, SIZE) is False
    assert spec.unpin_memory(ptr) is False


@requires_device
@pytest.mark.parametrize("ptr, size", [(0, SIZE), (4096, 0), (4096, -1)])
def test_a_null_or_empty_range_is_refused(ptr: int, size: int) -> None:
    assert Backend().pin_memory(ptr, size) is False


@requires_device
def test_a_pinned_buffer_serves_device_copies() -> None:
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    host = torch.arange(SIZE // 4, dtype=torch.float32)
    assert spec.pin_memory(host.data_ptr(), host.nbytes)
    try:
        device = host.to(DEVICE_TYPE, non_blocking=True)
        back = torch.zeros_like(host)
        back.copy_(device)
        assert torch.equal(back, host)
    finally:
        assert spec.unpin_memory(host.data_ptr())
