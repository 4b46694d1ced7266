# SPDX-License-Identifier: Apache-2.0
"""KV-cache layouts as the installed LMCache release lays them out.

Why a module of its own: these helpers follow LMCache's KV-format registry and its
torch baseline, which differ between releases; a plugin's ops call them at run time
only (``ops_support.OpsSupport.pointer_mode_operands``).

Must not be imported during ``import lmcache``: the KV-format registry imports
``lmcache.device_ops``. ``ops_support`` imports it inside the function that needs
it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from typing import Any
import math

# Local
from .resolve import installed_lmcache_version, lazy


def chunk_object_shape(
    engine_kv_format: Any, shape_desc: Any, chunk_tokens: int
) -> tuple[int, ...]:
    """The shape LMCache gives one chunk object (one kernel group's part) of this KV
    format.

    MLA: ``(layers, tokens, head_size)``; fused-packed and single-K/V formats:
    ``(layers, tokens, heads * head_size)``; the rest ``(2, layers, tokens,
    heads * head_size)``. ``is_single_kv`` exists from 0.5.6 on (older
    releases have no such format).
    """
    spec = lazy("kv_format_spec")(engine_kv_format)
    nl, nh, hs = int(shape_desc.nl), int(shape_desc.nh), int(shape_desc.hs)
    if spec.is_mla:
        return (nl, chunk_tokens, hs)
    if spec.is_fused_packed or getattr(spec, "is_single_kv", False):
        return (nl, chunk_tokens, nh * hs)
    return (2, nl, chunk_tokens, nh * hs)


def paged_layers_for_baseline(
    paged_buffer_ptrs: Any,
    engine_kv_format: Any,
    shape_desc: Any,
    device: Any,
    tensor_from_ptr: Callable[..., Any],
) -> Any:
    """The paged-KV argument in a form the installed torch baseline can use.

    From 0.5.6 on the baseline rebuilds device tensors from a pointer table
    through ``DeviceOps.tensor_from_ptr`` (the plugin's), so the table passes
    through unchanged. The 0.5.4/0.5.5 baseline rebuilds them only for cpu, cuda
    and musa, so for per-layer KV formats this rebuilds them with the plugin's
    ``tensor_from_ptr`` instead. Per-layer (K, V) planes (the table interleaves
    them: [K0, V0, K1, V1, ...]) no release's baseline rebuilds: the list of
    ``(K, V)`` tuples is rebuilt here on every release. Nor does any release's
    rebuild padded blocks (``block_stride_elems`` past the tight size: LMCache sets
    it for block-first layers such as MLA's); those layers are rebuilt here with
    their blocks that far apart, as MUSA's pointer path does.
    """
    # Third Party
    import torch

    is_pointer_table = isinstance(
        paged_buffer_ptrs, torch.Tensor
    ) and paged_buffer_ptrs.dtype in (
        torch.int64,
        torch.uint64,
    )
    if not is_pointer_table:
        return paged_buffer_ptrs
    spec = lazy("kv_format_spec")(engine_kv_format)
    second_tuple = getattr(spec, "is_kv_second_tuple", False)  # 0.5.5+
    plane_tuples = second_tuple and not spec.is_mla
    layer_list = spec.is_layer_list and not (second_tuple and spec.is_mla)
    nb, bs, nh, hs = (
        int(shape_desc.nb),
        int(shape_desc.bs),
        int(shape_desc.nh),
        int(shape_desc.hs),
    )
    stride = int(getattr(shape_desc, "block_stride_elems", 0) or 0)
    padded = stride if stride and stride != bs * nh * hs else 0
    rebuilds = hasattr(lazy("DeviceOps"), "tensor_from_ptr")  # 0.5.6+
    if rebuilds and not plane_tuples and not (padded and layer_list):
        return paged_buffer_ptrs
    if not layer_list:
        raise NotImplementedError(
            f"LMCache-driven transfer of {engine_kv_format!r} KV caches without one "
            "tensor per layer needs lmcache 0.5.6 or later (installed: "
            f"{installed_lmcache_version()}); upgrade LMCache or use engine_driven "
            "mode."
        )
    dtype = lazy("infer_kv_dtype")(None, None, shape_desc)
    addresses = [int(address) for address in paged_buffer_ptrs.tolist()]
    if plane_tuples:
        shape: tuple[int, ...] = (nb, bs, nh, hs)
    elif hasattr(spec, "paged_layer_shape"):  # 0.5.6+
        shape = tuple(spec.paged_layer_shape(nb, bs, nh, hs))
    else:
        shape = lazy("per_layer_paged_shape")(engine_kv_format, nb, bs, nh, hs)
    layers = [
        _paged_layer(tensor_from_ptr, address, shape, padded, dtype, device)
        for address in addresses
    ]
    if plane_tuples:
        return list(zip(layers[0::2], layers[1::2], strict=True))
    return layers


def _paged_layer(
    tensor_from_ptr: Callable[..., Any],
    address: int,
    shape: tuple[int, ...],
    block_stride: int,
    dtype: Any,
    device: Any,
) -> Any:
    """One paged layer over its device memory at ``address``: contiguous, or with a
    ``block_stride`` its blocks (dim 0) that many elements apart, each block tight
    (the only padding LMCache accepts: ``attempt_permute_to_contiguous_view``), as
    MUSA rebuilds them (devices/musa/device_ops.py ``_paged_shape_and_stride``)."""
    if not block_stride:
        return tensor_from_ptr(address, shape, dtype, device)
    inner = tuple(math.prod(shape[dim + 1 :]) for dim in range(1, len(shape)))
    span = (shape[0] - 1) * block_stride + math.prod(shape[1:])
    memory = tensor_from_ptr(address, (span,), dtype, device)
    return memory.as_strided(shape, (block_stride, *inner))
