# SPDX-License-Identifier: Apache-2.0
"""The cache context's staging buffer, as LMCache's server fills it.

Layouts come from LMCache's own group manager (kernel groups, object groups,
sliding windows), so the staging buffer is checked against what the server
will ask of it: one disjoint slot per (batch entry, kernel group), each object
group's kernel groups back to back, a sliding-window group sized for its window.

Imports torch (through ``support``); lmcache only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import importlib
import itertools

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import gather_to_cpu, seeded_kv

#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)
CHUNK = 32
#: Per-layer shapes of the two layout families LMCache detects here: flash attention and
#: MLA.
LAYER_SHAPES = {"flash-nhd": SHAPE, "mla": (32, 16, 64)}


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=kit_backend.current().device_type)


def hybrid_groups() -> list[Any]:
    """A hybrid model: two full-attention engine groups around a sliding-window one,
    so with separate_object_groups the full-attention object group is kernel groups 0
    and 2, not a range."""
    # First Party
    from lmcache.v1.multiprocess.group_view import EngineGroupInfo

    return [
        EngineGroupInfo(0, (0,)),
        EngineGroupInfo(1, (1,), sw_size_tokens=16),
        EngineGroupInfo(2, (2,)),
    ]


def context_of(kv: dict[str, Any], **options: Any) -> Any:
    """A cache context over ``kv``, built by LMCache's factory as the server builds
    one."""
    # First Party
    from lmcache.v1.platform.cache_context import create_cache_context
    from lmcache.v1.platform.kv_wrap import wrap_kv_caches

    return create_cache_context(
        wrap_kv_caches(kv), CHUNK, {"kv_layout": "NHD"}, **options
    )


def hybrid_context(seed: int, separate: bool) -> Any:
    """A cache context over the hybrid model's caches (full attention and windows)."""
    return context_of(
        kv_caches(seed),
        engine_group_infos=hybrid_groups(),
        separate_object_groups=separate,
    )


def byte_range(t: torch.Tensor) -> range:
    """The device addresses a contiguous tensor occupies."""
    return range(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())


def overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


class BaseCacheContextStagingTests(ConformanceTests):
    """Staging slots: the server's transfers into them, their layout, dtypes, sizes."""

    requires = frozenset({"lmcache_driven"})

    @pytest.mark.parametrize("layout", sorted(LAYER_SHAPES))
    def test_pointer_mode_transfer_into_the_staging_buffer_reproduces_the_paged_data(
        self, lmcache_driven: Any, layout: str
    ) -> None:
        """The server's call shape (device pointers everywhere) gathers the same bytes
        as LMCache's CPU gather."""
        # First Party
        import lmcache

        backend = kit_backend.current()
        compat = importlib.import_module(f"{backend.package}._lmcache_compat")
        source = seeded_kv(LAYER_SHAPES[layout], 5, device=backend.device_type)
        block_size = 16  # both shapes: (..., blocks, block_size, ...)
        expected = gather_to_cpu(
            {k: v.cpu() for k, v in source.items()},
            [9, 4],
            CHUNK // block_size,
            layout_hints={"kv_layout": "NHD"},
        )[0]
        context = context_of(source)
        staging = context.get_temp_kernel_group_buffer(0, 0)
        staging.zero_()
        lmcache.device_ops.multi_layer_block_kv_transfer(
            context.get_kernel_group_kv_pointers(0),
            [staging.data_ptr()],
            torch.tensor([9, 4], dtype=torch.long, device=context.device),
            context.device,
            compat.TransferDirection.D2H,
            context.get_shape_desc(0),
            CHUNK,
            context.get_engine_kv_format(0),
            0,
        )
        getattr(torch, backend.torch_module_name).synchronize()
        assert torch.equal(
            staging.cpu().reshape(-1).view(torch.uint8),
            expected.reshape(-1).view(torch.uint8),
        )
        context.close()

    @pytest.mark.parametrize(
        "separate", [False, True], ids=["one-object-group", "separate-object-groups"]
    )
    def test_hybrid_staging_slots_are_disjoint_and_object_groups_hold_their_kernel_groups(  # noqa: E501
        self, lmcache_driven: Any, separate: bool
    ) -> None:
        """Slots of every (batch entry, kernel group) are disjoint; an object group's
        buffer is its kernel groups' slots."""
        context = hybrid_context(seed=8, separate=separate)
        manager = context.kv_layer_groups_manager
        assert manager.num_kernel_groups == 3
        if separate:
            groups = [g.kernel_group_indices for g in manager.object_groups]
            assert groups == [[0, 2], [1]]
        slots = {
            (batch, group): context.get_temp_kernel_group_buffer(batch, group)
            for batch in range(context.max_batch_size)
            for group in range(manager.num_kernel_groups)
        }
        for (key_a, a), (key_b, b) in itertools.combinations(slots.items(), 2):
            assert not overlap(byte_range(a), byte_range(b)), (
                f"staging slots {key_a} and {key_b} overlap"
            )
        for batch in range(context.max_batch_size):
            for index, group in enumerate(manager.object_groups):
                buffer = context.get_temp_object_group_buffer(batch, index)
                members = [slots[batch, k] for k in group.kernel_group_indices]
                assert buffer.numel() * buffer.element_size() == sum(
                    m.numel() * m.element_size() for m in members
                )
                held = byte_range(buffer)
                assert all(
                    held.start <= byte_range(m).start
                    and byte_range(m).stop <= held.stop
                    for m in members
                ), (
                    f"object group {index}, batch entry {batch}: "
                    f"not its kernel groups {group.kernel_group_indices}"
                )
        context.close()

    def test_a_sliding_window_group_stages_only_its_window_and_sizes_add_up(
        self, lmcache_driven: Any
    ) -> None:
        """A window shorter than a chunk stages get_slots_per_chunk_in_sw() slots;
        cache_size_per_token sums every group."""
        context = hybrid_context(seed=9, separate=True)
        manager = context.kv_layer_groups_manager
        for group in range(manager.num_kernel_groups):
            slot = context.get_temp_kernel_group_buffer(0, group)
            assert slot.shape[2] == manager.get_slots_per_chunk_in_sw(group)
            shape, dtype = context.get_kernel_group_shape_dtype(2 * CHUNK, group)
            assert (
                shape[2] == 2 * manager.get_slots_per_chunk_in_sw(group)
                and dtype == slot.dtype
            )
        window, full = (manager.get_slots_per_chunk_in_sw(g) for g in (1, 0))
        assert window < full, "the window is the smaller"
        per_chunk = sum(
            context.get_temp_kernel_group_buffer(0, g).numel()
            * context.get_temp_kernel_group_buffer(0, g).element_size()
            for g in range(manager.num_kernel_groups)
        )
        assert context.cache_size_per_token() * CHUNK == per_chunk
        with pytest.raises(ValueError):
            context.get_temp_kernel_group_buffer(context.max_batch_size, 0)
        context.close()

    def test_layers_of_mixed_dtypes_stage_in_their_own_dtype(
        self, lmcache_driven: Any
    ) -> None:
        """A bfloat16 group beside a float16 one: each kernel group's slot has its
        group's dtype and shape."""
        # First Party
        from lmcache.v1.multiprocess.group_view import EngineGroupInfo

        device = kit_backend.current().device_type
        source = {**seeded_kv(SHAPE, 10, layers=2, device=device)}
        source["layer.2"] = seeded_kv(
            SHAPE, 11, dtype=torch.bfloat16, layers=1, device=device
        )["layer.0"]
        infos = [EngineGroupInfo(0, (0, 1)), EngineGroupInfo(1, (2,))]
        context = context_of(source, engine_group_infos=infos)
        dtypes = [context.get_temp_kernel_group_buffer(0, g).dtype for g in range(2)]
        assert dtypes == [torch.float16, torch.bfloat16]
        context.close()

    def test_the_max_batch_size_is_configurable_and_bounds_the_staging_slots(
        self, lmcache_driven: Any
    ) -> None:
        """A context built for two chunks at once stages two and refuses a third; a
        batch size of 0 is refused."""
        # First Party
        from lmcache.v1.platform.kv_wrap import wrap_kv_caches

        source = kv_caches(seed=13)
        built = context_of(source)
        built.close()
        context_cls = type(built)
        context = context_cls(
            wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"}, max_batch_size=2
        )
        assert context.max_batch_size == 2
        last = context.get_temp_kernel_group_buffer(1, 0)
        assert (
            byte_range(last).stop
            <= byte_range(context.get_temp_object_group_buffer(1, 0)).stop
        )
        with pytest.raises(ValueError, match="batch_idx 2"):
            context.get_temp_kernel_group_buffer(2, 0)
        context.close()
        with pytest.raises(ValueError, match="max_batch_size"):
            context_cls(
                wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"}, max_batch_size=0
            )
