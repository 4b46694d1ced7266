# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Device-independent helpers of ``device_ops.py``.

Why it exists: ``device_ops.py`` holds what a vendor replaces. What is the same
for every device (the one-layout check of a transfer, contiguous strides and,
for LMCache-driven transfer, the pointer-mode operands) lives here instead and
needs no vendor edits. So does the report of slow paths: a transfer that works
but silently takes a path many times slower than the one the device offers (a
copy from pageable host memory, a native op falling back to the baseline). Each
kind is logged once per process with ``SLOW_PATH_MARK``, which benchmarks{{ " and
the doctor" if cookiecutter.ownership == "wheel" else "" }} look for.

Must not import ``device_ops`` or anything that imports it (``device_ops``
imports this module); of this package only ``names``, ``_lmcache_compat`` and
(at call time) ``pin_memory``.
"""

# Future
from __future__ import annotations

# Standard
from collections import Counter
{%- if cookiecutter.lmcache_driven != 'no' %}
from collections.abc import Callable
{%- endif %}

# Third Party
import torch

# Local
{%- if cookiecutter.lmcache_driven != 'no' %}
from ._lmcache_compat import EngineKVFormat, PageBufferShapeDesc, init_logger
{%- else %}
from ._lmcache_compat import init_logger
{%- endif %}
from .names import SLOW_PATH_MARK

logger = init_logger(__name__)
#: The name the log lines give the ops class.
OPS_CLASS = "{{ cookiecutter.class_prefix }}DeviceOps"
#: Slow paths taken in this process, by kind (the tests and the doctor read it).
slow_paths: Counter[str] = Counter()
{%- if cookiecutter.lmcache_driven != 'no' %}
_announced_pointer_mode = False
{%- endif %}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (zero sizes count as one)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def host_pieces(nbytes: int, offset: int, alignment: int) -> list[tuple[int, int]]:
    """``(start, size)`` pieces of a copy of ``nbytes``, split where its host range
    crosses a pinned registration.

    LMCache's lazy allocator pins its host buffer as separate registrations of
    ``alignment`` bytes, and ``offset`` is where the copy starts in that buffer
    (``host_buffer_offset``, ``host_buffer_alignments``). An asynchronous copy across
    two registrations is a pageable copy on a device: LMCache's CUDA op and its MUSA
    backend split there, and so does this plugin.
    """
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(
            f"host_buffer_alignments must be a positive power of two, got {alignment}"
        )
    pieces, start = [], 0
    while start < nbytes:
        size = min(nbytes - start, alignment - (offset + start) % alignment)
        pieces.append((start, size))
        start += size
    return pieces


def report_slow_path(kind: str, detail: str) -> None:
    """Count a slow path; the first of each ``kind`` in a process is logged as a
    warning that starts with ``SLOW_PATH_MARK``."""
    slow_paths[kind] += 1
    if slow_paths[kind] == 1:
        logger.warning("%s %s: %s", SLOW_PATH_MARK, kind, detail)
{%- if cookiecutter.lmcache_driven != 'no' %}


def check_host_pinned(ptr: int, nbytes: int, op: str) -> None:
    """Report a copy between the device and host memory that is not pinned, when
    this device pins host memory (``pin_memory.host_range_is_pinned``).

    LMCache pins its host buffers through the pin backend and copies from
    unpinned ones without a word when pinning failed or was skipped; on hardware
    such a copy bounces through a staging buffer, many times slower.
    """
    # Local
    from .pin_memory import host_range_is_pinned

    if nbytes > 0 and host_range_is_pinned(ptr, nbytes) is False:
        report_slow_path(
            "pageable host memory",
            f"{OPS_CLASS}.{op} copies {nbytes} bytes at host address 0x{ptr:x}, "
            "which is not pinned although this device pins host memory: check "
            "that LMCache pins through this plugin's pin backend and that "
            "pinning succeeds.",
        )
{%- endif %}


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

    announce_pointer_mode("torch baseline")
    shape = chunk_object_shape(engine_kv_format, shape_desc, chunk_tokens)
    dtype = infer_kv_dtype(None, None, shape_desc)
    objects = [tensor_from_ptr(address, shape, dtype, device) for address in addresses]
    paged = paged_layers_for_baseline(
        paged_buffer_ptrs, engine_kv_format, shape_desc, device, tensor_from_ptr
    )
    return objects, paged


def announce_pointer_mode(how: str) -> None:
    """Log once per process that LMCache drove this plugin's ops with device pointers
    (the server side), and ``how`` they ran."""
    global _announced_pointer_mode
    if not _announced_pointer_mode:
        _announced_pointer_mode = True
        logger.info(
            "%s: serving pointer-mode multi_layer_block_kv_transfer (%s)",
            OPS_CLASS,
            how,
        )
{%- endif %}
