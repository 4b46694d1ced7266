# SPDX-License-Identifier: Apache-2.0
"""Stream order and device memory: what a device runtime guarantees, and what the
plugin must respect.

On a device, work queued on a stream runs later, and host code cannot touch
device memory. Code that publishes, reads or frees before queued work has run,
or dereferences a device pointer, passes on a kind emulator and fails on
hardware; the CPU emulator is strict for that reason. The first tests pin down
the runtime's rules the plugin relies on (a held stream makes them
deterministic; ``streams.held`` skips a test on a runtime without that test
facility); the last ones check that the plugin's recorders publish after the
queued work, and never run Python on a stream (how a runtime runs a host function,
under each model: ``host_function_models.py``).

Why not ``streams.py``: that name holds the helpers these tests share with others.

Imports torch; lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.streams import (
    held,
    publish_behind_a_hold,
    publishes_from_host_functions,
)
from lmcache_device_kit.conformance.support import run_python


class BaseStreamOrderTests(ConformanceTests):
    """The runtime's ordering rules, then the plugin's recorders on a held stream."""

    def test_host_code_that_dereferences_a_device_address_crashes_naming_the_memory(
        self, emulator: Any
    ) -> None:
        """A device pointer is not a host address: reading it from host code crashes,
        as on hardware (the emulator names the memory first; the test crashes a
        process on purpose, so it runs on the emulator only), while copies and ops on
        the same tensor work."""
        device = kit_backend.current().device_type
        done = run_python(
            f"""
import ctypes, lmcache, torch
memory = torch.arange(1024, dtype=torch.int32, device="{device}")
print("sum", int(memory.sum()), flush=True)
ctypes.string_at(memory.data_ptr(), 4)
print("read it", flush=True)
"""
        )
        assert done.stdout.split()[-2:] == ["sum", str(sum(range(1024)))], done.stderr[
            -3000:
        ]
        assert done.returncode < 0, "host code read device memory and went on"
        assert "was read or written by host code" in done.stderr, done.stderr[-3000:]

    def test_an_in_place_op_run_on_the_host_copies_only_what_it_changes(
        self, emulator: Any
    ) -> None:
        """Ops without a device kernel run on the host (the CPU fallback). An in-place
        one, such as the ``index_copy_`` of LMCache's torch baseline scatter, must not
        copy its whole destination onto itself: the baseline's time would grow with
        the KV cache instead of with the blocks it moves, which no device does."""
        # Third Party
        from torch.profiler import ProfilerActivity, profile

        device = kit_backend.current().device_type
        layer = torch.zeros((64, 4, 8), device=device)
        rows = torch.ones((2, 4, 8), device=device)
        index = torch.tensor([3, 7], device=device)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
            layer.index_copy_(0, index, rows)
        copies = [e.input_shapes for e in trace.events() if e.name == "aten::copy_"]
        assert [64, 4, 8] not in [shapes[0] for shapes in copies if shapes], copies
        written = layer.cpu()
        assert written[3].eq(1).all() and written[7].eq(1).all()
        assert written.sum() == 2 * 4 * 8, "only the indexed rows changed"

    def test_a_non_blocking_copy_to_pinned_memory_is_seen_only_after_a_synchronization(  # noqa: E501
        self, runtime: Any
    ) -> None:
        """D2H with non_blocking=True into pinned memory returns at once; the host sees
        the bytes after synchronize()."""
        source = torch.arange(4096, dtype=torch.int32).to(
            kit_backend.current().device_type
        )
        host = torch.zeros(4096, dtype=torch.int32, pin_memory=True)
        with held(runtime.current_stream()):
            host.copy_(source, non_blocking=True)
            seen_before = int(host.count_nonzero())
        runtime.synchronize()
        assert seen_before == 0, "the copy ran before the work queued ahead of it"
        assert torch.equal(host, source.cpu())

    def test_an_event_completes_only_after_the_work_queued_before_its_record(
        self, runtime: Any
    ) -> None:
        """query() is False while the recorded stream's earlier work is pending;
        synchronize() waits for it."""
        stream = runtime.Stream(0)
        event = runtime.Event()
        with held(stream):
            event.record(stream)
            pending = event.query()
        event.synchronize()
        assert pending is False and event.query() is True

    def test_a_stream_waiting_on_an_event_runs_after_the_events_work(
        self, runtime: Any
    ) -> None:
        """Producer stream: copy into X, record. Consumer stream: wait, copy X into Y.
        Y holds the producer's bytes."""
        producer, consumer = runtime.Stream(0), runtime.Stream(0)
        source = torch.arange(1 << 16, dtype=torch.int32).to(
            kit_backend.current().device_type
        )
        middle, target = torch.zeros_like(source), torch.zeros_like(source)
        event = runtime.Event()
        with held(producer):
            with runtime.stream(producer):
                middle.copy_(source)
                event.record(producer)
            with runtime.stream(consumer):
                event.wait(consumer)
                target.copy_(middle)
        consumer.synchronize()
        assert torch.equal(target.cpu(), source.cpu())

    def test_an_imported_event_outlives_the_stream_wait_queued_on_it(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """LMCache 0.5.4 and 0.5.5 drop an imported worker event once the handler that
        queued a stream wait on it returns (0.5.6 holds it): the event backend holds it
        until the stream has passed the wait, which a runtime may need (the emulator
        fails the waiting stream otherwise)."""
        backend = lmcache_driven.event_ipc_backend
        device = torch.device(kit_backend.current().device_type, 0)
        producer, waiting = runtime.Stream(0), runtime.Stream(0)
        event = backend.create_event(device)
        with held(producer), held(waiting):
            backend.record_event(event, producer)
            handle = backend.export_event(event, device)
            backend.wait_event(backend.import_event(handle, device), waiting)
        waiting.synchronize()

    def test_a_kernel_gets_a_copy_of_its_bounded_parameter_block_made_at_launch(
        self, emulator: Any
    ) -> None:
        """A runtime copies a launch's arguments when it is called, into a bounded
        parameter space (cudaLaunchKernel): the kernel runs on its copy, the caller's
        block is poisoned once the launch returns (a kernel that kept a pointer to it
        reads garbage, as a device would), and a block past the bound is refused."""
        # Standard
        import ctypes

        i64 = ctypes.c_int64
        launch = ctypes.CFUNCTYPE(
            ctypes.c_int, i64, ctypes.c_void_p, ctypes.c_void_p, i64
        )(emulator.kernel_launcher())
        stream = emulator.current_stream()
        handle = emulator.stream_handle(stream)
        writes_its_argument = ctypes.cast(ctypes.CDLL(None).time, ctypes.c_void_p)
        params, poison = (
            (i64 * 2)(7, 7),
            int.from_bytes(b"\xa5" * 8, "little", signed=True),
        )
        with held(stream):
            assert launch(handle, writes_its_argument, params, 16) == 0
            assert list(params) == [poison, poison]
        stream.synchronize()
        assert list(params) == [poison, poison], "the kernel wrote the caller's block"
        too_large = (ctypes.c_char * 4097)()
        assert launch(handle, writes_its_argument, too_large, 4097) == -2

    def test_an_async_copy_reads_pinned_memory_in_stream_order_and_fails_on_pageable(
        self, emulator: Any
    ) -> None:
        """The copy engine (cudaMemcpyAsync) reads pinned host memory at its host
        address when the copy runs, and device memory freed on the host meanwhile
        stays valid for it (frees are stream-ordered, as torch's caching allocators
        free); pageable memory fails the copy's stream."""
        # Standard
        import ctypes

        i64 = ctypes.c_int64
        copy = ctypes.CFUNCTYPE(ctypes.c_int, i64, i64, i64, i64, i64)(
            emulator.memcpy_async_launcher()
        )
        stream, device = emulator.current_stream(), kit_backend.current().device_type
        handle = emulator.stream_handle(stream)
        source = torch.arange(256, dtype=torch.int32, device=device)
        pinned = torch.zeros(256, dtype=torch.int32).pin_memory()
        with held(stream):
            assert copy(pinned.data_ptr(), source.data_ptr(), 1024, 2, handle) == 0
            del source  # freed while the copy is queued
            assert int(pinned.count_nonzero()) == 0
        stream.synchronize()
        assert pinned.tolist() == list(range(256))
        target = torch.zeros(256, dtype=torch.int32, device=device)
        pageable = torch.ones(256, dtype=torch.int32)
        assert copy(target.data_ptr(), pageable.data_ptr(), 1024, 1, handle) == 0
        with pytest.raises(RuntimeError, match="pageable host memory"):
            stream.synchronize()
        emulator.inject_faults()  # the stream healthy again
        assert int(target.count_nonzero()) == 0

    @pytest.mark.publishes
    def test_completions_and_events_are_published_only_after_the_streams_queued_work(  # noqa: E501
        self, runtime: Any, lmcache_driven: Any
    ) -> None:
        """record_completion_on_stream / record_event_on_stream publish nothing before
        the stream's earlier work has run (an LMCache-driven server commits a store on
        "finish_write"): from a host function that runs no Python, returning at once,
        where the native recorders run on a runtime that launches them (the stream's
        wait keeps the GIL meanwhile); else by synchronizing first."""
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        device = kit_backend.current().device_type
        ops = resolve_device_ops(device)
        stream = runtime.Stream(0)
        handle = lmcache_driven.get_stream_handle(stream)
        completion = publish_behind_a_hold(
            stream,
            lambda: ops.record_completion_on_stream(handle, "finish_write", b"payload"),
            ops.drain_recorded_completions,
        )
        event = publish_behind_a_hold(
            stream,
            lambda: ops.record_event_on_stream(
                handle, "mp.store.end", "session", {"device": device}, {"bytes": 1}
            ),
            ops.drain_recorded_events,
        )
        assert not completion.too_soon and not event.too_soon, (
            "published before the work queued ahead of it had run"
        )
        assert completion.early + completion.late == [("finish_write", b"payload")]
        published = event.early + event.late
        assert [(e[0], e[1], e[3], e[4]) for e in published] == [
            ("mp.store.end", "session", {"device": device}, {"bytes": 1})
        ]
        if publishes_from_host_functions(ops, device):
            assert not (completion.waited or event.waited), (
                "a recorder blocked its caller until the stream's work had run: with "
                "host functions it publishes from one"
            )
