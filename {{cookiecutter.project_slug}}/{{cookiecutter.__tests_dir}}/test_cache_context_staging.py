# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The cache context's staging buffer, as LMCache's server fills it.

Layouts come from LMCache's own group manager (kernel groups, object groups,
sliding windows), so the staging buffer is checked against what the server
will ask of it: one disjoint slot per (batch entry, kernel group), each object
group's kernel groups back to back, a sliding-window group sized for its window.
"""

# Future
from __future__ import annotations

# Standard
import itertools

# Third Party
from _support import gather_to_cpu, seeded_kv
import pytest
import torch

# First Party
from lmcache.v1.multiprocess.group_view import EngineGroupInfo
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache.v1.platform.kv_wrap import wrap_kv_caches
import lmcache

DEVICE = "{{ cookiecutter.device_name }}"
#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)
CHUNK = 32
#: A hybrid model: two full-attention engine groups around a sliding-window one, so with
#: separate_object_groups the full-attention object group is kernel groups 0 and 2, not
#: a range.
HYBRID = [
    EngineGroupInfo(0, (0,)),
    EngineGroupInfo(1, (1,), sw_size_tokens=16),
    EngineGroupInfo(2, (2,)),
]


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=DEVICE)


#: Per-layer shapes of the two layout families LMCache detects here: flash attention and
#: MLA.
LAYER_SHAPES = {"flash-nhd": SHAPE, "mla": (32, 16, 64)}


@pytest.mark.parametrize("layout", sorted(LAYER_SHAPES))
def test_pointer_mode_transfer_into_the_staging_buffer_reproduces_the_paged_data(  # type: ignore[no-untyped-def]
    lmcache_driven, layout: str
) -> None:
    """The server's call shape (device pointers everywhere) gathers the same bytes as
    LMCache's CPU gather."""
    # First Party
    from {{ cookiecutter.__package }}._lmcache_compat import (
        TransferDirection,
    )

    source = seeded_kv(LAYER_SHAPES[layout], 5, device=DEVICE)
    block_size = 16  # both shapes: (..., blocks, block_size, ...)
    expected = gather_to_cpu(
        {k: v.cpu() for k, v in source.items()},
        [9, 4],
        CHUNK // block_size,
        layout_hints={"kv_layout": "NHD"},
    )[0]
    context = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
    staging = context.get_temp_kernel_group_buffer(0, 0)
    staging.zero_()
    lmcache.device_ops.multi_layer_block_kv_transfer(
        context.get_kernel_group_kv_pointers(0),
        [staging.data_ptr()],
        torch.tensor([9, 4], dtype=torch.long, device=context.device),
        context.device,
        TransferDirection.D2H,
        context.get_shape_desc(0),
        CHUNK,
        context.get_engine_kv_format(0),
        0,
    )
    torch.{{ cookiecutter.__torch_module_name }}.synchronize()  # type: ignore[attr-defined]
    assert torch.equal(
        staging.cpu().reshape(-1).view(torch.uint8),
        expected.reshape(-1).view(torch.uint8),
    )
    context.close()


def hybrid_context(seed: int, separate: bool):  # type: ignore[no-untyped-def]
    """A cache context over the hybrid model's caches (full attention and windows)."""
    return create_cache_context(
        wrap_kv_caches(kv_caches(seed)),
        CHUNK,
        {"kv_layout": "NHD"},
        engine_group_infos=HYBRID,
        separate_object_groups=separate,
    )


def byte_range(t: torch.Tensor) -> range:
    """The device addresses a contiguous tensor occupies."""
    return range(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())


def overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


@pytest.mark.parametrize(
    "separate", [False, True], ids=["one-object-group", "separate-object-groups"]
)
def test_hybrid_staging_slots_are_disjoint_and_object_groups_hold_their_kernel_groups(  # type: ignore[no-untyped-def]
    lmcache_driven, separate: bool
) -> None:
    """Slots of every (batch entry, kernel group) are disjoint; an object group's buffer
    is its kernel groups' slots."""
    context = hybrid_context(seed=8, separate=separate)
    manager = context.kv_layer_groups_manager
    assert manager.num_kernel_groups == 3
    if separate:
        assert [g.kernel_group_indices for g in manager.object_groups] == [[0, 2], [1]]
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
                held.start <= byte_range(m).start and byte_range(m).stop <= held.stop
                for m in members
            ), (
                f"object group {index}, batch entry {batch}: "
                f"not its kernel groups {group.kernel_group_indices}"
            )
    context.close()


def test_a_sliding_window_group_stages_only_its_window_and_sizes_add_up(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
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
    assert manager.get_slots_per_chunk_in_sw(1) < manager.get_slots_per_chunk_in_sw(
        0
    ), "the window is the smaller"
    per_chunk = sum(
        context.get_temp_kernel_group_buffer(0, g).numel()
        * context.get_temp_kernel_group_buffer(0, g).element_size()
        for g in range(manager.num_kernel_groups)
    )
    assert context.cache_size_per_token() * CHUNK == per_chunk
    with pytest.raises(ValueError):
        context.get_temp_kernel_group_buffer(context.max_batch_size, 0)
    context.close()


def test_layers_of_mixed_dtypes_stage_in_their_own_dtype(lmcache_driven) -> None:  # type: ignore[no-untyped-def]
    """A bfloat16 group beside a float16 one: each kernel group's slot has its group's
    dtype and shape."""
    source = {**seeded_kv(SHAPE, 10, layers=2, device=DEVICE)}
    source["layer.2"] = seeded_kv(
        SHAPE, 11, dtype=torch.bfloat16, layers=1, device=DEVICE
    )["layer.0"]
    infos = [EngineGroupInfo(0, (0, 1)), EngineGroupInfo(1, (2,))]
    context = create_cache_context(
        wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"}, engine_group_infos=infos
    )
    dtypes = [context.get_temp_kernel_group_buffer(0, g).dtype for g in range(2)]
    assert dtypes == [torch.float16, torch.bfloat16]
    context.close()


def test_the_max_batch_size_is_configurable_and_bounds_the_staging_slots(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """A context built for two chunks at once stages two and refuses a third; a batch
    size of 0 is refused."""
    source = kv_caches(seed=13)
    built = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
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
