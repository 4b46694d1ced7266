# SPDX-License-Identifier: Apache-2.0
"""The LMCache-driven building blocks, each against LMCache's own entry points.

Routing (``BaseTransferRoutingTests``) runs on every backend and checks both
answers; the event IPC and pinning parts (``BaseLMCacheDrivenTests``) need
LMCache-driven transfer, and a backend without it skips them with the reason.

Imports torch (through ``support``); lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import gc
import importlib
import threading
import types

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import run_python, seeded_kv

#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=kit_backend.current().device_type)


def transfer_context(mode: str) -> Any:
    """LMCache's worker-side transfer context over fresh KV caches, in ``mode``."""
    # First Party
    from lmcache.v1.multiprocess.transfer_context.worker_transfer import (
        create_transfer_context,
    )

    return create_transfer_context(
        kv_caches(), instance_id=0, req_client=None, mode=mode
    )


def first_device(index: int = 0) -> torch.device:
    return torch.device(kit_backend.current().device_type, index)


class BaseTransferRoutingTests(ConformanceTests):
    """Which transfer path LMCache picks for this backend, and both spellings of the
    capability."""

    def test_auto_mode_picks_the_transfer_path_the_spec_declares(
        self, spec: Any
    ) -> None:
        """``auto`` resolves to the spec's default_mp_transfer_mode() (lmcache 0.5.6+;
        before: engine-driven off CUDA)."""
        package = kit_backend.current().package
        compat = importlib.import_module(f"{package}._lmcache_compat")
        context = transfer_context("auto")
        expected = (
            "LMCacheDriven"
            if compat.auto_transfer_mode(spec) == "lmcache_driven"
            else "EngineDriven"
        )
        assert expected in type(context).__name__

    def test_both_spellings_of_the_lmcache_driven_capability_give_one_answer(
        self, spec: Any
    ) -> None:
        """is_handle_transfer_available() (lmcache 0.5.4/0.5.5) and
        is_lmcache_driven_available() (0.5.6) agree."""
        assert spec.is_handle_transfer_available() is spec.is_lmcache_driven_available()
        # Without a wrapper there is nothing to hand over: the answer must then be
        # False under both names (0.5.4/0.5.5's base class would say True).
        if spec.ipc_wrapper_cls is None:
            assert spec.is_handle_transfer_available() is False

    def test_lmcache_driven_mode_is_served_or_refused_clearly(self, spec: Any) -> None:
        """Asking for lmcache_driven gives LMCache's context, or LMCache's ValueError
        naming engine_driven."""
        if spec.is_lmcache_driven_available():
            context = transfer_context("lmcache_driven")
            assert type(context).__name__ == "LMCacheDrivenTransferContext"
        else:
            with pytest.raises(ValueError, match="engine_driven"):
                transfer_context("lmcache_driven")


def import_in_another_process(handle: bytes) -> None:
    """The server's side of the handshake: a new process imports the event handle,
    waits and synchronizes."""
    backend = kit_backend.current()
    done = run_python(
        f"""
import lmcache, torch
from lmcache.v1.platform import get_device_spec
backend = get_device_spec("{backend.device_type}").event_ipc_backend
device = torch.device("{backend.device_type}", 0)
imported = backend.import_event(bytes.fromhex({handle.hex()!r}), device)
runtime = torch.{backend.torch_module_name}
backend.wait_event(imported, runtime.current_stream(device))
backend.synchronize_event(imported, device)
print("imported", backend.query_event(imported))
"""
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["imported", "True"]


class DeclaredOnly:
    """An Event with every IPC signature LMCache checks, whose export fails."""

    def __init__(
        self,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> None:
        self.interprocess = interprocess

    def ipc_handle(self) -> bytes:
        raise RuntimeError("driver: interprocess events are not enabled on this board")

    @classmethod
    def from_ipc_handle(cls, device: object, handle: bytes) -> DeclaredOnly:
        return cls(interprocess=True)

    def record(self, stream: object = None) -> None: ...


class BaseLMCacheDrivenTests(ConformanceTests):
    """The event IPC backend and the pin backend, as LMCache's futures and its lazy
    allocator use them."""

    requires = frozenset({"lmcache_driven"})

    def test_event_backend_runs_the_full_ipc_cycle(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """create, record, export, import, wait, query, synchronize: the sequence
        LMCache's futures use."""
        backend = lmcache_driven.event_ipc_backend
        assert backend is lmcache_driven.event_ipc_backend, (
            "the backend must be cached on the spec"
        )
        device = first_device()
        backend.check_event_support(device)
        event = backend.create_event(device)
        backend.record_event(event, runtime.current_stream(device))
        handle = backend.export_event(event, device)
        imported = backend.import_event(handle, device)
        backend.wait_event(imported, runtime.current_stream(device))
        assert backend.query_event(imported) in (True, False)
        backend.synchronize_event(imported, device)
        assert backend.query_event(imported) is True

    def test_an_exported_event_is_imported_and_waited_on_in_a_second_process(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """A fresh process imports the worker's event handle and synchronizes on it."""
        backend, device = lmcache_driven.event_ipc_backend, first_device()
        event = backend.create_event(device)
        backend.record_event(event, runtime.current_stream(device))
        import_in_another_process(backend.export_event(event, device))

    def test_an_exported_event_stays_importable_after_its_creator_drops_it(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """LMCache exports an event and lets go of it; the backend keeps it alive while
        its handle may be imported (a destroyed event's handle is stale, as on a
        device)."""
        backend, device = lmcache_driven.event_ipc_backend, first_device()
        event = backend.create_event(device)
        backend.record_event(event, runtime.current_stream(device))
        handle = backend.export_event(event, device)
        del event
        gc.collect()
        import_in_another_process(handle)

    def test_events_are_created_exported_and_imported_on_their_own_device(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """TP=2 on one host: device 1's events belong to device 1 while device 0 is
        current."""
        if runtime.device_count() < 2:
            pytest.skip(f"needs two {kit_backend.current().device_type} devices")
        backend, device = lmcache_driven.event_ipc_backend, first_device(1)
        assert runtime.current_device() == 0
        event = backend.create_event(device)
        assert event.device == device
        imported = backend.import_event(backend.export_event(event, device), device)
        assert imported.device == device and runtime.current_device() == 0

    def test_event_backend_refuses_a_runtime_without_ipc_events(
        self, lmcache_driven: Any
    ) -> None:
        """check_event_support raises RuntimeError when the device's events cannot
        cross processes."""
        backend = type(lmcache_driven.event_ipc_backend)()
        backend._event_module = types.SimpleNamespace(
            Event=type("PlainEvent", (), {"__init__": lambda self: None})
        )
        with pytest.raises(RuntimeError, match="interprocess"):
            backend.check_event_support(first_device())

    def test_event_backend_probes_a_runtime_that_declares_ipc_events_but_cannot_export_them(  # noqa: E501
        self, lmcache_driven: Any
    ) -> None:
        """An Event with every IPC signature LMCache checks, whose export fails, is
        refused by the probe, not later."""
        backend = type(lmcache_driven.event_ipc_backend)()
        backend._event_module = types.SimpleNamespace(Event=DeclaredOnly)
        with pytest.raises(
            RuntimeError, match="declared but unusable.*not enabled on this board"
        ):
            backend.check_event_support(first_device())

    def test_pin_backend_is_consistent(self, lmcache_driven: Any) -> None:
        """The pin backend pins exactly when it says pinning is supported."""
        host = torch.empty(1 << 16, dtype=torch.uint8)
        supported = lmcache_driven.is_pin_supported
        assert lmcache_driven.pin_memory(host.data_ptr(), host.numel()) is supported
        assert lmcache_driven.unpin_memory(host.data_ptr()) is supported

    def test_a_thread_that_never_set_its_device_pins_through_the_backend(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """LMCache's lazy allocator pins from a thread of its own: the backend binds
        the runtime's context there, which a runtime with per-thread contexts
        (Ascend's, and the emulator's by default: the raw call fails first) needs
        before a registration."""
        if not lmcache_driven.is_pin_supported:
            pytest.skip(f"{type(lmcache_driven).__name__} does not support pinning")
        host = torch.empty(1 << 16, dtype=torch.uint8)
        results: list[object] = []

        def pin() -> None:
            try:
                if getattr(runtime, "is_emulator", False):
                    with pytest.raises(RuntimeError, match="no device context"):
                        runtime.host_register(host.data_ptr(), host.numel())
                pinned = lmcache_driven.pin_memory(host.data_ptr(), host.numel())
                results.append((pinned, lmcache_driven.unpin_memory(host.data_ptr())))
            except BaseException as exc:  # noqa: BLE001 - reported below
                results.append(exc)

        thread = threading.Thread(target=pin)
        thread.start()
        thread.join(60)
        assert results == [(True, True)]

    def test_a_threads_bound_context_follows_every_device_it_is_asked_for(
        self, runtime: Any
    ) -> None:
        """One of LMCache's threads binds device 0, then 1, then 0 again (a server
        mapping two ranks' caches): each bind leaves that device current."""
        backend = kit_backend.current()
        if runtime.device_count() < 2 or backend.extends:
            pytest.skip("one device, or the built-in's runtime: no context of its own")
        bind = importlib.import_module(f"{backend.package}.runtime").bind_thread_context
        current: list[object] = []

        def switch() -> None:
            for index in (0, 1, 0):
                bind(index)
                current.append(runtime.current_device())

        thread = threading.Thread(target=switch)
        thread.start()
        thread.join(60)
        assert current == [0, 1, 0]

    def test_pinning_refuses_a_null_pointer_or_an_empty_range(
        self, lmcache_driven: Any
    ) -> None:
        """pin_memory(0, n) and pin_memory(ptr, 0) are refused, as cudaHostRegister
        refuses them."""
        host = torch.empty(4096, dtype=torch.uint8)
        assert lmcache_driven.pin_memory(0, 4096) is False
        assert lmcache_driven.pin_memory(host.data_ptr(), 0) is False

    def test_an_unaligned_range_pins_and_unpins_and_only_pinned_ranges_unpin(
        self, lmcache_driven: Any
    ) -> None:
        """Any start and size round-trip, registered as the whole pages runtimes want
        (aclrtHostRegister, the emulator); unknown addresses do not unpin."""
        if not lmcache_driven.is_pin_supported:
            pytest.skip(f"{type(lmcache_driven).__name__} does not support pinning")
        host = torch.empty(1 << 16, dtype=torch.uint8)
        start = host.data_ptr() + 3
        assert lmcache_driven.pin_memory(start, host.numel() - 5) is True
        assert lmcache_driven.unpin_memory(start) is True
        assert lmcache_driven.unpin_memory(start) is False
        assert lmcache_driven.unpin_memory(host.data_ptr() + 1) is False
