# SPDX-License-Identifier: {{ cookiecutter.license }}
"""The IPC wrapper: how a worker hands a KV layer to the LMCache server.

What ``npu/test_npu_ipc_wrapper.py`` holds for NPU: the spec advertises the
LMCache-driven stack, LMCache's wire codec carries the wrapper as a data-only
descriptor (the ``ipc_wire.py`` allowlist entry this contribution adds) and the
rebuilt wrapper maps the same device memory, a tensor or a layer's planes, until
its last user closes it. What needs no device runs on any host. KV caches are
whole allocations of at least 64 KiB, as a runtime exports them.
"""

# Standard
from unittest.mock import MagicMock

# Third Party
import msgspec
import pytest
import torch

# First Party
from lmcache.v1.multiprocess.transfer_context import worker_transfer
from lmcache.v1.platform import resolve_kv_wrapper_factory
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.ipc_wrapper import (
    {{ cookiecutter.class_prefix }}IPCWrapper,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    BACKEND_NAME,
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)

Wrapper = {{ cookiecutter.class_prefix }}IPCWrapper


def _roundtrip(wrapper: DeviceIPCWrapper) -> DeviceIPCWrapper:
    """Through LMCache's wire codec, as worker and server exchange it."""
    return DeviceIPCWrapper.Deserialize(DeviceIPCWrapper.Serialize(wrapper))


def test_spec_advertises_the_lmcache_driven_stack_where_its_probe_passes() -> None:
    """Every part is there; the capability is offered only where an IPC export and an
    interprocess event work (never without the device: fail closed)."""
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    assert spec.ipc_wrapper_cls is Wrapper
    assert resolve_kv_wrapper_factory(DEVICE_TYPE) == Wrapper.wrap
    offered = spec.is_lmcache_driven_available()
    assert offered is not bool(spec.lmcache_driven_unproven())
    assert spec.is_available() or not offered


@pytest.mark.parametrize("value", [[], [torch.zeros(4)], torch.zeros(4)])
def test_wrap_refuses_what_is_not_this_devices_memory(value: object) -> None:
    with pytest.raises(ValueError, match=DEVICE_TYPE):
        Wrapper.wrap(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("bare", [True, False])
def test_the_wire_refuses_a_descriptor_without_planes(bare: bool) -> None:
    """The descriptor this contribution adds to LMCache's allowlist validates itself
    before any wrapper is built."""
    data = {"type": BACKEND_NAME, "version": 1, "bare": bare, "planes": []}
    with pytest.raises(msgspec.ValidationError, match="plane count"):
        DeviceIPCWrapper.Deserialize(msgspec.msgpack.encode(data))


@requires_device
def test_wire_roundtrip_maps_the_same_memory() -> None:
    """The rebuilt wrapper equals the original and its tensor aliases the layer."""
    layer = torch.arange(2 * 64 * 256).reshape(2, 64, 256) % 2039
    layer = layer.to(torch.float16).to(DEVICE_TYPE)
    wrapper = Wrapper.wrap(layer)
    received = _roundtrip(wrapper)
    assert type(received) is Wrapper
    assert received == wrapper and hash(received) == hash(wrapper)
    view = received.to_tensor()
    assert isinstance(view, torch.Tensor)
    assert (view.shape, view.stride(), view.dtype) == (
        layer.shape,
        layer.stride(),
        layer.dtype,
    )
    assert torch.equal(view.cpu(), layer.cpu())
    view[1].fill_(3.0)
    assert torch.equal(layer[1].cpu(), torch.full((64, 256), 3.0, dtype=torch.float16))
    received.close()
    received.close()  # idempotent


@requires_device
def test_an_interior_strided_view_is_rebuilt_at_its_offset() -> None:
    pool = torch.zeros(4, 64, 128, device=DEVICE_TYPE)
    layer = pool[1:3, :, ::2]
    received = _roundtrip(Wrapper.wrap(layer))
    view = received.to_tensor()
    assert isinstance(view, torch.Tensor)
    assert view.stride() == layer.stride()
    view.fill_(5.0)
    expected = torch.zeros(4, 64, 128)
    expected[1:3, :, ::2] = 5.0
    assert torch.equal(pool.cpu(), expected)
    received.close()


@requires_device
def test_a_layers_planes_come_back_as_a_tuple_of_aliases() -> None:
    """A layer registered as its (K, V) planes, as vLLM's Ascend plugin does."""
    key = torch.ones(64, 256, device=DEVICE_TYPE)
    value = torch.full((64, 512), 2.0, device=DEVICE_TYPE)
    received = _roundtrip(Wrapper.wrap((key, value)))
    planes = received.to_tensor()
    assert isinstance(planes, tuple) and len(planes) == 2
    for plane, original in zip(planes, (key, value), strict=True):
        assert plane.shape == original.shape
        assert torch.equal(plane.cpu(), original.cpu())
    planes[1].fill_(7.0)
    assert torch.equal(value.cpu(), torch.full((64, 512), 7.0))
    received.close()


@requires_device
def test_layers_sharing_one_allocation_stay_mapped_until_the_last_close() -> None:
    """One mapping per allocation and process: the first close must not unmap it
    under the other layer."""
    pool = torch.arange(2 * 16384, dtype=torch.float32).reshape(2, 16384)
    pool = pool.to(DEVICE_TYPE)
    first, second = (_roundtrip(Wrapper.wrap(pool[i])) for i in range(2))
    first.to_tensor()
    second_view = second.to_tensor()
    first.close()
    assert isinstance(second_view, torch.Tensor)
    assert torch.equal(second_view.cpu(), pool[1].cpu())
    second.close()


@requires_device
def test_lmcache_driven_routing_builds_the_handle_context() -> None:
    kv = {"0": torch.zeros(2, 4, 2, 4, 8, device=DEVICE_TYPE)}
    context = worker_transfer.create_transfer_context(
        kv, instance_id=1, req_client=MagicMock(), mode="lmcache_driven"
    )
    assert isinstance(context, worker_transfer.LMCacheDrivenTransferContext)
