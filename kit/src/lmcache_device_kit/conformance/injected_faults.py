# SPDX-License-Identifier: Apache-2.0
"""Faults a device runtime really has, injected into the CPU emulator.

Out of memory on allocation, an IPC open that fails, host registration that refuses
a range, a device lost in the middle of a transfer: each must end in a clear error
naming the cause, within the suite's deadlines, and leave nothing behind (no mapping,
no registration, no stored bytes). Servers and workers take the faults from their
environment (``<the backend's emulator env var>_FAULTS``), this process from
``torch.<device>.inject_faults()``. Skipped, with the reason, without the emulator.

Imports torch: import it from a project's tests only, after ``conftest.py`` set the
environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
import ctypes
import mmap

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.streams import held
from lmcache_device_kit.conformance.support import (
    open_mappings,
    run_python,
    seeded_kv,
)
from lmcache_device_kit.harness.engine import TIMED_OUT_MQ_TIMEOUT, Cluster, Worker
from lmcache_device_kit.harness.servers import CHUNK, plugin_server_env, running_server
from lmcache_device_kit.harness.worker_kv import token_ids

#: Per layer (2, blocks, block_size, heads, head_size): exportable (64 KiB and more).
SHAPE = (2, 32, 16, 2, 32)


def faults_env_var() -> str:
    """The variable the emulator of a server or worker reads its faults from."""
    return f"{kit_backend.current().emulator_env_var}_FAULTS"


def wrapped(kv: dict[str, torch.Tensor]) -> Any:
    """LMCache's IPC wrappers of ``kv``, as a worker hands them to the server."""
    # First Party
    from lmcache.v1.platform.kv_wrap import wrap_kv_caches

    return wrap_kv_caches(kv)


def new_cache_context(wrappers: Any) -> Any:
    """The server's cache context over ``wrappers`` (LMCache builds it so)."""
    # First Party
    from lmcache.v1.platform.cache_context import create_cache_context

    return create_cache_context(wrappers, CHUNK, {"kv_layout": "NHD"})


class BaseInjectedFaultsTests(ConformanceTests):
    """Faults of this process's device: allocation, IPC open, pinning, a lost
    device."""

    requires = frozenset({"emulator"})

    @pytest.fixture
    def inject(self, emulator: Any) -> Iterator[Callable[..., None]]:
        """``inject("oom", ...)`` switches faults on in this process; all are off
        again after the test."""
        yield emulator.inject_faults
        emulator.inject_faults()

    def test_out_of_memory_is_torchs_out_of_memory_error_and_small_allocations_still_work(  # noqa: E501
        self, inject: Callable[..., None]
    ) -> None:
        """An allocation the device cannot serve raises torch.OutOfMemoryError naming
        the device."""
        device = kit_backend.current().device_type
        inject("oom")
        with pytest.raises(
            torch.OutOfMemoryError, match=f"{device}:0 is out of memory"
        ):
            torch.empty(1 << 20, dtype=torch.uint8, device=device)
        assert int(torch.ones(16, device=device).sum()) == 16

    def test_a_cache_context_that_runs_out_of_memory_unmaps_the_workers_caches(
        self, lmcache_driven: Any, inject: Callable[..., None]
    ) -> None:
        """The server cannot allocate its staging buffer: the registration fails with
        the cause, nothing stays mapped."""
        device = kit_backend.current().device_type
        wrappers = wrapped(seeded_kv(SHAPE, 3, device=device))
        before = open_mappings()
        inject("oom")
        with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
            new_cache_context(wrappers)
        assert open_mappings() == before

    def test_a_failed_ipc_open_leaves_the_wrapper_reusable_and_the_mapping_counted_right(  # noqa: E501
        self, lmcache_driven: Any, inject: Callable[..., None]
    ) -> None:
        """to_tensor() raises the runtime's error and takes no reference: once the
        device recovers, the wrapper maps again, and closing it leaves another wrapper
        of the same allocation valid until that one closes."""
        device = kit_backend.current().device_type
        source = seeded_kv(SHAPE, 4, device=device)["layer.0"]
        (first,) = wrapped({"layer.0": source})
        (second,) = wrapped({"layer.0": source})
        before = open_mappings()
        inject("ipc_open")
        with pytest.raises(RuntimeError, match="fault injected: ipc_open"):
            first.to_tensor()
        assert open_mappings() == before
        inject()
        first.to_tensor()
        other = second.to_tensor()
        first.close()
        assert torch.equal(other.cpu(), source.cpu()), (
            "closing one wrapper unmapped the other's memory"
        )
        second.close()
        assert open_mappings() == before

    def test_a_range_the_runtime_refuses_to_pin_is_reported_and_left_unregistered(
        self, lmcache_driven: Any, inject: Callable[..., None]
    ) -> None:
        """With the runtime refusing registrations (its locked-memory limit reached),
        pin_memory says False and nothing is to unpin; once it accepts them, the same
        range pins."""
        # the spec answers for its pin backend
        backend, page = lmcache_driven, mmap.PAGESIZE
        if not backend.is_pin_supported:
            device = kit_backend.current().device_type
            pytest.skip(f"{device} does not pin host memory")
        buffer = mmap.mmap(-1, 4 * page)
        start = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        inject("host_register")
        assert backend.pin_memory(start + 1, page) is False
        assert backend.unpin_memory(start + 1) is False
        inject()
        assert backend.pin_memory(start + 1, page) is True
        assert backend.unpin_memory(start + 1) is True

    def test_a_cache_context_on_a_device_lost_mid_transfer_still_unmaps_the_workers_caches(  # noqa: E501
        self, lmcache_driven: Any, emulator: Any, inject: Callable[..., None]
    ) -> None:
        """The device is lost while the server copies a worker's layer: the copy
        raises the runtime's error, and close() raises it too, but only after
        unmapping the worker's memory (a dead device must not pin a worker's KV)."""
        source = seeded_kv(SHAPE, 6, device=kit_backend.current().device_type)
        before = open_mappings()
        context = new_cache_context(wrapped(source))
        inject("device_lost")
        with (
            emulator.stream(context.stream),
            pytest.raises(RuntimeError, match="injected: device_lost"),
        ):
            context.kv_tensors[0].cpu()
        with pytest.raises(RuntimeError, match="injected: device_lost"):
            context.close()
        assert open_mappings() == before, (
            "close() on a lost device left the worker's memory mapped"
        )
        context.close()  # closed once: nothing left to release, nothing raised

    def test_an_event_recorded_on_a_lost_device_fails_its_importer_instead_of_hanging(  # noqa: E501
        self, lmcache_driven: Any, emulator: Any, inject: Callable[..., None]
    ) -> None:
        """The device is lost in the copy queued before an exported event: that event
        never completes, so a second process that imports it and waits gets the
        runtime's error at once instead of waiting forever."""
        name = kit_backend.current().device_type
        backend, device = lmcache_driven.event_ipc_backend, torch.device(name, 0)
        stream = emulator.current_stream(device)
        # 256 KiB: a KV-sized copy
        destination = torch.zeros(1 << 16, dtype=torch.float32, device=name)
        inject("device_lost")
        with held(stream):
            destination.copy_(torch.ones(1 << 16), non_blocking=True)
            event = backend.create_event(device)
            backend.record_event(event, stream)
            handle = backend.export_event(event, device)
        done = run_python(
            f"""
import lmcache, torch
from lmcache.v1.platform import get_device_spec
backend = get_device_spec("{name}").event_ipc_backend
device = torch.device("{name}", 0)
imported = backend.import_event(bytes.fromhex({handle.hex()!r}), device)
backend.synchronize_event(imported, device)
""",
            timeout=60,
        )
        assert done.returncode != 0 and "failed on its device" in done.stderr, (
            done.stderr[-3000:]
        )


@pytest.mark.e2e
class BaseInjectedServerFaultsTests(ConformanceTests):
    """Faults of a server's device: lost mid-store, allocation and mapping
    refused."""

    requires = frozenset({"emulator", "lmcache_driven"})
    starts_servers = True

    @pytest.mark.own_server
    def test_a_device_lost_mid_store_commits_nothing_and_the_worker_fails_by_its_deadline(  # noqa: E501
        self, tmp_path: Path
    ) -> None:
        """The server's device is lost while it copies the worker's first chunk: the
        worker's store fails at its deadline (no hang), no lookup ever hits (a
        half-copied chunk is never committed), and the server's log names the cause;
        the worker unregisters and exits cleanly, and the server no longer maps its
        memory."""
        env = {**plugin_server_env(), faults_env_var(): "device_lost"}
        with running_server(
            tmp_path / "server.log",
            transfer_mode="lmcache_driven",
            env=env,
            wait_stop=True,
        ) as server:
            cluster = Cluster(
                server,
                tmp_path,
                model="fault-device-lost",
                world_size=1,
                tokens=4 * CHUNK,
                mode="lmcache_driven",
                worker_args=["--mq-timeout", TIMED_OUT_MQ_TIMEOUT],
            )
            try:
                (stored,) = cluster.stored
                deadline_ms = 1000 * float(TIMED_OUT_MQ_TIMEOUT)
                assert stored["ok"] is False, stored
                assert stored["elapsed_ms"] < deadline_ms + 3000, stored
                # The server's copy failed long before the worker's deadline: a
                # commit would show at the first lookups.
                _, hit = cluster.scheduler.lookup_until(
                    "after-loss", token_ids(4 * CHUNK), CHUNK, timeout=0.5
                )
                assert hit == 0, "a chunk the lost device copied halfway was committed"
            finally:
                assert cluster.close() == [0]
            assert "fault injected: device_lost" in server.log(), server.log_tail()
        leaks = [x for x in server.log().splitlines() if "still open at exit" in x]
        assert not leaks, (
            f"the server kept the worker's memory mapped after it unregistered: {leaks}"
        )

    @pytest.mark.own_server
    @pytest.mark.parametrize("fault", ["oom", "ipc_open"])
    def test_a_server_whose_device_fails_names_why_and_the_worker_gives_up_at_its_deadline(  # noqa: E501
        self, fault: str, tmp_path: Path
    ) -> None:
        """The server cannot allocate or map for a worker: its log names the cause and
        it stays healthy; the worker stores nothing and fails at its deadline
        (LMCache's server sends no error back, so the worker only times out)."""
        env = {**plugin_server_env(), faults_env_var(): fault}
        with running_server(
            tmp_path / "server.log", transfer_mode="lmcache_driven", env=env
        ) as server:
            worker = Worker(
                server.url,
                model=f"fault-{fault}",
                rank=0,
                world_size=1,
                tokens=4 * CHUNK,
                mode="lmcache_driven",
                log_path=tmp_path / "rank0.log",
                extra_args=["--mq-timeout", TIMED_OUT_MQ_TIMEOUT],
            )
            try:
                with pytest.raises(
                    AssertionError, match="did not respond to register_kv_caches"
                ):
                    worker.next_result(timeout=60)
            finally:
                worker.kill()
            assert f"fault injected: {fault}" in server.log(), server.log_tail()
            assert server.status()["is_healthy"] is True
