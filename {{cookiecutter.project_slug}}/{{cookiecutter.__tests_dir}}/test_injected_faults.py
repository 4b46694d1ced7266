# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Faults a device runtime really has, injected into the CPU emulator.

Out of memory on allocation, an IPC open that fails, host registration that
refuses a range, a device lost in the middle of a transfer: each must end in a
clear error naming the cause, within the suite's deadlines, and leave nothing
behind (no mapping, no registration, no stored bytes). Servers and workers take
the faults from their environment
(``{{ cookiecutter.__emulator_env_var }}_FAULTS``), this process from
``torch.{{ cookiecutter.__torch_module_name }}.inject_faults()``. Skipped, with the
reason, without the emulator.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
import ctypes
import mmap

# Third Party
from _support import held, run_python, seeded_kv
from conftest import open_mappings
from lmcache_device_kit.harness.engine import TIMED_OUT_MQ_TIMEOUT, Cluster, Worker
from lmcache_device_kit.harness.servers import CHUNK, plugin_server_env, running_server
from lmcache_device_kit.harness.worker_kv import token_ids
import pytest
import torch

# First Party
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache.v1.platform.kv_wrap import wrap_kv_caches

DEVICE = "{{ cookiecutter.device_name }}"
FAULTS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_FAULTS"
#: Per layer (2, blocks, block_size, heads, head_size): exportable (64 KiB and more).
SHAPE = (2, 32, 16, 2, 32)


@pytest.fixture
def inject(emulator) -> Iterator[Callable[..., None]]:  # type: ignore[no-untyped-def]
    """``inject("oom", ...)`` switches faults on in this process; all are off again
    after the test."""
    yield emulator.inject_faults
    emulator.inject_faults()


def test_out_of_memory_is_torchs_out_of_memory_error_and_small_allocations_still_work(
    inject,
) -> None:  # type: ignore[no-untyped-def]
    """An allocation the device cannot serve raises torch.OutOfMemoryError naming the
    device."""
    inject("oom")
    with pytest.raises(torch.OutOfMemoryError, match=f"{DEVICE}:0 is out of memory"):
        torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE)
    assert int(torch.ones(16, device=DEVICE).sum()) == 16


def test_a_cache_context_that_runs_out_of_memory_unmaps_the_workers_caches(
    lmcache_driven, inject
) -> None:  # type: ignore[no-untyped-def]
    """The server cannot allocate its staging buffer: the registration fails with the
    cause, nothing stays mapped."""
    wrappers = wrap_kv_caches(seeded_kv(SHAPE, 3, device=DEVICE))
    before = open_mappings()
    inject("oom")
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        create_cache_context(wrappers, CHUNK, {"kv_layout": "NHD"})
    assert open_mappings() == before


def test_a_failed_ipc_open_leaves_the_wrapper_reusable_and_the_mapping_counted_right(
    lmcache_driven, inject
) -> None:  # type: ignore[no-untyped-def]
    """to_tensor() raises the runtime's error and takes no reference: once the device
    recovers, the wrapper maps again, and closing it leaves another wrapper of the same
    allocation valid until that one closes."""
    source = seeded_kv(SHAPE, 4, device=DEVICE)["layer.0"]
    (first,) = wrap_kv_caches({"layer.0": source})
    (second,) = wrap_kv_caches({"layer.0": source})
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
    lmcache_driven, inject
) -> None:  # type: ignore[no-untyped-def]
    """With a runtime that wants page-aligned ranges, pin_memory says False for another
    and nothing is to unpin."""
    backend, page = (
        lmcache_driven,
        mmap.PAGESIZE,
    )  # the spec answers for its pin backend
    if not backend.is_pin_supported:
        pytest.skip(f"{DEVICE} does not pin host memory")
    buffer = mmap.mmap(-1, 4 * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    inject("host_register")
    assert backend.pin_memory(start + 1, page) is False
    assert backend.unpin_memory(start + 1) is False
    assert backend.pin_memory(start, 2 * page) is True
    assert backend.unpin_memory(start) is True


def test_a_cache_context_on_a_device_lost_mid_transfer_still_unmaps_the_workers_caches(  # type: ignore[no-untyped-def]
    lmcache_driven, emulator, inject
) -> None:
    """The device is lost while the server copies a worker's layer: the copy raises the
    runtime's error, and close() raises it too, but only after unmapping the worker's
    memory (a dead device must not pin a worker's KV)."""
    source = seeded_kv(SHAPE, 6, device=DEVICE)
    before = open_mappings()
    context = create_cache_context(wrap_kv_caches(source), CHUNK, {"kv_layout": "NHD"})
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


def test_an_event_recorded_on_a_lost_device_fails_its_importer_instead_of_hanging(  # type: ignore[no-untyped-def]
    lmcache_driven, emulator, inject
) -> None:
    """The device is lost in the copy queued before an exported event: that event never
    completes, so a second process that imports it and waits gets the runtime's error at
    once instead of waiting forever."""
    backend, device = lmcache_driven.event_ipc_backend, torch.device(DEVICE, 0)
    stream = emulator.current_stream(device)
    destination = torch.zeros(
        1 << 16, dtype=torch.float32, device=DEVICE
    )  # 256 KiB: a KV-sized copy
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
backend = get_device_spec("{DEVICE}").event_ipc_backend
device = torch.device("{DEVICE}", 0)
imported = backend.import_event(bytes.fromhex({handle.hex()!r}), device)
backend.synchronize_event(imported, device)
""",
        timeout=60,
    )
    assert done.returncode != 0 and "failed on its device" in done.stderr, done.stderr[
        -3000:
    ]


@pytest.mark.own_server
@pytest.mark.e2e
def test_a_device_lost_mid_store_commits_nothing_and_the_worker_fails_by_its_deadline(  # type: ignore[no-untyped-def]
    spec, tmp_path: Path
) -> None:
    """The server's device is lost while it copies the worker's first chunk: the
    worker's store fails at its deadline (no hang), no lookup ever hits (a half-copied
    chunk is never committed), and the server's log names the cause; the worker
    unregisters and exits cleanly, and the server no longer maps its memory."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    env = {**plugin_server_env(), FAULTS_ENV_VAR: "device_lost"}
    with running_server(
        tmp_path / "server.log", transfer_mode="lmcache_driven", env=env, wait_stop=True
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
            # The server's copy failed long before the worker's deadline: a commit
            # would show at the first lookups.
            _, hit = cluster.scheduler.lookup_until(
                "after-loss", token_ids(4 * CHUNK), CHUNK, timeout=0.5
            )
            assert hit == 0, "a chunk the lost device copied halfway was committed"
        finally:
            assert cluster.close() == [0]
        assert "fault injected: device_lost" in server.log(), server.log_tail()
    leaks = [line for line in server.log().splitlines() if "still open at exit" in line]
    assert not leaks, (
        f"the server kept the worker's memory mapped after it unregistered: {leaks}"
    )


@pytest.mark.own_server
@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["oom", "ipc_open"])
def test_a_server_whose_device_fails_names_why_and_the_worker_gives_up_at_its_deadline(  # type: ignore[no-untyped-def]
    spec, fault: str, tmp_path: Path
) -> None:
    """The server cannot allocate or map for a worker: its log names the cause and it
    stays healthy; the worker stores nothing and fails at its deadline (LMCache's server
    sends no error back, so the worker only times out)."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    env = {**plugin_server_env(), FAULTS_ENV_VAR: fault}
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
