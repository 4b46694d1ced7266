# SPDX-License-Identifier: Apache-2.0
"""LMCache's cross-process event-ordering tests (CUDA, NPU, MUSA), ported to this
plugin.

Sources: LMCache 0.5.6 tests/v1/platform/devices/cuda/test_event_ipc_ordering.py,
tests/v1/platform/devices/npu/test_npu_event_ordering.py and
tests/v1/platform/devices/musa/test_musa_event_ordering.py. A producer process
queues a slow write, records an interprocess event behind it and ships only the
handle; the consumer imports it and must be ordered behind that write. Here both
sides use this plugin's event-IPC backend on the device; the shared buffer crosses
through this plugin's IPC wrapper.

Departures (each also in README.md beside this module):
- One producer process serves the class's tests, a round each, forked from the
  suite's zygote (the kit's ``spawn.popen``), not a ``multiprocessing`` spawn
  child; the buffer is shared with the plugin's IPC wrapper instead of
  ``share_memory_()`` (torch's CUDA-only sharing).
- CUDA's ``torch.cuda._sleep`` (about two seconds of device time before the write)
  becomes the emulator's ``hold_stream`` on the producer's stream for 0.3 s (the
  handle's round trip takes milliseconds), with host functions or without; on a
  device without it, 200 passes over 64 MiB queued ahead of the write.
- NPU's ``test_backend_roundtrip_on_device``: kept whole; its note that a
  same-process ``from_ipc_handle`` fails on CANN does not apply.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import subprocess
import sys
import tempfile

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    runtime_name,
)
from lmcache_device_kit.harness.spawn import child_env, popen

MAGIC = 7.0
NUMEL = 1 << 20
#: The producer's stream is held this long before the write (the emulator).
DELAY_S = 0.3
#: On a device without ``hold_stream``: passes over 64 MiB queued before the write
#: (about 13 GB of memory traffic: tens of milliseconds on an accelerator).
BUSY_ROUNDS = 200

PRODUCER = """
import sys, lmcache, torch
from lmcache.v1.platform import get_device_spec
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
runtime, device = torch.{runtime}, torch.device("{device}", 0)
backend = get_device_spec("{device}").event_ipc_backend
backend.check_event_support(device)
magic = torch.full(({numel},), {magic}).pin_memory()
for line in sys.stdin:  # a round per wrapped buffer
    wrapper = DeviceIPCWrapper.Deserialize(bytes.fromhex(line.strip()))
    buf = wrapper.to_tensor()
    stream = runtime.Stream(device)
    event = backend.create_event(device)
    with runtime.stream(stream):
        payload = torch.full((1024,), 7.0, device=device)
        payload.mul_(2)
        hold_stream = getattr(runtime, "hold_stream", None)  # the emulator's
        if hold_stream is not None:
            hold = hold_stream(stream, {delay})  # released by expiring
        else:  # a device: work queued ahead of the write, as CUDA's torch.cuda._sleep
            scratch = torch.ones(1 << 24, device=device)
            for _ in range({busy_rounds}):
                scratch.mul_(1.0)
        buf.copy_(magic, non_blocking=True)
        backend.record_event(event, stream)
    # no synchronize: the handle leaves while the write is in flight
    print(backend.export_event(event, device).hex(), flush=True)
    sys.stdin.readline()  # keep the event alive until the parent is done
    stream.synchronize()
    print("expected", float(payload.sum().cpu()) / 1024, flush=True)
    wrapper.close()
"""


class Producer:
    """One producer process for the module, forked from the suite's zygote. Each round,
    it holds a stream, writes MAGIC into a buffer it maps through the IPC wrapper,
    records an event behind the write and prints the event's handle at once."""

    def __init__(self) -> None:
        code = PRODUCER.format(
            device=device_type(),
            runtime=runtime_name(),
            delay=DELAY_S,
            busy_rounds=BUSY_ROUNDS,
            magic=MAGIC,
            numel=NUMEL,
        )
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.process = popen(
            [sys.executable, "-c", code],
            env=child_env(),
            cwd=tempfile.gettempdir(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
        )

    def handle(self, spec, buf: torch.Tensor) -> bytes:
        """The handle of the event recorded behind the producer's write into ``buf``."""
        wrapper = spec.ipc_wrapper_cls.wrap(buf)
        self.process.stdin.write(DeviceIPCWrapper.Serialize(wrapper).hex() + "\n")
        self.process.stdin.flush()
        return bytes.fromhex(self.line())

    def done(self) -> str:
        """End the round: the producer synchronizes; the line it prints then."""
        self.process.stdin.write("done\n")
        self.process.stdin.flush()
        return self.line()

    def line(self) -> str:
        line = self.process.stdout.readline().strip()
        if not line:
            self.errors.seek(0)
            raise AssertionError(f"the producer exited: {self.errors.read()[-3000:]}")
        return str(line)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


class BaseEventIpcOrderingTests(PortTests):
    """LMCache's cross-process event-ordering tests (cuda, npu, musa) against the
    plugin's event-IPC backend."""

    @pytest.fixture(scope="module")
    def producer(self) -> Iterator[Producer]:
        """One producer process for the class's tests (module scope: pytest deprecates
        class-scoped fixtures that are methods; only this class asks for it)."""
        started = Producer()
        yield started
        started.stop()

    def test_waiting_on_an_imported_event_makes_the_producers_write_visible(
        self, lmcache_driven: Any, runtime: Any, producer: Producer
    ) -> None:
        """cuda/test_event_ipc_ordering.py::test_imported_event_orders_consumer_behind_producer"""
        device = torch.device(device_type(), 0)
        backend = lmcache_driven.event_ipc_backend
        buf = torch.zeros(NUMEL, device=device)
        handle = producer.handle(lmcache_driven, buf)
        try:
            imported = backend.import_event(handle, device)
            consumer_stream = runtime.Stream(device)
            backend.wait_event(imported, consumer_stream)
            with runtime.stream(consumer_stream):
                observed = buf.clone()
            consumer_stream.synchronize()
        finally:
            producer.done()
        unwritten = int((observed.cpu() != MAGIC).sum().item())
        assert unwritten == 0, (
            f"consumer read {unwritten}/{NUMEL} elements before the producer "
            "finished writing them"
        )

    def test_a_receiver_stream_waits_on_an_event_recorded_by_a_producer(
        self, lmcache_driven: Any, runtime: Any, producer: Producer
    ) -> None:
        """musa/test_musa_event_ordering.py::test_musa_ipc_event_wait_orders_streams"""
        device = torch.device(device_type(), 0)
        backend = lmcache_driven.event_ipc_backend
        buf = torch.zeros(NUMEL, device=device)
        handle = producer.handle(lmcache_driven, buf)
        try:
            assert isinstance(handle, bytes)
            backend.check_event_support(device)
            imported = backend.import_event(handle, device)
            consumer = runtime.Stream(device)
            marker = torch.zeros(1, device=device)
            with runtime.stream(consumer):
                backend.wait_event(imported, consumer)
                marker.fill_(1)
            consumer.synchronize()
            assert float(marker.cpu().item()) == pytest.approx(1.0)
            assert backend.query_event(imported)
        finally:
            producer.done()

    def test_an_imported_event_synchronizes_and_then_reports_complete(
        self, lmcache_driven: Any, runtime: Any, producer: Producer
    ) -> None:
        """npu/test_npu_event_ordering.py::test_cross_process_event_import_and_sync"""
        buf = torch.zeros(NUMEL, device=device_type())
        handle = producer.handle(lmcache_driven, buf)
        try:
            imported = runtime.Event.from_ipc_handle(
                torch.device(device_type(), 0), handle
            )
            imported.synchronize()
            assert imported.query() is True
            assert bool((buf.cpu() == MAGIC).all())
        finally:
            out = producer.done()
        assert out.split() == ["expected", "14.0"]

    def test_the_backend_records_synchronizes_queries_and_exports_on_the_device(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """npu/test_npu_event_ordering.py::test_backend_roundtrip_on_device"""
        backend = lmcache_driven.event_ipc_backend
        device = torch.device(device_type(), 0)
        backend.check_event_support(device)
        event = backend.create_event(device)
        stream = runtime.Stream(device)
        payload = torch.ones(8, device=device)
        payload.add_(1)
        backend.record_event(event, stream)
        backend.synchronize_event(event, device)
        assert backend.query_event(event) is True
        handle = backend.export_event(event, device)
        assert isinstance(handle, bytes) and len(handle) > 0
