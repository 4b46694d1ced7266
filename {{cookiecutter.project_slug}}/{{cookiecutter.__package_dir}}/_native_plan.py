# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Which native kernel a transfer runs, and its arguments: the plans of ``native_ops``.

Why a module of its own: ``native_ops.py`` holds the ops LMCache calls; this
holds how the sample kernels (``_kernels.cpp``) see LMCache's two call shapes:
tensors (engine-driven workers: ``tensor_plan``) and device pointers (the
LMCache-driven server: a table of layer addresses, chunks in the staging
buffer, block ids on the device: ``pointer_plan``). A plan is ``(kernel,
device, arguments)``, or None when the kernels do not handle the inputs (the op
then falls back to the baseline). It checks inputs on the host as a device
runtime cannot, without synchronizing with the device.
TODO(vendor): plan your kernels' arguments here; keep None for what they do not do.

Imports ``_kernels``, ``_lmcache_compat`` and ``names``; never
``native_ops`` (which imports it).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable

# Third Party
import torch

# Local
from . import _kernels  # type: ignore[attr-defined]
from . import _lmcache_compat as compat
from ._host_access import kernel_host_address, staged_kernel
{%- if cookiecutter.lmcache_driven != 'no' %}
from ._lmcache_compat import announce_pointer_mode, check_host_pinned
{%- endif %}
from .names import DEVICE_TYPE{{ ", TORCH_MODULE_NAME" if cookiecutter.lmcache_driven != "no" else "" }}

Plan = tuple[Callable[..., None], torch.device, tuple] | None

# Per supported format: (plane dim, block dim) of a paged layer tensor; MLA has no plane
# dim.
LAYOUTS = {
    "NL_X_TWO_NB_BS_NH_HS": (0, 1),  # vLLM flash attention, NHD: [2, NB, BS, NH, HS]
    "NL_X_NB_TWO_BS_NH_HS": (1, 0),  # flashinfer NHD: [NB, 2, BS, NH, HS]
    "NL_X_NB_BS_HS": (None, 0),  # MLA: [NB, BS, HS]
}
#: Per-layer (K, V) planes, each an allocation of its own (vLLM's Ascend plugin): the
#: server's table interleaves them [K0, V0, K1, V1, ...] and a chunk is (2, NL, tokens,
#: NH * HS), so the kernel copies them as 2 * NL one-plane layers: the Ks, then the Vs.
PLANE_TUPLES = "NL_X_TWO_X_NB_BS_NH_HS"
#: The ``EngineKVFormat`` names the plans below give a kernel, every other format going
#: to the baseline (``native_ops`` declares them to the conformance suite as
#: ``NATIVE_KV_FORMATS``).
{%- if cookiecutter.lmcache_driven != 'no' %}
#: The (K, V) plane tuples come with the server's pointer tables only.
FORMATS = frozenset({*LAYOUTS, PLANE_TUPLES})
{%- else %}
FORMATS = frozenset(LAYOUTS)
{%- endif %}
#: Where the kernels' tensors may live: this device, or host memory (chunks, given to
#: the kernel at their device address: ``_host_access.py``), as with CUDA.
KERNEL_DEVICES = {DEVICE_TYPE, "cpu"}


def tensor_plan(
    paged: torch.Tensor | list,
    objects: list[int] | list[torch.Tensor],
    block_ids: torch.Tensor | list[int],
    device: torch.device | str,
    direction: compat.TransferDirection,
    shape_desc: compat.PageBufferShapeDesc,
    chunk_size: int,
    engine_kv_format: compat.EngineKVFormat,
    skip: int,
) -> Plan:
    """``_kernels.block_copy`` for tensors (engine-driven), or None when the kernels do
    not handle these inputs (all on the host: no stream to launch on)."""
    layout = LAYOUTS.get(getattr(engine_kv_format, "name", ""))
    if layout is None or not isinstance(paged, list) or not paged or not objects:
        return None
    chunks = [o for o in objects if isinstance(o, torch.Tensor)]
    if not all(isinstance(t, torch.Tensor) for t in paged) or len(chunks) != len(
        objects
    ):
        return None  # pointer mode
    first = paged[0]
    plane_dim, block_dim = layout
    bs = int(shape_desc.bs)
    if bs <= 0 or chunk_size <= 0 or chunk_size % bs or skip < 0:
        return None  # the baseline raises the documented errors
    if any(
        t.shape != first.shape or t.stride() != first.stride() or t.dtype != first.dtype
        for t in paged
    ):
        return None
    if any(t.device.type not in KERNEL_DEVICES for t in (*paged, *chunks)):
        return None
    on_device = [t.device for t in (*paged, *chunks) if t.device.type == DEVICE_TYPE]
    if not on_device:
        return None
    if first.dim() != (3 if plane_dim is None else 5):
        return None
    one_block = (
        first[0] if plane_dim is None else first[0, 0]
    )  # (BS, ...) of one block and plane
    if not one_block.is_contiguous():
        return None
    element = first.element_size()
    block_bytes = one_block.numel() * element
    hidden = one_block.numel() // bs
    expected = (
        (len(paged), chunk_size, hidden)
        if plane_dim is None
        else (2, len(paged), chunk_size, hidden)
    )
    if any(
        tuple(o.shape) != expected or not o.is_contiguous() or o.dtype != first.dtype
        for o in chunks
    ):
        return None
    is_d2h = int(direction) == int(compat.TransferDirection.D2H)
    if not is_d2h and int(direction) != int(compat.TransferDirection.H2D):
        return None
    # Host chunks at the address the kernel reaches them at. Pageable ones never reach
    # it: it gets pinned temporaries and is awaited, as LMCache 0.5.7 stages them.
    addresses, staged = [o.data_ptr() for o in chunks], []
    kernel_device = int(on_device[0].index)
    for index, chunk in enumerate(chunks):
        if chunk.device.type == "cpu":
            size = chunk.numel() * element
            address = kernel_host_address(chunk.data_ptr(), size, kernel_device)
            if address is None:
{%- if cookiecutter.lmcache_driven != 'no' %}
                op = "multi_layer_block_kv_transfer"
                check_host_pinned(chunk.data_ptr(), size, op)  # reported once
{%- endif %}
                pinned = torch.empty_like(chunk, pin_memory=True)
                staged.append((chunk, pinned if is_d2h else pinned.copy_(chunk)))
                address = kernel_host_address(pinned.data_ptr(), size, kernel_device)
            if address is None:
                return None  # no kernel reaches this runtime's pinned memory
            addresses[index] = address
    num_blocks = first.shape[block_dim]
    positions = len(addresses) * (chunk_size // bs)
    arguments = (
        [t.data_ptr() for t in paged],
        first.stride(plane_dim) * element if plane_dim is not None else 0,
        first.stride(block_dim) * element,
        block_bytes,
        1 if plane_dim is None else 2,
        addresses,
        chunk_size // bs,
        _device_ids(block_ids, on_device[0], num_blocks, skip, positions),
        num_blocks,
        skip,
        is_d2h,
    )
    if staged:
        kernel = staged_kernel(_kernels.block_copy, on_device[0], staged, is_d2h)
        return kernel, on_device[0], arguments
    return _kernels.block_copy, on_device[0], arguments


{%- if cookiecutter.lmcache_driven != 'no' %}


def pointer_plan(
    paged: torch.Tensor | list,
    objects: list[int] | list[torch.Tensor],
    block_ids: torch.Tensor | list[int],
    device: torch.device | str,
    direction: compat.TransferDirection,
    shape_desc: compat.PageBufferShapeDesc,
    chunk_size: int,
    engine_kv_format: compat.EngineKVFormat,
    skip: int,
) -> Plan:
    """``_kernels.block_copy_table`` for the LMCache-driven server: ``paged`` is a
    device table of layer addresses, each layer in its format's shape, its blocks
    ``shape_desc.block_stride_elems`` apart when LMCache sets it (padded blocks);
    ``objects`` are chunk addresses in the staging buffer. The table and the block
    ids are read by the kernel where they are, as LMCache's CUDA kernel reads them
    (a host read would wait for the device at every batch)."""
    name = getattr(engine_kv_format, "name", "")
    layout = (None, 0) if name == PLANE_TUPLES else LAYOUTS.get(name)
    if layout is None or not isinstance(paged, torch.Tensor) or paged.dim() != 1:
        return None
    if paged.dtype not in (torch.int64, torch.uint64) or not paged.numel():
        return None
    if paged.device.type != DEVICE_TYPE or not paged.is_contiguous():
        return None
    if not objects or not all(isinstance(o, int) for o in objects):
        return None
    nb, bs, nh, hs = (int(getattr(shape_desc, f)) for f in ("nb", "bs", "nh", "hs"))
    hidden = hs if layout[0] is None and name != PLANE_TUPLES else nh * hs
    if bs <= 0 or chunk_size <= 0 or chunk_size % bs or skip < 0:
        return None
    is_d2h = int(direction) == int(compat.TransferDirection.D2H)
    if not is_d2h and int(direction) != int(compat.TransferDirection.H2D):
        return None
    on_device = torch.device(device)
    if on_device.index is None:
        on_device = paged.device  # the server's table is on the transfer's device
    itemsize = compat.infer_kv_dtype(None, None, shape_desc).itemsize
    block = bs * hidden * itemsize  # the bytes of one block (and plane), moved whole
    announce_pointer_mode("native kernels")
    # One block's step in memory: LMCache's block_stride_elems when it sets one (blocks
    # padded, e.g. a pool shared with larger groups), else the block itself. Then the
    # (plane, block) strides of [2, NB, BS, NH, HS], [NB, 2, BS, NH, HS] and [NB, BS,
    # HS] follow from it as in LMCache's CUDA kernel (resolve_block_addressing,
    # csrc/cuda/mp_mem_kernels.cu): a kernel that takes blocks as back to back copies
    # a padded cache's wrong bytes.
    step = int(getattr(shape_desc, "block_stride_elems", 0) or 0) * itemsize or block
    plane, stride = (0, step) if layout[0] is None else (step, step)
    if layout[0] == 0:
        plane = nb * step
    elif layout[0] == 1:
        stride = 2 * step
    planes = 1 if layout[0] is None else 2
    chunk_bytes = planes * paged.numel() * chunk_size // bs * block
    arguments = (
        paged,
        name == PLANE_TUPLES,  # [K0, V0, K1, V1, ...]: the kernel takes Ks, then Vs
        plane,
        stride,
        block,
        planes,
        [_object_address(int(o), chunk_bytes, on_device.index) for o in objects],
        chunk_size // bs,
        _device_ids(block_ids, on_device),
        nb,
        skip,
        is_d2h,
    )
    return _kernels.block_copy_table, on_device, arguments


def _object_address(address: int, nbytes: int, device: int) -> int:
    """Where the kernel reaches a chunk object: in device memory (the staging buffer)
    as it is, in pinned host memory at its device address (``_host_access``).
    Pageable host memory is refused: no kernel that runs later can read it."""
    try:
        getattr(torch, TORCH_MODULE_NAME).pointer_device(address)
        return address
    except ValueError:
        host = kernel_host_address(address, nbytes, device)
    if host is None:
        raise ValueError(
            f"chunk object at 0x{address:x} ({nbytes} bytes) is neither {DEVICE_TYPE} "
            "memory nor within one pinned host range: a kernel cannot read pageable "
            "host memory. Pin the chunks' buffer through this plugin's pin backend."
        )
    return host
{%- endif %}


def _device_ids(
    block_ids: torch.Tensor | list[int],
    device: torch.device,
    num_blocks: int = 0,
    skip: int = 0,
    positions: int = 0,
) -> torch.Tensor:
    """The block ids as a contiguous int64 tensor on the device, where the kernel reads
    (and checks) them. Ids on the host are checked here first, up to ``positions``
    past ``skip`` (IndexError, as LMCache's baseline raises), then copied in stream
    order (no wait: the host's copy is captured). The server's are on the device
    already: a no-op ``.to``/``.reshape`` still costs a dispatch."""
    if isinstance(block_ids, torch.Tensor) and block_ids.device.type == DEVICE_TYPE:
        ids = block_ids if block_ids.dtype == torch.int64 else block_ids.to(torch.int64)
        ids = ids if ids.dim() == 1 else ids.reshape(-1)
        return ids if ids.is_contiguous() else ids.contiguous()
    on_host = block_ids.tolist() if isinstance(block_ids, torch.Tensor) else block_ids
    host = list(on_host)
    bad = [i for i in host[skip:positions] if not 0 <= i < num_blocks]
    if bad:
        raise IndexError(f"block id {bad[0]} out of range [0, {num_blocks})")
    return torch.tensor(host, dtype=torch.int64).to(device, non_blocking=True)
