# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The LMCache server's view of one worker's KV caches (LMCache-driven mode).

``{{ cookiecutter.class_prefix }}DeviceSpec.create_cache_context`` builds it from the
worker's ``{{ cookiecutter.class_prefix }}IPCWrapper`` list of
{{ cookiecutter.device_name }} KV caches. It maps the caches, discovers their layout
with LMCache's own helpers, and owns what the server's transfer code asks for: per
kernel-group pointer tables, a temporary staging buffer on the device, a stream
for the copies and a host-callback stream adapter (``cupy_stream``).

Imported lazily by the server, never during ``import lmcache``.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Sequence
from typing import Any
import functools

# Third Party
import torch

# Local
from ._lmcache_compat import (
    BaseCacheContext,
    EngineType,
    KVLayerGroupsManager,
    engine_group_layer_indices,
    get_device,
    get_group_data_ptrs,
    init_logger,
    normalize_and_discover_per_layer_formats,
)
from .names import DEVICE_TYPE, TORCH_MODULE_NAME
from .runtime import after_stream_work

logger = init_logger(__name__)

#: Chunks the server may stage at once (LMCache's CPU and CUDA contexts use 4).
MAX_BATCH_SIZE = 4
#: Capacity of the device buffer LMCache stages block ids into.
MAX_BLOCK_IDS = 1_000_000


class HostCallbackStream:
    """The ``cupy_stream`` contract LMCache's server uses: ``ptr``, ``synchronize``,
    ``launch_host_func``."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._runtime = getattr(torch, TORCH_MODULE_NAME)

    @property
    def ptr(self) -> int:
        """Native stream handle passed to ``record_completion_on_stream``.

        TODO(vendor): return your runtime's raw stream pointer (CUDA: ``cuda_stream``).
        """
        return int(self._runtime.stream_handle(self._stream))

    def synchronize(self) -> None:
        self._stream.synchronize()

    def launch_host_func(
        self, callback: Callable[[Any], None], arg: Any = None
    ) -> None:
        """Run ``callback(arg)`` once the work queued on the stream so far is done:
        after a synchronization, on this thread (``runtime.py`` says why)."""
        after_stream_work(self.ptr, functools.partial(callback, arg))


class {{ cookiecutter.class_prefix }}CacheContext(BaseCacheContext):
    """Mapped {{ cookiecutter.device_name }} KV caches plus the server's staging state for one
    worker."""

    device_type = DEVICE_TYPE

    def __init__(
        self,
        kv_caches: Sequence[Any],
        lmcache_tokens_per_chunk: int = 256,
        layout_hints: Any = None,
        engine_group_infos: Sequence[Any] = (),
        engine_type: Any = None,
        separate_object_groups: bool = False,
        full_sw_kv: bool = False,
        *,
        max_batch_size: int = MAX_BATCH_SIZE,
    ) -> None:
        if not kv_caches:
            raise ValueError(
                f"{type(self).__name__} needs the worker's wrapped KV caches; got none"
            )
        # Kept for close(): each wrapper holds this process's mapping of the worker's
        # memory.
        self._wrappers = list(kv_caches)
        self._closed = False
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self._max_batch_size = max_batch_size
        try:
            self._init_impl(
                lmcache_tokens_per_chunk,
                layout_hints,
                engine_group_infos,
                engine_type,
                separate_object_groups,
                full_sw_kv,
            )
        except BaseException:
            # Mapping or layout discovery failed part way: unmap what was mapped, or a
            # failed registration keeps the worker's KV pool mapped in the server for
            # its lifetime.
            self._close_wrappers()
            raise

    def _init_impl(
        self,
        lmcache_tokens_per_chunk: int,
        layout_hints: Any,
        engine_group_infos: Sequence[Any],
        engine_type: Any,
        separate_object_groups: bool,
        full_sw_kv: bool,
    ) -> None:
        # a layer: a tensor, or its planes as the engine registered them ((K, V) tuples)
        layers = [wrapper.to_tensor() for wrapper in self._wrappers]
        normalized, engine_kv_formats = normalize_and_discover_per_layer_formats(
            layers,
            engine_group_layer_indices(engine_group_infos),
            engine_type if engine_type is not None else EngineType.VLLM,
            layout_hints,
        )
        kv_list = list(normalized)
        device = get_device(kv_list)  # the first tensor's, as LMCache's NPU context
        groups = KVLayerGroupsManager(
            kv_list,
            engine_kv_formats=engine_kv_formats,
            engine_group_infos=engine_group_infos,
            lmcache_tokens_per_chunk=lmcache_tokens_per_chunk,
            separate_object_groups=separate_object_groups,
        )
        if full_sw_kv:
            groups.enable_full_sw_kv()
        super().__init__(
            kv_caches=kv_list,
            device=device,
            num_layers=len(engine_kv_formats),
            kv_layer_groups_manager=groups,
            block_ids_buffer=torch.empty(
                MAX_BLOCK_IDS, dtype=torch.long, device=device
            ),
            lmcache_tokens_per_chunk=lmcache_tokens_per_chunk,
        )
        # Per kernel group: an int64 table of layer base addresses, on the device.
        self._group_pointers = [
            torch.tensor(
                get_group_data_ptrs(
                    kv_list, self.get_engine_kv_format(index), group.layer_indices
                ),
                dtype=torch.long,
            ).to(device)
            for index, group in enumerate(groups.kernel_groups)
        ]
        # One staging slot per batch entry, laid out as LMCache's CUDA context does
        # (so lmcache 0.5.7's default transfer_object_group, which copies through
        # these views, needs no override): each object group's kernel groups back to
        # back (with separate_object_groups an object group need not be a range of
        # kernel groups), each sized for the slots one chunk transfers (a sliding
        # window shorter than a chunk: its window). Spans are (offset in a slot,
        # bytes) per kernel and object group; views: one chunk's (shape, dtype).
        self._kernel_spans: dict[int, tuple[int, int]] = {}
        self._kernel_views: dict[int, tuple[torch.Size, torch.dtype]] = {}
        self._object_spans: dict[int, tuple[int, int]] = {}
        offset = 0
        for object_index, object_group in enumerate(groups.object_groups):
            start = offset
            for index in object_group.kernel_group_indices:
                shape, dtype = self._kernel_views[index] = (
                    self.get_kernel_group_shape_dtype(lmcache_tokens_per_chunk, index)
                )
                self._kernel_spans[index] = (offset, shape.numel() * dtype.itemsize)
                offset += shape.numel() * dtype.itemsize
            self._object_spans[object_index] = (start, offset - start)
        self._slot_bytes = offset
        self._staging = torch.empty(
            self._slot_bytes * self._max_batch_size, dtype=torch.uint8, device=device
        )
        self._views: dict[tuple[int, int], torch.Tensor] = {}
        runtime = getattr(torch, TORCH_MODULE_NAME)
        self._stream = runtime.Stream(device=device)
        self._callback_stream = HostCallbackStream(self._stream)
        logger.info(
            "%s: %d layers on %s, %d kernel group(s), staging buffer %d bytes",
            type(self).__name__,
            self.num_layers_,
            device,
            len(groups.kernel_groups),
            self._staging.numel(),
        )

    @property
    def stream(self) -> Any:
        return self._stream

    @property
    def cupy_stream(self) -> HostCallbackStream:
        return self._callback_stream

    @property
    def max_batch_size(self) -> int:
        return self._max_batch_size

    def close(self) -> None:
        """Release the staging buffers and this process's mappings of the worker's
        memory (idempotent).

        The stream is drained first, so no queued copy still touches the staging
        buffer or the mappings when they go; the tensors over the mappings are
        dropped before the mappings are closed. A drain that fails (a lost
        device: its queued work will never run) still releases everything,
        allocating nothing on the device, then raises the device's error.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._stream.synchronize()
        finally:
            self._group_pointers, self._views = [], {}
            self._staging, self._max_batch_size = torch.empty(0, dtype=torch.uint8), 0
            self.kv_caches_: list[torch.Tensor] = []
            self._close_wrappers()

    def _close_wrappers(self) -> None:
        """Close every wrapper, going on past a failing one (each failure is logged)."""
        for wrapper in self._wrappers:
            try:
                wrapper.close()
            except Exception:
                logger.warning(
                    "closing %s failed", type(wrapper).__name__, exc_info=True
                )
        self._wrappers = []

    def get_kernel_group_kv_pointers(self, kernel_group_idx: int) -> torch.Tensor:
        return self._group_pointers[kernel_group_idx]

    def _slot(self, batch: int, spans: dict, index: int, kind: str) -> torch.Tensor:
        # Either index out of range is refused, as LMCache's CUDA context does.
        if not 0 <= batch < self._max_batch_size or index not in spans:
            raise ValueError(f"Invalid batch_idx {batch} or {kind}_group_idx {index}")
        start = batch * self._slot_bytes + spans[index][0]
        return self._staging[start : start + spans[index][1]]

    def get_temp_kernel_group_buffer(
        self, batch_idx: int, kernel_group_idx: int
    ) -> torch.Tensor:
        # Made once per (slot, group): each view crosses the dispatcher, per chunk.
        view = self._views.get((batch_idx, kernel_group_idx))
        if view is None:
            slot = self._slot(batch_idx, self._kernel_spans, kernel_group_idx, "kernel")
            shape, dtype = self._kernel_views[kernel_group_idx]
            view = slot.view(dtype).view(shape)
            self._views[(batch_idx, kernel_group_idx)] = view
        return view

    def get_temp_object_group_buffer(
        self, batch_idx: int, object_group_idx: int
    ) -> torch.Tensor:
        return self._slot(batch_idx, self._object_spans, object_group_idx, "object")

    def get_kernel_group_shape_dtype(
        self, num_tokens: int, kernel_group_idx: int
    ) -> tuple[torch.Size, torch.dtype]:
        """``(kv_size, layers, slots, hidden)`` for ``num_tokens`` (whole chunks), and
        the group's dtype."""
        chunk = self.lmcache_tokens_per_chunk
        if num_tokens % chunk:
            raise ValueError(
                f"num_tokens ({num_tokens}) must be a multiple of "
                f"lmcache_tokens_per_chunk ({chunk})"
            )
        manager = self.kv_layer_groups_manager_
        group = manager.kernel_groups[kernel_group_idx]
        slots = manager.get_slots_per_chunk_in_sw(kernel_group_idx) * (
            num_tokens // chunk
        )
        return torch.Size(
            (group.shape_desc.kv_size, group.num_layers, slots, group.hidden_dim_size)
        ), group.dtype

    def cache_size_per_token(self) -> int:
        """Bytes one chunk stages, per token (every kernel group, windows included)."""
        return self._slot_bytes // self.lmcache_tokens_per_chunk
