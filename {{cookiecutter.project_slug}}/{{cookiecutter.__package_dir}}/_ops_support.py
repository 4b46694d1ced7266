# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Device-independent helpers of ``device_ops.py``.

Why it exists: ``device_ops.py`` holds what a vendor replaces. What is the same
for every device (the one-layout check of a transfer, contiguous strides and,
for LMCache-driven transfer, the pointer-mode operands) lives here instead and
needs no vendor edits.

Must not import ``device_ops`` or anything that imports it (``device_ops``
imports this module); of this package only ``names`` and ``_lmcache_compat``.
"""

# Future
from __future__ import annotations

{%- if cookiecutter.lmcache_driven != 'no' %}

# Standard
from collections.abc import Callable
{%- endif %}

# Third Party
import torch
{%- if cookiecutter.lmcache_driven != 'no' %}

# Local
from ._lmcache_compat import EngineKVFormat, PageBufferShapeDesc, init_logger

logger = init_logger(__name__)
#: The name the pointer-mode log line gives the ops class.
OPS_CLASS = "{{ cookiecutter.class_prefix }}DeviceOps"
_announced_pointer_mode = False
{%- endif %}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (zero sizes count as one)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def check_one_layer_layout(paged: object) -> None:
    """Refuse KV-cache layers that disagree in shape or dtype within one transfer.

    LMCache describes all layers of one call with a single ``shape_desc`` and
    does not check them: a layer of another shape or dtype would be copied with
    the wrong geometry and stored as wrong bytes (or fail deep in a kernel).
    Pointer tables (LMCache-driven) carry no shapes and pass unchecked.
    """
    if (
        not isinstance(paged, list)
        or not paged
        or not all(isinstance(t, torch.Tensor) for t in paged)
    ):
        return
    first = paged[0]
    for index, layer in enumerate(paged):
        if (
            layer.shape != first.shape
            or layer.dtype != first.dtype
            or layer.device != first.device
        ):
            raise ValueError(
                "KV cache layers of one transfer must share shape, dtype and "
                f"device: layer 0 is {tuple(first.shape)} {first.dtype} on "
                f"{first.device}, layer {index} is {tuple(layer.shape)} "
                f"{layer.dtype} on {layer.device}. Register layers with another "
                "shape as a separate KV cache group, all in one dtype on one device."
            )
{%- if cookiecutter.lmcache_driven != 'no' %}


def pointer_mode_operands(
    paged_buffer_ptrs: torch.Tensor | list,
    addresses: list[int],
    shape_desc: PageBufferShapeDesc,
    chunk_tokens: int,
    engine_kv_format: EngineKVFormat,
    device: torch.device,
    tensor_from_ptr: Callable[..., torch.Tensor],
) -> tuple[list[torch.Tensor], torch.Tensor | list]:
    """The chunk objects and paged layers of a pointer-mode transfer, as device
    tensors the torch baseline can copy.

    The LMCache-driven server passes chunk objects as ``addresses`` in the cache
    context's staging buffer; ``tensor_from_ptr`` (the ops' own) views them.
    """
    # Imported at call time: the KV-format registry imports lmcache.device_ops,
    # which is being created while this module loads.
    # Local
    from ._lmcache_compat import infer_kv_dtype
    from ._lmcache_compat.kv_layout import chunk_object_shape, paged_layers_for_baseline

    _announce_pointer_mode()
    shape = chunk_object_shape(engine_kv_format, shape_desc, chunk_tokens)
    dtype = infer_kv_dtype(None, None, shape_desc)
    objects = [tensor_from_ptr(address, shape, dtype, device) for address in addresses]
    paged = paged_layers_for_baseline(
        paged_buffer_ptrs, engine_kv_format, shape_desc, device, tensor_from_ptr
    )
    return objects, paged


def _announce_pointer_mode() -> None:
    """Log once per process that LMCache drove this plugin's ops with device pointers
    (the server side)."""
    global _announced_pointer_mode
    if not _announced_pointer_mode:
        _announced_pointer_mode = True
        logger.info("%s: serving pointer-mode multi_layer_block_kv_transfer", OPS_CLASS)
{%- endif %}
