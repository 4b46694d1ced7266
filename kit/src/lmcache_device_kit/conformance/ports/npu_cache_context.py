# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU cache-context tests, ported to this plugin's cache context.

Sources: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_cache_context.py and,
for the close case ``two``, musa/test_musa_cache_context.py (its other three tests
are GDS staging-buffer registration, which the plugin does not do). The
originals build ``_TempNpuBuffer`` from a KVLayerGroupsManager on CPU and test
``NpuCacheContext`` through doubles (a fake stream, fake wrappers). The plugin keeps
its staging buffer inside its context, so every case here builds the real context
from wrapped device KV caches, as LMCache's server does.

Departures (each also in README.md beside this module):
- Shapes: NPU stages MLA as rank-3 ``[layers, slots, W]`` (its kernels' layout);
  the plugin stages as LMCache's CUDA context does (rank 4, ``kv_size`` first, what
  LMCache's default transfer copies through), so the expected shape is CUDA's.
- Blocks: 64 instead of 8 for the fused kind, so each layer is at least the 64 KiB
  the device exports (a device exports whole allocations).
- The ``mla_tuple`` and ``dsa_tuple`` cases are not ported: the originals build the
  groups manager from the planes directly; through a cache context (LMCache's
  ``NpuCacheContext`` too) LMCache 0.5.6's format detection refuses planes packed
  in one buffer (``attempt_permute_to_contiguous_view``: last two dims not tightly
  packed). Per-layer (K, V) tuples are covered by the plugin's own tests.
- test_host_callback_stream_launch_runs_the_callback_inline_after_a_sync runs
  against a runtime without host functions, as torch_npu is
  (``without_host_functions``).
- The fake stream's ``npu_stream`` and call counter become a real stream: its
  handle, and its queued work observed done.
- test_close_synchronizes_before_releasing_ipc_owners: the ``no_stream`` and
  ``empty`` cases are dropped (the plugin's context always has a stream and refuses
  to be built without KV caches); the order of calls is observed by logging the real
  stream's ``synchronize`` and the wrappers' ``close``.
- test_device_spec_creates_npu_cache_context: the real constructor runs instead of
  a replaced ``__init__``; the forwarded arguments are read back from the context.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.gpu_connector.utils import get_group_data_ptrs
from lmcache.v1.multiprocess.group_view import EngineGroupInfo
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    plugin_class,
)
import lmcache.lmcache_native as lmcache_native

NL, NB, BS, W, NH, HS = 4, 8, 16, 576, 2, 8
#: Blocks of the kinds whose layers would be under the 64 KiB the device exports.
BLOCKS = {"fused": 64}
CHUNK = 256
DT = torch.float32
F = lmcache_native.EngineKVFormat


def caches(kind: str) -> list[Any]:
    if kind == "mla":
        return [
            torch.zeros(NB, BS, W, dtype=DT, device=device_type()) for _ in range(NL)
        ]
    if kind == "fused":
        return [
            torch.zeros(BLOCKS[kind], BS, NH, 2 * HS, dtype=DT, device=device_type())
            for _ in range(NL)
        ]
    raise ValueError(kind)


def context(spec, kind: str, compress_ratio: int = 1, max_batch_size: int = 4):
    """The plugin's context over ``kind`` caches; the sources stay alive with it."""
    source = caches(kind)
    infos: tuple[EngineGroupInfo, ...] = ()
    if compress_ratio > 1:
        infos = (
            EngineGroupInfo(0, tuple(range(NL)), tokens_per_block=BS * compress_ratio),
        )
    made = spec.create_cache_context(
        [spec.ipc_wrapper_cls.wrap(layer) for layer in source],
        CHUNK,
        None,
        infos,
        max_batch_size=max_batch_size,
    )
    made.sources = source
    return made


def expected_kernel_group_shape(manager, num_tokens: int, index: int) -> torch.Size:
    group = manager.kernel_groups[index]
    num_slots = num_tokens * group.slots_per_block // group.tokens_per_block
    sd = group.shape_desc
    return torch.Size((sd.kv_size, group.num_layers, num_slots, group.hidden_dim_size))


class BaseNpuCacheContextTests(PortTests):
    """LMCache's npu/test_npu_cache_context.py (and musa's close case) against the
    plugin's cache context."""

    def test_host_callback_stream_ptr_is_the_streams_native_handle(
        self, lmcache_driven: Any
    ) -> None:
        made = context(lmcache_driven, "mla")
        assert made.cupy_stream.ptr == lmcache_driven.get_stream_handle(made.stream)
        made.close()

    @pytest.mark.usefixtures("without_host_functions")
    def test_host_callback_stream_launch_runs_the_callback_inline_after_a_sync(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        made = context(lmcache_driven, "mla")
        source = torch.ones(1 << 24, dtype=torch.uint8).pin_memory()
        target = torch.zeros(1 << 24, dtype=torch.uint8, device=device_type())
        with runtime.stream(made.stream):
            target.copy_(source, non_blocking=True)
        seen: list[Any] = []
        made.cupy_stream.launch_host_func(seen.append, 42)
        synchronized = made.stream.query()
        returned = list(seen)
        made.close()
        assert returned == [42]
        assert synchronized is True

    @pytest.mark.parametrize("kind", ["mla", "fused"])
    @pytest.mark.parametrize("compress_ratio", [1, 2], ids=["1x", "2x"])
    def test_temp_buffer_shape_and_dtype(
        self, lmcache_driven: Any, kind: str, compress_ratio: int
    ) -> None:
        buf = context(lmcache_driven, kind, compress_ratio=compress_ratio)
        manager = buf.kv_layer_groups_manager_
        kg = manager.kernel_groups[0]
        assert kg.tokens_per_block // kg.slots_per_block == compress_ratio
        for num_tokens in (CHUNK, 2 * CHUNK):
            shape, dtype = buf.get_kernel_group_shape_dtype(num_tokens, 0)
            assert shape == expected_kernel_group_shape(manager, num_tokens, 0)
            assert dtype == kg.dtype
        view = buf.get_temp_kernel_group_buffer(0, 0)
        chunk_shape, _ = buf.get_kernel_group_shape_dtype(CHUNK, 0)
        assert view.shape == chunk_shape
        flat = buf.get_temp_object_group_buffer(0, 0)
        assert flat.dtype == torch.uint8
        assert flat.nbytes == chunk_shape.numel() * kg.dtype.itemsize
        buf.close()

    @pytest.mark.parametrize("kind", ["mla", "fused"])
    def test_temp_buffer_object_group_view_is_contiguous_union(
        self, lmcache_driven: Any, kind: str
    ) -> None:
        buf = context(lmcache_driven, kind, max_batch_size=2)
        kg0 = buf.get_temp_kernel_group_buffer(1, 0)
        flat = buf.get_temp_object_group_buffer(1, 0)
        assert kg0.data_ptr() == flat.data_ptr()
        assert buf.max_batch_size == 2
        buf.close()

    @pytest.mark.parametrize("kind", ["mla", "fused"])
    def test_kernel_group_kv_pointers_returns_int64_pointer_table(
        self, lmcache_driven: Any, kind: str
    ) -> None:
        """CUDA-shaped int64 table: one ptr/layer, or interleaved planes for tuples."""
        made = context(lmcache_driven, kind)
        fmt = made.get_engine_kv_format(0)
        ptrs = get_group_data_ptrs(made.kv_caches_, fmt, list(range(NL)))

        entries = made.get_kernel_group_kv_pointers(0)
        assert isinstance(entries, torch.Tensor)
        assert entries.dtype == torch.int64
        assert entries.dim() == 1
        assert entries.cpu().tolist() == ptrs
        made.close()

    @pytest.mark.parametrize("n_wrappers", [1, 2], ids=["one", "two"])
    def test_close_synchronizes_before_releasing_ipc_owners(
        self, lmcache_driven: Any, monkeypatch: pytest.MonkeyPatch, n_wrappers: int
    ) -> None:
        """Context close waits for transfers, releases owners, and is idempotent."""
        calls: list[str] = []
        source = caches("mla")[:n_wrappers]
        wrappers = [lmcache_driven.ipc_wrapper_cls.wrap(layer) for layer in source]
        names = ["first", "second"][:n_wrappers]
        made = lmcache_driven.create_cache_context(wrappers, CHUNK)
        cls = type(wrappers[0])
        real_close = cls.close

        def logged_close(self) -> None:
            calls.append(names[[id(w) for w in wrappers].index(id(self))])
            real_close(self)

        class Stream(type(made.stream)):  # type: ignore[misc]
            def synchronize(self) -> None:
                calls.append("synchronize")
                super().synchronize()

        monkeypatch.setattr(cls, "close", logged_close)
        made.stream.__class__ = Stream
        made.close()
        made.close()
        assert calls == ["synchronize", *names]
        assert made.kv_caches_ == []

    def test_device_spec_creates_the_plugins_cache_context(
        self, lmcache_driven: Any
    ) -> None:
        source = caches("mla")[:1]
        made = lmcache_driven.create_cache_context(
            [lmcache_driven.ipc_wrapper_cls.wrap(source[0])], 128
        )
        assert isinstance(made, plugin_class("cache_context", "CacheContext"))
        assert isinstance(made.kv_caches_, list) and len(made.kv_caches_) == 1
        assert made.lmcache_tokens_per_chunk == 128
        made.close()

    def test_temp_buffer_allocates_on_device(self, lmcache_driven: Any) -> None:
        buffer = context(lmcache_driven, "mla")
        view = buffer.get_temp_kernel_group_buffer(0, 0)
        assert view.device.type == device_type()
        view.fill_(1.0)
        flat = buffer.get_temp_object_group_buffer(0, 0)
        assert flat.view(torch.float32).sum().item() == float(view.numel())
        buffer.close()
