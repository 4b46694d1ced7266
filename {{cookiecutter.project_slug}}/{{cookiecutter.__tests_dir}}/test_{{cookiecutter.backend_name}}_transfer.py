# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Transfers through the backend's DeviceOps, held to LMCache's torch baseline.

Every KV transfer LMCache asks of this device runs on the device and is compared,
bit for bit, with ``lmcache.v1.platform.torch_ops`` (the baseline every DeviceOps
inherits) on the same data on the CPU, as ``mlu/test_mlu_transfer.py`` compares its
ops with a reference. The checks the backend adds to the baseline run on any host.
"""

# Standard
from typing import Any
import math

# Third Party
import pytest
import torch

# First Party
from lmcache.lmcache_native import EngineKVFormat, TransferDirection
from lmcache.v1.gpu_connector.kv_format.types import LayoutHints
from lmcache.v1.multiprocess.transfer_context.base import (
    gather_paged_kv_to_cpu,
    scatter_cpu_to_paged_kv,
)
from lmcache.v1.platform import torch_ops
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.device_ops import (
    {{ cookiecutter.class_prefix }}DeviceOps,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)
from lmcache.v1.platform.ops_types import PageBufferShapeDesc

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)

FORMATS = [
    EngineKVFormat.NL_X_TWO_NB_BS_NH_HS,
    EngineKVFormat.NL_X_TWO_NB_NH_BS_HS,
    EngineKVFormat.NL_X_NB_BS_HS,
]
NL, NB, BS, NH, HS, CHUNK_TOKENS = 2, 6, 4, 3, 8, 8
BLOCK_IDS = [4, 1, 5, 0]


def _layers(fmt: EngineKVFormat, dtype: torch.dtype) -> list[torch.Tensor]:
    """Paged layers in ``fmt`` with distinct values, signed zeros and subnormals."""
    if fmt == EngineKVFormat.NL_X_NB_BS_HS:
        shape: tuple[int, ...] = (NB, BS, HS)
    elif fmt == EngineKVFormat.NL_X_TWO_NB_NH_BS_HS:
        shape = (2, NB, NH, BS, HS)
    else:
        shape = (2, NB, BS, NH, HS)
    layers = []
    for index in range(NL):
        layer = (torch.arange(math.prod(shape)).reshape(shape) % 97 + index).to(dtype)
        tiny = torch.finfo(dtype).tiny / 4
        special = torch.tensor([-0.0, 0.0, tiny, -tiny, 0.375], dtype=dtype)
        layer.view(-1)[:5] = special
        layers.append(layer)
    return layers


def _desc(fmt: EngineKVFormat, dtype: torch.dtype) -> PageBufferShapeDesc:
    mla = fmt == EngineKVFormat.NL_X_NB_BS_HS
    desc = PageBufferShapeDesc()
    desc.nl, desc.nb, desc.bs = NL, NB, BS
    desc.nh, desc.hs, desc.kv_size = (1 if mla else NH), HS, (1 if mla else 2)
    desc.element_size, desc.dtype = dtype.itemsize, dtype
    return desc


def _chunks(fmt: EngineKVFormat, dtype: torch.dtype, pin: bool) -> list[torch.Tensor]:
    mla = fmt == EngineKVFormat.NL_X_NB_BS_HS
    shape = (NL, CHUNK_TOKENS, HS) if mla else (2, NL, CHUNK_TOKENS, NH * HS)
    return [torch.full(shape, -1, dtype=dtype, pin_memory=pin) for _ in range(2)]


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits, so that -0.0 and 0.0 differ."""
    bit_dtype = torch.int16 if tensor.dtype.itemsize == 2 else torch.int32
    return tensor.cpu().contiguous().view(bit_dtype)


def _transfer(
    ops: Any,
    pages: list[torch.Tensor],
    chunks: list[torch.Tensor],
    device: str,
    direction: TransferDirection,
    fmt: EngineKVFormat,
    dtype: torch.dtype,
    skip: int,
) -> None:
    """One ``multi_layer_block_kv_transfer`` of ``BLOCK_IDS``, by ``ops``."""
    ops.multi_layer_block_kv_transfer(
        pages,
        chunks,
        BLOCK_IDS,
        device,
        direction,
        _desc(fmt, dtype),
        CHUNK_TOKENS,
        fmt,
        skip,
    )


@requires_device
@pytest.mark.parametrize("fmt", FORMATS, ids=["nhd", "hnd", "mla"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("skip", [0, 1, 3])
def test_store_and_reload_match_the_torch_baseline(
    fmt: EngineKVFormat, dtype: torch.dtype, skip: int
) -> None:
    """D2H into pinned chunks, then H2D into fresh pages: the same bits as the
    baseline on the CPU, skipped prefix blocks untouched."""
    layers = _layers(fmt, dtype)
    expected = _chunks(fmt, dtype, pin=False)
    d2h, h2d = TransferDirection.D2H, TransferDirection.H2D
    _transfer(torch_ops, layers, expected, "cpu", d2h, fmt, dtype, skip)
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    source = [layer.to(DEVICE_TYPE) for layer in layers]
    chunks = _chunks(fmt, dtype, pin=True)
    _transfer(ops, source, chunks, DEVICE_TYPE, d2h, fmt, dtype, skip)
    getattr(torch, TORCH_MODULE_NAME).synchronize()
    assert any(not torch.equal(chunk, torch.full_like(chunk, -1)) for chunk in expected)
    for actual, reference in zip(chunks, expected, strict=True):
        assert torch.equal(_bits(actual), _bits(reference))

    reloaded = [torch.full_like(layer, -2) for layer in layers]
    _transfer(torch_ops, reloaded, expected, "cpu", h2d, fmt, dtype, skip)
    target = [torch.full_like(layer, -2) for layer in source]
    _transfer(ops, target, chunks, DEVICE_TYPE, h2d, fmt, dtype, skip)
    getattr(torch, TORCH_MODULE_NAME).synchronize()
    for actual, reference in zip(target, reloaded, strict=True):
        assert torch.equal(_bits(actual), _bits(reference))


@requires_device
@pytest.mark.parametrize("hnd", [False, True], ids=["nhd", "hnd"])
def test_engine_driven_gather_and_scatter_resolve_these_ops(hnd: bool) -> None:
    """LMCache's engine-driven path picks the ops from the KV tensors' device."""
    shape = (2, NB, NH, BS, HS) if hnd else (2, NB, BS, NH, HS)
    host = {str(i): torch.randn(shape).half() for i in range(NL)}
    source = {name: layer.to(DEVICE_TYPE) for name, layer in host.items()}
    hints: LayoutHints = {"kv_layout": "HND"} if hnd else {"kv_layout": "NHD"}
    chunks = gather_paged_kv_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
    expected = gather_paged_kv_to_cpu(host, BLOCK_IDS, 2, layout_hints=hints)
    for actual, reference in zip(chunks, expected, strict=True):
        assert torch.equal(actual, reference)
    target = {name: torch.zeros_like(layer) for name, layer in source.items()}
    scatter_cpu_to_paged_kv(target, BLOCK_IDS, chunks, 2, layout_hints=hints)
    getattr(torch, TORCH_MODULE_NAME).synchronize()
    for name, layer in target.items():
        reference = torch.zeros_like(host[name])
        reference[:, BLOCK_IDS] = host[name][:, BLOCK_IDS]
        assert torch.equal(layer.cpu(), reference)


@pytest.mark.parametrize("direction", [TransferDirection.H2D, TransferDirection.D2H])
def test_layers_of_another_shape_are_refused_before_any_copy(
    direction: TransferDirection,
) -> None:
    """One shape_desc describes every layer: a layer that disagrees is refused."""
    fmt, dtype = EngineKVFormat.NL_X_TWO_NB_BS_NH_HS, torch.float32
    pages = _layers(fmt, dtype)
    pages[1] = pages[1][:, :, :, :1].contiguous()
    before = [page.clone() for page in pages]
    chunks = _chunks(fmt, dtype, pin=False)
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    with pytest.raises(ValueError, match="must share shape"):
        _transfer(ops, pages, chunks, "cpu", direction, fmt, dtype, 0)
    assert all(torch.equal(a, b) for a, b in zip(pages, before, strict=True))
    assert all(torch.equal(c, torch.full_like(c, -1)) for c in chunks)


@pytest.mark.parametrize("direction", [TransferDirection.H2D, TransferDirection.D2H])
def test_tensor_copy_honours_the_byte_count(direction: TransferDirection) -> None:
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    source = torch.arange(12, dtype=torch.float32)
    dest = torch.full_like(source, -1)
    ops.lmcache_memcpy_async(dest, source, 20, direction, 0, 1)
    assert torch.equal(dest[:5], source[:5])
    assert torch.equal(dest[5:], torch.full_like(dest[5:], -1))


@requires_device
@pytest.mark.parametrize("alignment", [1 << 20, 64], ids=["one-piece", "pieces"])
def test_pointer_copies_round_trip_through_device_memory(alignment: int) -> None:
    """Raw addresses, as an LMCache-driven server passes them: host to device and
    back, whole, also where the host range crosses pinned registrations."""
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    nbytes = 1000
    host = (torch.arange(nbytes) % 251).to(torch.uint8).pin_memory()
    device = torch.zeros(nbytes, dtype=torch.uint8, device=DEVICE_TYPE)
    back = torch.zeros(nbytes, dtype=torch.uint8).pin_memory()
    h2d, d2h = TransferDirection.H2D, TransferDirection.D2H
    ops.lmcache_memcpy_async(
        device.data_ptr(), host.data_ptr(), nbytes, h2d, 16, alignment
    )
    ops.lmcache_memcpy_async(
        back.data_ptr(), device.data_ptr(), nbytes, d2h, 16, alignment
    )
    getattr(torch, TORCH_MODULE_NAME).synchronize()
    assert torch.equal(device.cpu(), host)
    assert torch.equal(back, host)


@requires_device
def test_tensor_from_ptr_is_a_zero_copy_view() -> None:
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    tensor = torch.zeros(4, 6, dtype=torch.float32, device=DEVICE_TYPE)
    device = torch.device(DEVICE_TYPE)
    view = ops.tensor_from_ptr(tensor.data_ptr(), (4, 6), torch.float32, device)
    assert view.device == tensor.device
    view.fill_(7.0)
    assert torch.equal(tensor.cpu(), torch.full((4, 6), 7.0))
    with pytest.raises(ValueError, match="non-zero"):
        ops.tensor_from_ptr(0, (4,), torch.float32, device)
