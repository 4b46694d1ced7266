# SPDX-License-Identifier: {{ cookiecutter.license }}
"""The event IPC backend: cross-process ordering of LMCache-driven transfers.

As ``npu/test_npu_event_ipc.py`` does for NPU: against a stub runtime on any host,
the backend satisfies LMCache's protocol, fails closed without interprocess events,
exports under the requested device and keeps exported events alive; on the device,
an exported event orders another stream's work after the recorded one.
"""

# Standard
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.base.event_ipc import EventIPCBackend
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.event_ipc import (
    {{ cookiecutter.class_prefix }}EventIPCBackend,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)

Backend = {{ cookiecutter.class_prefix }}EventIPCBackend


class _FakeEvent:
    """A CUDA-style interprocess event that records the device current at export."""

    exported_on: list[Any] = []

    def __init__(self, interprocess: bool = False) -> None:
        if not interprocess:
            raise ValueError("events must be interprocess")

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> "_FakeEvent":
        return cls(interprocess=True)

    def ipc_handle(self) -> bytes:
        _FakeEvent.exported_on.append(_FakeRuntime.current)
        return b"handle"

    def record(self, stream: Any = None) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _FakeRuntime:
    Event = _FakeEvent
    current: Any = "ambient"

    @contextmanager
    def device(self, index: Any) -> Iterator[None]:
        previous, _FakeRuntime.current = _FakeRuntime.current, index
        try:
            yield
        finally:
            _FakeRuntime.current = previous


class _Device:
    type = DEVICE_TYPE
    index = 1


@pytest.fixture
def fake_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, TORCH_MODULE_NAME, _FakeRuntime(), raising=False)
    _FakeEvent.exported_on.clear()


def test_backend_satisfies_lmcaches_protocol(fake_runtime: None) -> None:
    backend = Backend()
    assert isinstance(backend, EventIPCBackend)
    assert backend.device_type == DEVICE_TYPE


def test_event_support_fails_closed_without_the_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(torch, TORCH_MODULE_NAME, raising=False)
    with pytest.raises(RuntimeError, match="not loaded"):
        Backend().check_event_support(_Device())


def test_event_support_exports_a_handle_to_prove_it(fake_runtime: None) -> None:
    Backend().check_event_support(_Device())
    assert _FakeEvent.exported_on == [1]


def test_export_pins_the_requested_device_and_restores_the_callers(
    fake_runtime: None,
) -> None:
    backend = Backend()
    event = backend.create_event(_Device())
    assert backend.export_event(event, _Device()) == b"handle"
    assert _FakeEvent.exported_on == [1]
    assert _FakeRuntime.current == "ambient"
    assert isinstance(backend.import_event(b"handle", _Device()), _FakeEvent)


def test_exported_events_are_kept_alive(fake_runtime: None) -> None:
    """A destroyed event's handle is stale, and the importer may open it later."""
    backend = Backend()
    events = [backend.create_event(_Device()) for _ in range(3)]
    for event in events:
        backend.export_event(event, _Device())
    assert all(event in backend._kept for event in events)


def test_device_spec_caches_its_event_backend(fake_runtime: None) -> None:
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    first = spec.event_ipc_backend
    assert isinstance(first, Backend)
    assert spec.event_ipc_backend is first


@requires_device
def test_an_exported_event_imports_records_and_orders_a_stream() -> None:
    """Export, import, record, wait, query and synchronize on the device: the
    consumer's stream reads what the producer wrote before recording."""
    runtime = getattr(torch, TORCH_MODULE_NAME)
    device = torch.device(DEVICE_TYPE, 0)
    backend = Backend()
    backend.check_event_support(device)
    producer, consumer = runtime.Stream(device=device), runtime.Stream(device=device)
    data = torch.zeros(1 << 16, device=device)
    event = backend.create_event(device)
    with runtime.stream(producer):
        data.fill_(3.0)
        backend.record_event(event, producer)
    imported = backend.import_event(backend.export_event(event, device), device)
    backend.wait_event(imported, consumer)
    with runtime.stream(consumer):
        observed = data.clone()
    backend.synchronize_event(imported, device)
    consumer.synchronize()
    assert backend.query_event(imported)
    assert torch.equal(observed.cpu(), torch.full((1 << 16,), 3.0))


@requires_device
def test_a_handle_that_was_never_exported_is_refused() -> None:
    device = torch.device(DEVICE_TYPE, 0)
    with pytest.raises(Exception):  # noqa: B017 - whatever the runtime raises
        Backend().import_event(bytes(64), device)
