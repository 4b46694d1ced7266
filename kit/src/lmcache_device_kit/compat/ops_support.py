# SPDX-License-Identifier: Apache-2.0
"""The device-independent helpers of a plugin's ops, and its slow-path report.

Why it exists: a plugin's ``device_ops.py`` holds what a vendor replaces. What is
the same for every device lives here: the one-layout check of a transfer,
contiguous strides, the host pieces of a copy and, for LMCache-driven transfer, the
pointer-mode operands of the torch baseline. So does the report of slow paths: a
transfer that works but silently takes a path many times slower than the one the
device offers (a copy from pageable host memory, a native op falling back to the
baseline). Each kind is logged once per process with the plugin's
``SLOW_PATH_MARK``, which benchmarks and the doctor look for; ``OpsSupport`` holds
that per-plugin state, made by the plugin's binding module with its names.

Must not import torch or LMCache at top level (the binding module is imported
inside ``import lmcache``): they are imported in the functions that use them. Of
these shims, ``resolve`` at top level and ``kv_layout`` at call time.
"""

# Future
from __future__ import annotations

# Standard
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
import importlib
import logging

# Local
from .resolve import lazy


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
    backend split there, and so does a plugin.
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


def as_baseline_bytes(paged: Any, objects: Any, shape_desc: Any) -> tuple[Any, ...]:
    """The torch baseline's operands, with fp8 KV caches as the bytes they are.

    The baseline (``torch_ops.multi_layer_block_kv_transfer``) copies with
    ``index_copy``, which torch lacks for fp8 (on the CPU, and on other devices): an
    fp8 cache in a format no kernel of the plugin takes would fail there. A copy moves
    bytes, never values, so fp8 tensors go as uint8 views and ``shape_desc`` as a copy
    that says uint8 (pointer tables stay: the baseline views them through it).
    Anything else is returned as it is.
    """
    # Third Party
    import torch

    dtype = getattr(shape_desc, "dtype", None)
    if dtype is None:
        dtype = next((t.dtype for t in _tensors(paged, objects)), None)
    if dtype is None or dtype.itemsize != 1 or not dtype.is_floating_point:
        return paged, objects, shape_desc
    as_bytes = type(shape_desc)()
    for name in [n for n in dir(shape_desc) if not n.startswith("_")]:
        setattr(as_bytes, name, getattr(shape_desc, name))
    as_bytes.element_size, as_bytes.dtype = 1, torch.uint8

    def raw(value: Any) -> Any:  # pointer tables (int64) stay as they are
        if isinstance(value, torch.Tensor) and value.dtype == dtype:
            return value.view(torch.uint8)
        if isinstance(value, list | tuple):
            return type(value)(raw(v) for v in value)
        return value

    return raw(paged), raw(objects), as_bytes


def _tensors(*values: Any) -> Iterator[Any]:
    """The tensors in ``values``, nested lists and tuples included, in order."""
    for value in values:
        if isinstance(value, list | tuple):
            yield from _tensors(*value)
        elif hasattr(value, "dtype") and hasattr(value, "view"):
            yield value


def check_one_layer_layout(paged: object) -> None:
    """Refuse KV-cache layers that disagree in shape or dtype within one transfer.

    LMCache describes all layers of one call with a single ``shape_desc`` and
    does not check them: a layer of another shape or dtype would be copied with
    the wrong geometry and stored as wrong bytes (or fail deep in a kernel).
    Pointer tables (LMCache-driven) carry no shapes and pass unchecked.
    """
    # Third Party
    import torch

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


class OpsSupport:
    """One plugin's slow-path report and pointer-mode announcement.

    ``mark`` starts every slow-path line (the plugin's ``SLOW_PATH_MARK``),
    ``ops_class`` names its ops in them, ``binding`` is the plugin's binding module
    (``<package>._lmcache_compat``): the lines are logged as ``<package>.ops_support``,
    and ``check_host_pinned`` asks ``<package>.pin_memory.host_range_is_pinned``.
    """

    def __init__(self, mark: str, ops_class: str, binding: str) -> None:
        self.mark, self.ops_class = mark, ops_class
        self.package = binding.rpartition(".")[0]
        #: Slow paths taken in this process, by kind (the tests and the doctor read
        #: it).
        self.slow_paths: Counter[str] = Counter()
        self._announced_pointer_mode = False
        self._logger: logging.Logger | None = None

    def logger(self) -> logging.Logger:
        """LMCache's logger (its format and level), made on first use: LMCache's
        ``init_logger`` is not importable while LMCache loads the plugin."""
        if self._logger is None:
            self._logger = lazy("init_logger")(f"{self.package}.ops_support")
        return self._logger

    def report_slow_path(self, kind: str, detail: str) -> None:
        """Count a slow path; the first of each ``kind`` in a process is logged as a
        warning that starts with the mark."""
        self.slow_paths[kind] += 1
        if self.slow_paths[kind] == 1:
            self.logger().warning("%s %s: %s", self.mark, kind, detail)

    def check_host_pinned(self, ptr: int, nbytes: int, op: str) -> None:
        """Report a copy between the device and host memory that is not pinned, when
        the device pins host memory (``pin_memory.host_range_is_pinned``).

        LMCache pins its host buffers through the pin backend and copies from
        unpinned ones without a word when pinning failed or was skipped; on hardware
        such a copy bounces through a staging buffer, many times slower.
        """
        pins = importlib.import_module(f"{self.package}.pin_memory")
        if nbytes > 0 and pins.host_range_is_pinned(ptr, nbytes) is False:
            self.report_slow_path(
                "pageable host memory",
                f"{self.ops_class}.{op} copies {nbytes} bytes at host address "
                f"0x{ptr:x}, which is not pinned although this device pins host "
                "memory: check that LMCache pins through this plugin's pin backend "
                "and that pinning succeeds.",
            )

    def announce_pointer_mode(self, how: str) -> None:
        """Log once per process that LMCache drove the ops with device pointers (the
        server side), and ``how`` they ran."""
        if not self._announced_pointer_mode:
            self._announced_pointer_mode = True
            self.logger().info(
                "%s: serving pointer-mode multi_layer_block_kv_transfer (%s)",
                self.ops_class,
                how,
            )

    def pointer_mode_operands(
        self,
        paged_buffer_ptrs: Any,
        addresses: list[int],
        shape_desc: Any,
        chunk_tokens: int,
        engine_kv_format: Any,
        device: Any,
        tensor_from_ptr: Callable[..., Any],
    ) -> tuple[list[Any], Any]:
        """The chunk objects and paged layers of a pointer-mode transfer, as device
        tensors the torch baseline can copy.

        The LMCache-driven server passes chunk objects as ``addresses`` in the cache
        context's staging buffer; ``tensor_from_ptr`` (the ops' own) views them.
        """
        # At call time: the KV-format registry imports lmcache.device_ops, which is
        # being created while the plugin's ops load.
        # Local
        from .kv_layout import chunk_object_shape, paged_layers_for_baseline

        self.announce_pointer_mode("torch baseline")
        shape = chunk_object_shape(engine_kv_format, shape_desc, chunk_tokens)
        dtype = lazy("infer_kv_dtype")(None, None, shape_desc)
        objects = [tensor_from_ptr(a, shape, dtype, device) for a in addresses]
        paged = paged_layers_for_baseline(
            paged_buffer_ptrs, engine_kv_format, shape_desc, device, tensor_from_ptr
        )
        return objects, paged
