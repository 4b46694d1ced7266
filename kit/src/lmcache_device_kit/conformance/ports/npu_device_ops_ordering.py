# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU (and MUSA) stream-ordered recording tests, ported to this plugin.

Sources: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_device_ops_ordering.py
and tests/v1/platform/devices/musa/test_stream_ordering.py (the same two scenarios
for MUSA). LMCache's NPU and MUSA ops synchronize the stream, then publish; the
originals replace the synchronization helper with a recorder and check it was called
with the stream before the publish. Here the plugin's ``DeviceOps`` runs on the real
device: work is queued on a stream first, so "synchronized before the publish" is
observed as the stream's work done when the call returns, with the publish there.

Departures (each also in README.md beside this module):
- Both ordering tests run against a runtime without host functions, as torch_npu
  and torch_musa are (``without_host_functions``): there the plugin synchronizes,
  then publishes. With host functions its native ops publish from a C++ host
  function, after the stream's work and without waiting
  (``stream_order.BaseStreamOrderTests``).
- ``calls == [("sync", ptr)]`` becomes ``stream.query()`` is True on return: the
  plugin has no synchronization helper to replace; what it must do is observed.
  Added: the queued work had run when LMCache's recorder was called (what the
  tests' names say; the originals' recorder does not see the order).
- test_sync_helper_raises_on_acl_error: ACL's status 507899 becomes the emulator's
  injected ``device_lost`` (emulator only): the runtime's error is raised and
  nothing is published.
- test_genuine_native_recorder_binding_is_kept: checked against the plugin's own
  native module (whatever public callables it binds stay bound); skipped where the
  plugin was rendered without native ops.
- test_ensure_native_keeps_plugin_page_buffer_shape_desc: not ported; the plugin's
  kernels take LMCache's own shape descriptor, no vendor class replaces it.
- test_ensure_native_raises_without_plugin: inverted. LMCache-Ascend raises because
  its torch baseline would copy in the wrong address space; this plugin's policy is
  soft (its baseline views device memory through ``tensor_from_ptr``): a missing
  native module keeps the baseline, binds nothing and raises nothing.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import sys

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform import resolve_device_ops, torch_ops
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    package,
    runtime_name,
)
from lmcache_device_kit.conformance.streams import held

#: A copy large enough to take milliseconds on the device (the recorder takes µs).
NUMEL = 1 << 24


def queued_work(runtime, stream, monkeypatch) -> list[bool]:
    """A host-to-device copy queued on ``stream``, still pending when this returns;
    for each publish (LMCache's recorders, wrapped), whether the copy had run."""
    source = torch.ones(NUMEL, dtype=torch.uint8).pin_memory()
    target = torch.zeros(NUMEL, dtype=torch.uint8, device=device_type())
    copied = runtime.Event()
    with runtime.stream(stream):
        target.copy_(source, non_blocking=True)
    copied.record(stream)
    assert stream.query() is False, "the copy ran before the recorder was called"
    seen: list[bool] = []

    def watched(real: Any) -> Any:
        def publish(*args: Any) -> Any:
            seen.append(bool(copied.query()))
            return real(*args)

        return publish

    for name in ("record_completion_on_stream", "record_event_on_stream"):
        monkeypatch.setattr(torch_ops, name, watched(getattr(torch_ops, name)))
    return seen


def native_callables(native) -> list[str]:
    names = [n for n in vars(native) if not n.startswith("_")]
    return [n for n in names if callable(getattr(native, n))]


class BaseNpuDeviceOpsOrderingTests(PortTests):
    """LMCache's npu/test_npu_device_ops_ordering.py and musa/test_stream_ordering.py
    against the plugin's DeviceOps recorders."""

    @pytest.fixture
    def ops(self) -> Iterator[Any]:
        """The plugin's DeviceOps as LMCache resolves them, with nothing left
        recorded."""
        found = resolve_device_ops(device_type())
        assert type(found).__module__.startswith(package() + ".")
        found.drain_recorded_completions()  # isolate the shared fallback buffer
        found.drain_recorded_events()
        yield found
        # a publish still queued lands in this test
        getattr(torch, runtime_name()).synchronize()
        found.drain_recorded_completions()
        found.drain_recorded_events()

    @pytest.mark.usefixtures("without_host_functions")
    def test_record_completion_synchronizes_the_stream_before_publishing(
        self,
        ops: Any,
        runtime: Any,
        lmcache_driven: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        stream = runtime.Stream(0)
        handle = lmcache_driven.get_stream_handle(stream)
        published_after_the_work = queued_work(runtime, stream, monkeypatch)

        ops.record_completion_on_stream(handle, "finish_write", b"payload")

        synchronized = stream.query()
        assert ops.drain_recorded_completions() == [("finish_write", b"payload")]
        assert synchronized is True
        assert published_after_the_work == [True]

    @pytest.mark.usefixtures("without_host_functions")
    def test_record_event_synchronizes_the_stream_before_publishing(
        self,
        ops: Any,
        runtime: Any,
        lmcache_driven: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        stream = runtime.Stream(0)
        handle = lmcache_driven.get_stream_handle(stream)
        published_after_the_work = queued_work(runtime, stream, monkeypatch)

        ops.record_event_on_stream(
            handle,
            "mp.store.start",
            "session",
            {"device": device_type()},
            {"engine_id": 1},
        )

        synchronized = stream.query()
        events = ops.drain_recorded_events()
        assert len(events) == 1
        event_type, session_id, _timestamp, string_metadata, int_metadata = events[0]
        assert event_type == "mp.store.start"
        assert session_id == "session"
        assert string_metadata == {"device": device_type()}
        assert int_metadata == {"engine_id": 1}
        assert synchronized is True
        assert published_after_the_work == [True]

    def test_a_stream_the_runtime_fails_raises_its_error_and_publishes_nothing(
        self, ops: Any, emulator: Any, lmcache_driven: Any
    ) -> None:
        stream = emulator.Stream(1)
        handle = lmcache_driven.get_stream_handle(stream)
        target = torch.zeros(1 << 16, dtype=torch.float32, device=f"{device_type()}:1")
        emulator.inject_faults("device_lost")
        try:
            # held: the copy fails the stream after the completion is queued behind
            # it, as on NPU (unheld, a busy host ran the copy first, and the launch
            # itself was refused: a different failure, and a flaky test)
            with held(stream):
                with emulator.stream(stream):
                    target.copy_(torch.ones(1 << 16), non_blocking=True)
                ops.record_completion_on_stream(handle, "finish_write", b"payload")
            with pytest.raises(RuntimeError, match="device_lost"):
                stream.synchronize()
        finally:
            emulator.inject_faults()
        assert ops.drain_recorded_completions() == []

    def test_the_native_modules_ops_are_bound_and_the_recorders_kept(
        self, ops: Any, native: Any
    ) -> None:
        ops.ensure_native()
        names = native_callables(native)
        assert names, "the native module binds nothing"
        for name in names:
            assert ops.__dict__[name] is getattr(native, name), name
        recorders = ("record_completion_on_stream", "record_event_on_stream")
        for name in recorders:
            if name not in names:
                assert getattr(ops, name).__func__ is getattr(type(ops), name), name

    def test_ensure_native_without_the_native_module_keeps_the_baseline(
        self, ops: Any, native: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        plugin = sys.modules[package()]
        monkeypatch.setitem(sys.modules, f"{package()}.native_ops", None)
        monkeypatch.delattr(plugin, "native_ops")
        fresh = type(ops)()
        fresh.ensure_native()  # raises nothing
        assert not set(native_callables(native)) & set(fresh.__dict__)
