# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU event-IPC backend tests, ported to this plugin's backend.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_event_ipc.py. The
originals hand ``NpuEventIPCBackend`` a fake ``torch.npu`` module whose events log
their calls; here the plugin's backend drives the device's real events, and each
logged call is observed by its effect.

Departures (each also in README.md beside this module):
- ``event.calls`` (record, wait, query, synchronize, from_ipc_handle) become their
  effects: a recorded event is pending while the stream's earlier work is, a waiting
  stream runs after it, an imported event completes with its source. The producer
  stream is held meanwhile (the kit's ``streams.held``: the emulator's
  ``hold_stream``), so
  the order is deterministic; a runtime without that test facility skips that test.
- The ABI-less module and the missing ``torch.npu`` are set up by replacing
  the device module's ``Event`` and removing the module from ``torch`` (the plugin's
  backend takes no
  ``event_module`` argument); ``match="torch_npu"`` becomes the plugin's wording.
- ``_exported_events == events``: the kept events are observed through weak
  references (alive after the caller dropped them), not a private list.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import gc
import weakref

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.base.event_ipc import EventIPCBackend
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    plugin_class,
    runtime_name,
)
from lmcache_device_kit.conformance.streams import held

NUMEL = 1 << 24


def new_backend():
    return plugin_class("event_ipc", "EventIPCBackend")()


class BaseNpuEventIpcTests(PortTests):
    """LMCache's npu/test_npu_event_ipc.py against the plugin's event-IPC backend."""

    def test_backend_satisfies_protocol(self, lmcache_driven: Any) -> None:
        backend = lmcache_driven.event_ipc_backend
        assert isinstance(backend, EventIPCBackend)
        assert backend.device_type == device_type()

    def test_check_event_support_fails_closed_without_abi(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        class AbiLessEvent:
            pass

        monkeypatch.setattr(runtime, "Event", AbiLessEvent)
        backend = new_backend()
        with pytest.raises(RuntimeError, match="interprocess"):
            backend.check_event_support(torch.device(device_type(), 0))

    def test_check_event_support_passes_with_abi(self, lmcache_driven: Any) -> None:
        lmcache_driven.event_ipc_backend.check_event_support(
            torch.device(device_type(), 0)
        )

    def test_backend_creates_exports_and_imports(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        backend, device = (
            lmcache_driven.event_ipc_backend,
            torch.device(device_type(), 0),
        )
        event = backend.create_event(device)
        handle = backend.export_event(event, device)
        assert isinstance(handle, bytes) and handle
        imported = backend.import_event(handle, device)
        assert isinstance(imported, runtime.Event)

    def test_event_operations_act_on_the_devices_events(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """NPU: operations use the torch_npu interprocess Event API."""
        backend, device = (
            lmcache_driven.event_ipc_backend,
            torch.device(device_type(), 0),
        )
        producer, consumer = runtime.Stream(device), runtime.Stream(device)

        backend.check_event_support(device)
        event = backend.create_event(device)
        assert isinstance(event, runtime.Event)
        handle = backend.export_event(event, device)
        remote = backend.import_event(handle, device)
        assert isinstance(remote, runtime.Event)
        source = torch.ones(NUMEL, dtype=torch.uint8).pin_memory()
        target = torch.zeros(NUMEL, dtype=torch.uint8, device=device_type())
        marker, one = torch.zeros(1, device=device_type()), torch.ones(1).pin_memory()
        with held(producer):
            with runtime.stream(producer):
                target.copy_(source, non_blocking=True)
            backend.record_event(event, producer)
            recorded_pending = backend.query_event(remote) is False  # record, import
            backend.wait_event(remote, consumer)
            with runtime.stream(consumer):
                marker.copy_(one, non_blocking=True)
            consumer_waited = consumer.query() is False  # wait
        backend.synchronize_event(remote, device)  # synchronize
        assert producer.query() is True
        assert backend.query_event(remote) is True  # query
        consumer.synchronize()
        assert float(marker.cpu()) == 1.0
        assert recorded_pending and consumer_waited

    def test_without_the_runtime_module_the_backend_refuses(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delattr(torch, runtime_name())
        backend = new_backend()
        with pytest.raises(RuntimeError, match=f"torch.{runtime_name()} is not loaded"):
            backend.check_event_support(torch.device("cpu"))

    def test_device_spec_exposes_cached_event_backend(
        self, lmcache_driven: Any
    ) -> None:
        first = lmcache_driven.event_ipc_backend
        assert first.device_type == device_type()
        assert lmcache_driven.event_ipc_backend is first

    def test_export_serializes_under_the_requested_device(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A handle comes from the event's device, so export_event must make ``device``
        current for the ipc_handle() call regardless of the caller's ambient device."""
        if runtime.device_count() < 2:
            pytest.skip("needs two devices")
        seen: list[int] = []
        real = runtime.Event.ipc_handle

        def pinning(self):
            seen.append(runtime.current_device())
            return real(self)

        backend = new_backend()
        with runtime.device(0):
            event = backend.create_event(torch.device(device_type(), 1))
            monkeypatch.setattr(runtime.Event, "ipc_handle", pinning)
            handle = backend.export_event(event, torch.device(device_type(), 1))
            ambient = runtime.current_device()

        assert isinstance(handle, bytes) and handle
        assert seen == [1]
        # The caller's ambient device is restored after the export.
        assert ambient == 0

    def test_export_keeps_the_source_events_alive(self, lmcache_driven: Any) -> None:
        backend, device = new_backend(), torch.device(device_type(), 0)
        events = [backend.create_event(device) for _ in range(3)]
        for event in events:
            backend.export_event(event, device)
        refs = [weakref.ref(event) for event in events]
        del events, event
        gc.collect()
        assert all(ref() is not None for ref in refs)
