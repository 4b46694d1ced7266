# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache's NPU event-IPC backend tests, ported to this plugin's backend.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_event_ipc.py. The
originals hand ``NpuEventIPCBackend`` a fake ``torch.npu`` module whose events log
their calls; here the plugin's backend drives the device's real events, and each
logged call is observed by its effect.

Departures (each also in tests/lmcache_ports/README.md):
- ``event.calls`` (record, wait, query, synchronize, from_ipc_handle) become their
  effects: a recorded event is pending while the stream's earlier work is, a waiting
  stream runs after it, an imported event completes with its source. The producer
  stream is held meanwhile (``_support.held``: the emulator's ``hold_stream``), so
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
import importlib
import weakref

# Third Party
from _support import held
import pytest
import torch

# First Party
from lmcache.v1.platform.base.event_ipc import EventIPCBackend

DEVICE = "{{ cookiecutter.device_name }}"
PACKAGE = "{{ cookiecutter.import_package }}"
PREFIX = "{{ cookiecutter.class_prefix }}"
NUMEL = 1 << 24


def plugin_class(module: str, name: str) -> Any:
    """This plugin's class ``<prefix><name>`` from its module ``module``."""
    return getattr(importlib.import_module(f"{PACKAGE}.{module}"), PREFIX + name)


def new_backend():  # type: ignore[no-untyped-def]
    return plugin_class("event_ipc", "EventIPCBackend")()


def test_backend_satisfies_protocol(lmcache_driven) -> None:  # type: ignore[no-untyped-def]
    backend = lmcache_driven.event_ipc_backend
    assert isinstance(backend, EventIPCBackend)
    assert backend.device_type == DEVICE


def test_check_event_support_fails_closed_without_abi(runtime, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class AbiLessEvent:
        pass

    monkeypatch.setattr(runtime, "Event", AbiLessEvent)
    backend = new_backend()
    with pytest.raises(RuntimeError, match="interprocess"):
        backend.check_event_support(torch.device(DEVICE, 0))


def test_check_event_support_passes_with_abi(lmcache_driven) -> None:  # type: ignore[no-untyped-def]
    lmcache_driven.event_ipc_backend.check_event_support(torch.device(DEVICE, 0))


def test_backend_creates_exports_and_imports(lmcache_driven, runtime) -> None:  # type: ignore[no-untyped-def]
    backend, device = lmcache_driven.event_ipc_backend, torch.device(DEVICE, 0)
    event = backend.create_event(device)
    handle = backend.export_event(event, device)
    assert isinstance(handle, bytes) and handle
    imported = backend.import_event(handle, device)
    assert isinstance(imported, runtime.Event)


def test_event_operations_act_on_the_devices_events(lmcache_driven, runtime) -> None:  # type: ignore[no-untyped-def]
    """NPU: operations use the torch_npu interprocess Event API."""
    backend, device = lmcache_driven.event_ipc_backend, torch.device(DEVICE, 0)
    producer, consumer = runtime.Stream(device), runtime.Stream(device)

    backend.check_event_support(device)
    event = backend.create_event(device)
    assert isinstance(event, runtime.Event)
    handle = backend.export_event(event, device)
    remote = backend.import_event(handle, device)
    assert isinstance(remote, runtime.Event)
    source = torch.ones(NUMEL, dtype=torch.uint8).pin_memory()
    target = torch.zeros(NUMEL, dtype=torch.uint8, device=DEVICE)
    marker, one = torch.zeros(1, device=DEVICE), torch.ones(1).pin_memory()
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


def test_without_the_runtime_module_the_backend_refuses(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delattr(torch, DEVICE)
    backend = new_backend()
    with pytest.raises(RuntimeError, match=f"torch.{DEVICE} is not loaded"):
        backend.check_event_support(torch.device("cpu"))


def test_device_spec_exposes_cached_event_backend(lmcache_driven) -> None:  # type: ignore[no-untyped-def]
    first = lmcache_driven.event_ipc_backend
    assert first.device_type == DEVICE
    assert lmcache_driven.event_ipc_backend is first


def test_export_serializes_under_the_requested_device(runtime, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A handle comes from the event's device, so export_event must make ``device``
    current for the ipc_handle() call regardless of the caller's ambient device."""
    if runtime.device_count() < 2:
        pytest.skip("needs two devices")
    seen: list[int] = []
    real = runtime.Event.ipc_handle

    def pinning(self):  # type: ignore[no-untyped-def]
        seen.append(runtime.current_device())
        return real(self)

    backend = new_backend()
    with runtime.device(0):
        event = backend.create_event(torch.device(DEVICE, 1))
        monkeypatch.setattr(runtime.Event, "ipc_handle", pinning)
        handle = backend.export_event(event, torch.device(DEVICE, 1))
        ambient = runtime.current_device()

    assert isinstance(handle, bytes) and handle
    assert seen == [1]
    # The caller's ambient device is restored after the export.
    assert ambient == 0


def test_export_keeps_the_source_events_alive(lmcache_driven) -> None:  # type: ignore[no-untyped-def]
    backend, device = new_backend(), torch.device(DEVICE, 0)
    events = [backend.create_event(device) for _ in range(3)]
    for event in events:
        backend.export_event(event, device)
    refs = [weakref.ref(event) for event in events]
    del events, event
    gc.collect()
    assert all(ref() is not None for ref in refs)
