# SPDX-License-Identifier: Apache-2.0
"""LMCache's MUSA event-IPC backend tests (and its IPC-wrapper round trip), ported to
this plugin.

Sources: LMCache 0.5.6 tests/v1/platform/devices/musa/test_musa_event_ipc.py and
tests/v1/platform/devices/musa/test_musa_ipc_wrapper_integration.py. The originals
hand ``MusaEventIPCBackend`` a fake IPC module whose events log their calls; here
the plugin's backend drives the device's events on device 1, as the original's
device is ``musa:1``.

Departures (each also in README.md beside this module):
- Unavailable event IPC: instead of a module answering False, the device's events
  refuse to export (``ipc_handle`` raises); the check must fail closed naming the
  device. ``match="TorchMUSA"`` becomes ``torch.<device>``.
- The logged call order (create, export, import, record, wait, query, synchronize)
  becomes those calls made in that order on device 1, each observed by its effect;
  ``torch_musa_module_calls == 1`` (MUSA resolves its module lazily) is dropped.
- The round trip's 4x4 tensor is a view into a 64 KiB allocation (a device exports
  64 KiB and more); the receiver is forked from the suite (``run_python``).
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import json

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.base.event_ipc import EventIPCBackend
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    plugin_class,
    runtime_name,
)
from lmcache_device_kit.conformance.support import run_python


def new_backend():
    return plugin_class("event_ipc", "EventIPCBackend")()


class BaseMusaEventIpcTests(PortTests):
    """LMCache's musa/test_musa_event_ipc.py (and its IPC-wrapper round trip) against
    the plugin's event-IPC backend."""

    def test_the_backend_is_an_event_ipc_backend(self, runtime: Any) -> None:
        assert isinstance(new_backend(), EventIPCBackend)
        assert new_backend().device_type == device_type()

    def test_check_event_support_fails_closed_when_unavailable(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def refused(self):
            raise RuntimeError("interprocess events are not supported here")

        monkeypatch.setattr(runtime.Event, "ipc_handle", refused)
        with pytest.raises(RuntimeError, match=device_type()):
            new_backend().check_event_support(torch.device(device_type(), 0))

    def test_check_event_support_fails_closed_when_module_missing(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delattr(torch, runtime_name())
        backend = new_backend()
        with pytest.raises(RuntimeError, match=f"torch.{runtime_name()}"):
            backend.check_event_support(torch.device("cpu"))

    def test_event_operations_run_on_the_devices_events(self, runtime: Any) -> None:
        if runtime.device_count() < 2:
            pytest.skip("needs two devices")
        backend = new_backend()
        device = torch.device(device_type(), 1)
        stream, other = runtime.Stream(device), runtime.Stream(device)
        backend.check_event_support(device)
        event = backend.create_event(device)
        handle = backend.export_event(event, device)
        assert isinstance(handle, bytes) and handle
        remote = backend.import_event(handle, device)
        backend.record_event(event, stream)
        backend.wait_event(remote, other)
        other.synchronize()
        assert backend.query_event(remote) is True
        backend.synchronize_event(remote, device)
        assert isinstance(remote, runtime.Event)
        assert event.device == device and remote.device == device

    def test_the_specs_backend_creates_and_exports(self, lmcache_driven: Any) -> None:
        """test_default_backend_loads_ipc_wrapper"""
        backend = lmcache_driven.event_ipc_backend
        device = torch.device(device_type(), 0)
        backend.check_event_support(device)
        event = backend.create_event(device)
        handle = backend.export_event(event, device)
        assert isinstance(handle, bytes) and handle

    def test_the_device_spec_returns_the_plugins_backend(
        self, lmcache_driven: Any
    ) -> None:
        backend = lmcache_driven.event_ipc_backend
        assert isinstance(backend, plugin_class("event_ipc", "EventIPCBackend"))

    def test_a_receiver_process_reads_a_wrapped_tensor(
        self, lmcache_driven: Any
    ) -> None:
        """musa/test_musa_ipc_wrapper_integration.py"""
        base = torch.zeros(1 << 14, dtype=torch.float32, device=device_type())
        tensor = base[:16].view(4, 4)
        tensor.copy_(torch.arange(16, dtype=torch.float32).view(4, 4))
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(tensor)
        done = run_python(
            f"""
import json, lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
wrapper = DeviceIPCWrapper.Deserialize(
    bytes.fromhex("{DeviceIPCWrapper.Serialize(wrapper).hex()}")
)
tensor = wrapper.to_tensor()
result = [list(tensor.shape), float(tensor.sum().item())]
del tensor
wrapper.close()
print(json.dumps(result))
""",
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        shape, total = json.loads(done.stdout.strip().splitlines()[-1])
        assert tuple(shape) == (4, 4)
        assert total == pytest.approx(float(tensor.sum().item()))
