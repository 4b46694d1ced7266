# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The cache context as LMCache's server uses it: built by LMCache's factory, its
stream, closed.

A context comes from ``create_cache_context()``, as in the server; it must run host
callbacks after its stream's work, drain its stream before it unmaps the workers'
caches, and unmap what it had mapped when it fails part way. Its staging buffer is
checked in ``test_cache_context_staging.py``.
"""

# Future
from __future__ import annotations

# Standard
import threading

# Third Party
from _support import publish_behind_a_hold, seeded_kv
from conftest import on_emulator, open_mappings
import pytest
import torch

# First Party
from lmcache.v1.platform import resolve_device_ops
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache.v1.platform.kv_wrap import wrap_kv_caches

PACKAGE = "{{ cookiecutter.__package }}"
DEVICE = "{{ cookiecutter.device_name }}"
#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)
CHUNK = 32


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=DEVICE)


def test_cache_context_is_built_by_lmcaches_factory_and_complete(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """create_cache_context() dispatches to the plugin and returns a context with no
    abstract member left."""
    source = kv_caches()  # the exporter keeps its memory alive while the server maps it
    context = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
    assert type(context).__module__.startswith(PACKAGE + ".")
    assert not getattr(type(context), "__abstractmethods__", set())
    assert context.device.type == DEVICE and context.num_layers == 3
    assert context.get_kernel_group_kv_pointers(0).device.type == DEVICE
    assert callable(context.cupy_stream.launch_host_func) and isinstance(
        context.cupy_stream.ptr, int
    )
    context.close()


def test_closing_a_cache_context_drains_its_stream_then_unmaps_and_twice_closes_once(  # type: ignore[no-untyped-def]
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


def test_host_callbacks_run_on_the_callers_thread_once_the_contexts_stream_has_run(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """cupy_stream.launch_host_func (LMCache releases events and read locks with it)
    runs no Python on the stream: it waits for the context's stream, then calls back
    on the caller's thread, as LMCache's NPU and MUSA contexts do."""
    context = create_cache_context(
        wrap_kv_caches(kv_caches()), CHUNK, {"kv_layout": "NHD"}
    )
    calls: list[tuple[str, int]] = []

    def callback(arg: str) -> None:
        calls.append((arg, threading.get_ident()))

    def drain() -> list[tuple[str, int]]:
        drained = list(calls)
        calls.clear()
        return drained

    seen = publish_behind_a_hold(
        context.stream,
        lambda: context.cupy_stream.launch_host_func(callback, "done"),
        drain,
    )
    context.close()
    assert not seen.too_soon, "the callback ran before the work queued ahead of it"
    assert (seen.early, seen.late) == ([("done", threading.get_ident())], []), (
        "the callback ran on another thread (the stream's?)"
    )


def test_a_completion_on_cupy_stream_ptr_waits_for_the_contexts_stream_not_the_current(
    lmcache_driven,
) -> None:  # type: ignore[no-untyped-def]
    """The server queues its copies on the context's stream, which is not the current
    one, then records "finish_write" on ``cupy_stream.ptr``: a pointer naming any other
    stream publishes the store before its copies have run."""
    context = create_cache_context(
        wrap_kv_caches(kv_caches()), CHUNK, {"kv_layout": "NHD"}
    )
    ops = resolve_device_ops(DEVICE)
    seen = publish_behind_a_hold(
        context.stream,
        lambda: ops.record_completion_on_stream(
            context.cupy_stream.ptr, "finish_write", b"1"
        ),
        ops.drain_recorded_completions,
    )
    context.close()
    assert not seen.too_soon, "published before the context's stream had run its work"
    assert seen.early + seen.late == [("finish_write", b"1")]


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
    # The spec's hook: lmcache 0.5.4's dispatcher maps first.
    with pytest.raises(RuntimeError, match="could not map"):
        lmcache_driven.create_cache_context(wrappers, CHUNK, {"kv_layout": "NHD"})
    assert open_mappings() == before
