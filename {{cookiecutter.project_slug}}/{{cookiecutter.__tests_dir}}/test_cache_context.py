# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The cache context as LMCache's server uses it: built by LMCache's factory, staged, closed.

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
from _support import RETURNS_AT_ONCE, gather_to_cpu, held, seeded_kv
from conftest import on_emulator, open_mappings
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


def test_cache_context_is_built_by_lmcaches_factory_and_complete(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """create_cache_context() dispatches to the plugin and returns a context with no
    abstract member left."""
    source = kv_caches()  # the exporter keeps its memory alive while the server maps it
    context = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
    assert type(context).__module__.startswith("{{ cookiecutter.__package }}.")
    assert not getattr(type(context), "__abstractmethods__", set())
    assert context.device.type == DEVICE and context.num_layers == 3
    assert context.get_kernel_group_kv_pointers(0).device.type == DEVICE
    assert callable(context.cupy_stream.launch_host_func) and isinstance(
        context.cupy_stream.ptr, int
    )
    context.close()


def test_closing_a_cache_context_drains_its_stream_before_unmapping_and_twice_closes_once(  # type: ignore[no-untyped-def]
    lmcache_driven, runtime, monkeypatch
) -> None:
    """close() synchronizes its stream, then closes every wrapper once and drops the KV
    tensors; again, nothing."""
    log: list[str] = []

    class LoggedStream(runtime.Stream):  # type: ignore[misc, name-defined]
        def synchronize(self) -> None:
            log.append("synchronize")
            super().synchronize()

    wrapper_cls = lmcache_driven.ipc_wrapper_cls
    close = wrapper_cls.close
    monkeypatch.setattr(runtime, "Stream", LoggedStream)
    monkeypatch.setattr(
        wrapper_cls, "close", lambda self: (log.append("close"), close(self))[1]
    )
    source = kv_caches()
    context = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
    log.clear()
    context.close()
    assert log == ["synchronize"] + ["close"] * len(source)
    assert list(context.kv_tensors) == []
    context.close()
    assert log.count("close") == len(source)


def test_host_callbacks_of_a_cache_context_run_after_its_streams_work_and_return_at_once(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """cupy_stream.launch_host_func (LMCache releases events and read locks with it)
    waits for nothing itself."""
    context = create_cache_context(
        wrap_kv_caches(kv_caches()), CHUNK, {"kv_layout": "NHD"}
    )
    calls: list[str] = []
    with held(context.stream) as hold:
        context.cupy_stream.launch_host_func(calls.append, "done")
        took = hold.settle()
        early = list(calls)
    context.cupy_stream.synchronize()
    context.close()
    assert took < RETURNS_AT_ONCE, (
        f"launch_host_func blocked its caller for {took:.1f}s"
    )
    assert (early, calls) == ([], ["done"]), (
        "the callback ran before the work queued ahead of it"
    )


def test_a_cache_context_that_fails_part_way_unmaps_what_it_had_mapped(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """The last layer failing to map after the others were mapped leaves no mapping
    behind (the wrappers stay alive)."""
    if not on_emulator():
        pytest.skip("mapping counts are observable on the CPU emulator only")

    def unmappable() -> torch.Tensor:
        raise RuntimeError("the runtime could not map this allocation")

    source = kv_caches()
    wrappers = list(wrap_kv_caches(source))
    wrappers[-1].to_tensor = unmappable
    before = open_mappings()
    with pytest.raises(
        RuntimeError, match="could not map"
    ):  # the spec's hook: lmcache 0.5.4's dispatcher maps first
        lmcache_driven.create_cache_context(wrappers, CHUNK, {"kv_layout": "NHD"})
    assert open_mappings() == before


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
    from {{ cookiecutter.__package }}._lmcache_compat import TransferDirection

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


def byte_range(t: torch.Tensor) -> range:
    """The device addresses a contiguous tensor occupies."""
    return range(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())


def overlap(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


@pytest.mark.parametrize(
    "separate", [False, True], ids=["one-object-group", "separate-object-groups"]
)
def test_hybrid_staging_gives_every_slot_its_own_bytes_and_each_object_group_exactly_its_kernel_groups(  # type: ignore[no-untyped-def]
    lmcache_driven, separate: bool
) -> None:
    """Slots of every (batch entry, kernel group) are disjoint; an object group's buffer
    is its kernel groups' slots."""
    source = kv_caches(seed=8)
    context = create_cache_context(
        wrap_kv_caches(source),
        CHUNK,
        {"kv_layout": "NHD"},
        engine_group_infos=HYBRID,
        separate_object_groups=separate,
    )
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
                f"object group {index}, batch entry {batch}: not its kernel groups {group.kernel_group_indices}"
            )
    context.close()


def test_a_sliding_window_group_stages_only_its_window_and_sizes_add_up(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """A window shorter than a chunk stages get_slots_per_chunk_in_sw() slots;
    cache_size_per_token sums every group."""
    source = kv_caches(seed=9)
    context = create_cache_context(
        wrap_kv_caches(source),
        CHUNK,
        {"kv_layout": "NHD"},
        engine_group_infos=HYBRID,
        separate_object_groups=True,
    )
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
