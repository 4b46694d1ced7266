# SPDX-License-Identifier: Apache-2.0
"""The cache context as LMCache's server uses it: built by LMCache's factory, its
stream, closed.

A context comes from ``create_cache_context()``, as in the server; it must run host
callbacks after its stream's work, drain its stream before it unmaps the workers'
caches, and unmap what it had mapped when it fails part way. Its staging buffer is
checked in ``cache_context_staging.py``.

Imports torch (through ``support``); lmcache only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import threading

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.streams import publish_behind_a_hold
from lmcache_device_kit.conformance.support import open_mappings, seeded_kv

#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)
CHUNK = 32


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=kit_backend.current().device_type)


def context_of(kv: dict[str, torch.Tensor]) -> Any:
    """A cache context over ``kv``, built by LMCache's factory as the server builds
    one (the exporter keeps its memory alive while the server maps it)."""
    # First Party
    from lmcache.v1.platform.cache_context import create_cache_context
    from lmcache.v1.platform.kv_wrap import wrap_kv_caches

    return create_cache_context(wrap_kv_caches(kv), CHUNK, {"kv_layout": "NHD"})


class BaseCacheContextTests(ConformanceTests):
    """The factory, the context's stream, close, and a context that fails part way."""

    requires = frozenset({"lmcache_driven"})

    def test_cache_context_is_built_by_lmcaches_factory_and_complete(
        self, lmcache_driven: Any
    ) -> None:
        """create_cache_context() dispatches to the plugin and returns a context with
        no abstract member left."""
        backend = kit_backend.current()
        source = kv_caches()
        context = context_of(source)
        # the plugin's own, or that of the built-in it extends
        own = type(context).__module__.startswith(backend.package + ".")
        assert backend.extends or own
        assert not getattr(type(context), "__abstractmethods__", set())
        assert context.device.type == backend.device_type and context.num_layers == 3
        pointers = context.get_kernel_group_kv_pointers(0)
        assert pointers.device.type == backend.device_type
        assert callable(context.cupy_stream.launch_host_func) and isinstance(
            context.cupy_stream.ptr, int
        )
        context.close()

    def test_closing_a_cache_context_drains_its_stream_then_unmaps_and_twice_closes_once(  # noqa: E501
        self, lmcache_driven: Any, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """close() synchronizes its stream, then closes every wrapper once and drops
        the KV tensors; again, nothing."""
        log: list[str] = []

        class LoggedStream(runtime.Stream):  # type: ignore[misc, name-defined]
            def synchronize(self) -> None:
                log.append("synchronize")
                super().synchronize()

        wrapper_cls = lmcache_driven.ipc_wrapper_cls
        close = wrapper_cls.close
        monkeypatch.setattr(runtime, "Stream", LoggedStream)

        def logged_close(wrapper: Any) -> None:
            log.append("close")
            close(wrapper)

        monkeypatch.setattr(wrapper_cls, "close", logged_close)
        source = kv_caches()
        context = context_of(source)
        log.clear()
        context.close()
        assert log == ["synchronize"] + ["close"] * len(source)
        assert list(context.kv_tensors) == []
        context.close()
        assert log.count("close") == len(source)

    @pytest.mark.publishes
    def test_host_callbacks_run_on_the_callers_thread_once_the_contexts_stream_has_run(  # noqa: E501
        self, lmcache_driven: Any
    ) -> None:
        """cupy_stream.launch_host_func (LMCache releases events and read locks with
        it) runs no Python on the stream: it waits for the context's stream, then
        calls back on the caller's thread, as LMCache's NPU and MUSA contexts do."""
        context = context_of(kv_caches())
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

    @pytest.mark.publishes
    def test_a_completion_on_cupy_stream_ptr_waits_for_the_contexts_stream_not_the_current(  # noqa: E501
        self, lmcache_driven: Any
    ) -> None:
        """The server queues its copies on the context's stream, which is not the
        current one, then records "finish_write" on ``cupy_stream.ptr``: a pointer
        naming any other stream publishes the store before its copies have run."""
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        context = context_of(kv_caches())
        ops = resolve_device_ops(kit_backend.current().device_type)
        seen = publish_behind_a_hold(
            context.stream,
            lambda: ops.record_completion_on_stream(
                context.cupy_stream.ptr, "finish_write", b"1"
            ),
            ops.drain_recorded_completions,
        )
        context.close()
        assert not seen.too_soon, (
            "published before the context's stream had run its work"
        )
        assert seen.early + seen.late == [("finish_write", b"1")]

    def test_a_cache_context_that_fails_part_way_unmaps_what_it_had_mapped(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """The last layer failing to map after the others were mapped leaves no
        mapping behind (the wrappers stay alive; mapping counts are observable on the
        CPU emulator only)."""
        # First Party
        from lmcache.v1.platform.kv_wrap import wrap_kv_caches

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
