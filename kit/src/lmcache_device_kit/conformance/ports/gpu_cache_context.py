# SPDX-License-Identifier: Apache-2.0
"""LMCache's CUDA cache-context tests, ported to this plugin's cache context.

Source: LMCache 0.5.6 tests/v1/platform/devices/cuda/test_gpu_cache_context.py, which
tests ``_TempGPUBuffer`` (the CUDA context's staging buffer) and ``GPUCacheContext``
(built from ``to_tensor`` doubles). Every case here builds the plugin's context from
wrapped device KV caches ([2, NB, BS, NH, HS] per layer), as LMCache's server does.

Departures (each also in README.md beside this module):
- ``_TempGPUBuffer`` cases run against the context (the plugin keeps its staging
  buffer inside it, as LMCache's NPU context does): its ``max_batch_size`` argument,
  its manager, its ``cache_size_per_token()`` for ``get_cache_size_per_token()``.
- Real wrappers (``ipc_wrapper_cls.wrap``) instead of ``_FakeIPCWrapper``, so the
  write-isolation group gets 32 blocks instead of 4 (a device exports 64 KiB and
  more); a context is closed after its test (it maps the caches).
- Cases that share a setup are one test, every assertion kept (which: README).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator, Sequence
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.kv_layer_groups import KVLayerGroupsManager
from lmcache.v1.multiprocess.group_view import EngineGroupInfo
from lmcache_device_kit.conformance.ports.common import PortTests, device_type

BF16, FP16 = torch.bfloat16, torch.float16
#: One homogeneous block of layers: (layers, heads, head size, block size, dtype).
Group = tuple[int, int, int, int, torch.dtype]
SINGLE_GROUP: list[Group] = [(4, 8, 64, 16, BF16)]
MULTI_GROUP: list[Group] = [(4, 8, 64, 16, BF16), (2, 16, 64, 16, FP16)]
#: Two layers of 2x16 bfloat16 heads: 32 blocks make each layer 64 KiB.
SMALL_GROUP: list[Group] = [(2, 2, 16, 16, BF16)]
COMPRESSED = [EngineGroupInfo(0, (0, 1), tokens_per_block=16)]


def expected_shape(manager: KVLayerGroupsManager, tokens: int, kg: int) -> torch.Size:
    group = manager.kernel_groups[kg]
    slots = tokens * group.slots_per_block // group.tokens_per_block
    kv_size = group.shape_desc.kv_size
    return torch.Size((kv_size, group.num_layers, slots, group.hidden_dim_size))


def expected_bytes(manager: KVLayerGroupsManager, chunk_size: int, kg: int) -> int:
    shape = expected_shape(manager, chunk_size, kg)
    return shape.numel() * manager.kernel_groups[kg].dtype.itemsize


def assert_disjoint(regions: list[tuple[torch.Tensor, str]]) -> None:
    """No two tensors' byte ranges overlap."""
    spans = [(t.data_ptr(), t.data_ptr() + t.nbytes, label) for t, label in regions]
    for i, (s_i, e_i, label_i) in enumerate(spans):
        for s_j, e_j, label_j in spans[i + 1 :]:
            assert e_i <= s_j or e_j <= s_i, f"Overlap between {label_i} and {label_j}"


TOP_LEVEL_KEYS = {"num_layers", "num_blocks", "cache_size_per_token", "kernel_groups"}
GROUP_KEYS = set(
    "kernel_group_idx engine_group_idx object_group_idx num_layers layer_indices "
    "tokens_per_block slots_per_block dtype engine_kv_concrete_shape is_mla "
    "engine_kv_format engine_kv_shape attention_backend".split()
)


class BaseGpuCacheContextTests(PortTests):
    """LMCache's cuda/test_gpu_cache_context.py against the plugin's cache context."""

    @pytest.fixture
    def make(self, lmcache_driven: Any) -> Iterator[Any]:
        """The original's ``_make_context``; each context is closed after the test."""
        made: list[Any] = []

        def build(
            groups: Sequence[Group], chunk_size=256, max_batch_size=4, num_blocks=4,
            engine_group_infos: Sequence[EngineGroupInfo] = (),
        ):  # fmt: skip
            layers = [
                torch.empty(
                    2, num_blocks, bs, nh, hs, dtype=dtype, device=device_type()
                )
                for n, nh, hs, bs, dtype in groups
                for _ in range(n)
            ]
            wrapped = [lmcache_driven.ipc_wrapper_cls.wrap(layer) for layer in layers]
            infos = tuple(engine_group_infos)
            context = lmcache_driven.create_cache_context(
                wrapped, chunk_size, None, infos, max_batch_size=max_batch_size
            )
            made.append(context)
            return context

        yield build
        for context in made:
            context.close()

    def test_max_batch_size_is_the_one_asked_for(self, make: Any) -> None:
        assert make(SINGLE_GROUP, max_batch_size=3).max_batch_size == 3

    def test_kernel_group_buffer_has_each_groups_shape_and_dtype(
        self, make: Any
    ) -> None:
        buf = make(MULTI_GROUP)
        manager = buf.kv_layer_groups_manager
        for kg in range(manager.num_kernel_groups):
            tensor = buf.get_temp_kernel_group_buffer(0, kg)
            assert tensor.shape == expected_shape(manager, 256, kg)
            assert tensor.dtype == manager.kernel_groups[kg].dtype

    def test_kernel_group_buffer_is_contiguous_and_the_same_on_each_call(
        self, make: Any
    ) -> None:
        buf = make(SINGLE_GROUP)
        assert buf.get_temp_kernel_group_buffer(0, 0).is_contiguous()
        first = buf.get_temp_kernel_group_buffer(1, 0)
        assert first.data_ptr() == buf.get_temp_kernel_group_buffer(1, 0).data_ptr()

    def test_kernel_group_buffer_refuses_indices_out_of_range(self, make: Any) -> None:
        buf = make(SINGLE_GROUP, max_batch_size=4)
        with pytest.raises(ValueError, match="Invalid batch_idx"):
            buf.get_temp_kernel_group_buffer(4, 0)
        with pytest.raises(ValueError, match="kernel_group_idx"):
            buf.get_temp_kernel_group_buffer(0, 99)

    def test_every_batch_and_group_buffer_is_disjoint(self, make: Any) -> None:
        buf = make(MULTI_GROUP, max_batch_size=4)
        manager = buf.kv_layer_groups_manager
        kernel = [
            (buf.get_temp_kernel_group_buffer(batch, kg), f"batch={batch},kg={kg}")
            for batch in range(4)
            for kg in range(manager.num_kernel_groups)
        ]
        assert_disjoint(kernel)
        objects = [
            (buf.get_temp_object_group_buffer(batch, og), f"batch={batch},og={og}")
            for batch in range(4)
            for og in range(manager.num_object_groups)
        ]
        assert_disjoint(objects)

    def test_writing_one_batch_slot_leaves_the_others(self, make: Any) -> None:
        buf = make(SMALL_GROUP, chunk_size=32, max_batch_size=4, num_blocks=32)
        for batch in range(4):
            buf.get_temp_kernel_group_buffer(batch, 0).fill_(float(batch + 1))
        for batch in range(4):
            tensor = buf.get_temp_kernel_group_buffer(batch, 0).to(torch.float32)
            assert tensor.min().item() == pytest.approx(batch + 1, rel=1e-3)
            assert tensor.max().item() == pytest.approx(batch + 1, rel=1e-3)

    def test_object_group_buffer_is_flat_uint8_over_every_kernel_group(
        self, make: Any
    ) -> None:
        buf = make(MULTI_GROUP)
        manager = buf.kv_layer_groups_manager
        tensor = buf.get_temp_object_group_buffer(0, 0)
        assert tensor.dtype == torch.uint8
        assert tensor.dim() == 1
        assert tensor.is_contiguous()
        members = manager.object_groups[0].kernel_group_indices
        assert tensor.numel() == sum(expected_bytes(manager, 256, kg) for kg in members)
        first = buf.get_temp_kernel_group_buffer(0, members[0])
        assert tensor.data_ptr() == first.data_ptr()

    def test_object_group_buffer_refuses_indices_out_of_range(self, make: Any) -> None:
        buf = make(SINGLE_GROUP, max_batch_size=4)
        with pytest.raises(ValueError, match="object_group_idx"):
            buf.get_temp_object_group_buffer(0, 99)
        with pytest.raises(ValueError, match="batch_idx"):
            buf.get_temp_object_group_buffer(4, 0)

    def test_object_group_buffer_shows_each_kernel_groups_bytes_in_order(
        self, make: Any
    ) -> None:
        buf = make(MULTI_GROUP, chunk_size=64)
        manager = buf.kv_layer_groups_manager
        members = manager.object_groups[0].kernel_group_indices
        for offset_kg, kg in enumerate(members):
            buf.get_temp_kernel_group_buffer(0, kg).view(torch.uint8).fill_(
                offset_kg + 1
            )
        flat = buf.get_temp_object_group_buffer(0, 0)
        cursor = 0
        for offset_kg, kg in enumerate(members):
            size = expected_bytes(manager, 64, kg)
            region = flat[cursor : cursor + size]
            assert region.min().item() == offset_kg + 1
            assert region.max().item() == offset_kg + 1
            cursor += size

    def test_shape_scales_with_whole_chunks(self, make: Any) -> None:
        buf = make(SINGLE_GROUP)
        manager = buf.kv_layer_groups_manager
        for num_tokens in (256, 512, 768):
            shape, dtype = buf.get_kernel_group_shape_dtype(num_tokens, 0)
            assert shape == expected_shape(manager, num_tokens, 0)
            assert dtype == manager.kernel_groups[0].dtype

    def test_compressed_group_has_fewer_slots_and_refuses_partial_chunks(
        self, make: Any
    ) -> None:
        buf = make([(2, 8, 64, 8, BF16)], engine_group_infos=COMPRESSED)
        kg = buf.kv_layer_groups_manager.kernel_groups[0]
        assert kg.tokens_per_block // kg.slots_per_block == 2
        shape, _ = buf.get_kernel_group_shape_dtype(256, 0)
        assert shape[2] == 256 // 2
        with pytest.raises(ValueError, match="must be a multiple of"):
            buf.get_kernel_group_shape_dtype(255, 0)

    def test_cache_size_per_token_sums_every_kernel_group(self, make: Any) -> None:
        buf = make(MULTI_GROUP)
        manager = buf.kv_layer_groups_manager
        total = sum(
            expected_bytes(manager, 256, kg) for kg in range(manager.num_kernel_groups)
        )
        assert buf.cache_size_per_token() == total // 256

    def test_compression_halves_the_cache_size_per_token(self, make: Any) -> None:
        uncompressed = make([(2, 8, 64, 16, BF16)])
        compressed = make([(2, 8, 64, 8, BF16)], engine_group_infos=COMPRESSED)
        assert (
            compressed.cache_size_per_token() * 2 == uncompressed.cache_size_per_token()
        )

    def test_context_serves_its_manager_buffers_and_shapes(self, make: Any) -> None:
        assert make(SINGLE_GROUP).max_batch_size == 4
        ctx = make(MULTI_GROUP)
        manager = ctx.kv_layer_groups_manager
        assert isinstance(manager, KVLayerGroupsManager)
        assert manager.num_kernel_groups == 2
        for kg in range(manager.num_kernel_groups):
            tensor = ctx.get_temp_kernel_group_buffer(0, kg)
            assert tensor.shape == expected_shape(manager, 256, kg)
            assert tensor.dtype == manager.kernel_groups[kg].dtype
            shape, dtype = ctx.get_kernel_group_shape_dtype(256, kg)
            assert shape == expected_shape(manager, 256, kg)
            assert dtype == manager.kernel_groups[kg].dtype
        flat = ctx.get_temp_object_group_buffer(0, 0)
        assert flat.dtype == torch.uint8
        assert flat.dim() == 1

    def test_kernel_group_pointers_are_one_long_per_layer(self, make: Any) -> None:
        ctx = make(MULTI_GROUP)
        manager = ctx.kv_layer_groups_manager
        for kg in range(manager.num_kernel_groups):
            pointers = ctx.get_kernel_group_kv_pointers(kg)
            assert pointers.dtype == torch.long
            assert pointers.numel() == manager.kernel_groups[kg].num_layers

    def test_calculate_num_blocks_matches_the_manager(self, make: Any) -> None:
        assert make([(2, 8, 64, 16, BF16)]).calculate_num_blocks(256, 0) == 16
        ctx = make(MULTI_GROUP)
        manager = ctx.kv_layer_groups_manager
        for kg in range(manager.num_kernel_groups):
            expected = manager.calculate_num_blocks(kg, 256)
            assert ctx.calculate_num_blocks(256, kg) == expected

    def test_report_status_describes_one_group(self, make: Any) -> None:
        ctx = make(SINGLE_GROUP)
        status = ctx.report_status()
        assert set(status.keys()) == TOP_LEVEL_KEYS
        assert status["num_layers"] == 4
        assert status["cache_size_per_token"] == ctx.cache_size_per_token()
        assert len(status["kernel_groups"]) == 1
        group = status["kernel_groups"][0]
        assert set(group.keys()) == GROUP_KEYS
        assert group["kernel_group_idx"] == 0
        assert group["num_layers"] == 4
        assert group["layer_indices"] == [0, 1, 2, 3]
        assert group["is_mla"] is False
        assert group["engine_kv_format"] == "NL_X_TWO_NB_BS_NH_HS"
        assert group["dtype"] == str(ctx.kv_tensors[0].dtype)

    def test_report_status_follows_the_managers_groups_in_order(
        self, make: Any
    ) -> None:
        ctx = make(MULTI_GROUP)
        manager = ctx.kv_layer_groups_manager
        status = ctx.report_status()
        assert status["num_layers"] == 6
        assert len(status["kernel_groups"]) == manager.num_kernel_groups
        for kg_idx, (group, kernel_group) in enumerate(
            zip(status["kernel_groups"], manager.kernel_groups, strict=False)
        ):
            assert set(group.keys()) == GROUP_KEYS
            assert group["kernel_group_idx"] == kg_idx
            assert group["engine_group_idx"] == kernel_group.engine_group_idx
            assert group["num_layers"] == kernel_group.num_layers
            assert group["slots_per_block"] == kernel_group.slots_per_block
            assert group["tokens_per_block"] == kernel_group.tokens_per_block
            assert 0 <= group["object_group_idx"] < manager.num_object_groups
