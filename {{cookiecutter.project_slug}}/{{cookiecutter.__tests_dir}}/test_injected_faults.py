# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Faults a device runtime really has, injected into the CPU emulator.

Out of memory on allocation, an IPC open that fails, host registration that
refuses a range: each must end in a clear error naming the cause, within the
suite's deadlines, and leave nothing behind (no mapping, no registration, no
stored bytes). Servers and workers take the faults from their environment
(``{{ cookiecutter.__emulator_env_var }}_FAULTS``), this process from
``torch.{{ cookiecutter.__torch_module_name }}.inject_faults()``. Skipped, with the reason, without the emulator.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from _engine import Worker
from _servers import CHUNK, PLUGIN_SERVER_ENV, running_server
from _support import seeded_kv
from conftest import open_mappings
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache.v1.platform.kv_wrap import wrap_kv_caches

DEVICE = "{{ cookiecutter.device_name }}"
FAULTS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_FAULTS"
#: Per layer (2, blocks, block_size, heads, head_size): exportable (64 KiB and more).
SHAPE = (2, 32, 16, 2, 32)


@pytest.fixture
def inject() -> Iterator[Callable[..., None]]:
    """``inject("oom", ...)`` switches faults on in this process; all are off again after the test."""
    runtime = getattr(torch, "{{ cookiecutter.__torch_module_name }}", None)
    if not hasattr(runtime, "inject_faults"):
        pytest.skip("fault injection needs the CPU emulator")
    yield runtime.inject_faults
    runtime.inject_faults()


def test_out_of_memory_is_torchs_out_of_memory_error_and_small_allocations_still_work(inject) -> None:  # type: ignore[no-untyped-def]
    """An allocation the device cannot serve raises torch.OutOfMemoryError naming the device."""
    inject("oom")
    with pytest.raises(torch.OutOfMemoryError, match=f"{DEVICE}:0 is out of memory"):
        torch.empty(1 << 20, dtype=torch.uint8, device=DEVICE)
    assert int(torch.ones(16, device=DEVICE).sum()) == 16


def test_a_cache_context_that_runs_out_of_memory_unmaps_the_workers_caches(lmcache_driven, inject) -> None:  # type: ignore[no-untyped-def]
    """The server cannot allocate its staging buffer: the registration fails with the cause, nothing stays mapped."""
    wrappers = wrap_kv_caches(seeded_kv(SHAPE, 3, device=DEVICE))
    before = open_mappings()
    inject("oom")
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        create_cache_context(wrappers, CHUNK, {"kv_layout": "NHD"})
    assert open_mappings() == before


def test_a_failed_ipc_open_leaves_the_wrapper_reusable_and_the_mapping_counted_right(lmcache_driven, inject) -> None:  # type: ignore[no-untyped-def]
    """to_tensor() raises the runtime's error and takes no reference: once the device recovers, the wrapper maps
    again, and closing it leaves another wrapper of the same allocation valid until that one closes."""
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
    assert torch.equal(other.cpu(), source.cpu()), "closing one wrapper unmapped the other's memory"
    second.close()
    assert open_mappings() == before


def test_a_range_the_runtime_refuses_to_pin_is_reported_and_left_unregistered(lmcache_driven, inject) -> None:  # type: ignore[no-untyped-def]
    """With a runtime that wants page-aligned ranges, pin_memory says False for another and nothing is to unpin."""
    backend, page = lmcache_driven, mmap.PAGESIZE  # the spec answers for its pin backend
    if not backend.is_pin_supported:
        pytest.skip(f"{DEVICE} does not pin host memory")
    buffer = mmap.mmap(-1, 4 * page)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    inject("host_register")
    assert backend.pin_memory(start + 1, page) is False
    assert backend.unpin_memory(start + 1) is False
    assert backend.pin_memory(start, 2 * page) is True
    assert backend.unpin_memory(start) is True


@pytest.mark.e2e
@pytest.mark.parametrize("fault", ["oom", "ipc_open"])
def test_a_server_whose_device_fails_names_the_cause_and_the_worker_gives_up_at_its_deadline(  # type: ignore[no-untyped-def]
    spec, fault: str, tmp_path: Path
) -> None:
    """The server cannot allocate or map for a worker: its log names the cause and it stays healthy; the worker
    stores nothing and fails at its deadline (LMCache's server sends no error back, so the worker only times out)."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    env = {**PLUGIN_SERVER_ENV, FAULTS_ENV_VAR: fault}
    with running_server(tmp_path / "server.log", transfer_mode="lmcache_driven", env=env) as server:
        worker = Worker(
            server.url,
            model=f"fault-{fault}",
            rank=0,
            world_size=1,
            tokens=4 * CHUNK,
            mode="lmcache_driven",
            log_path=tmp_path / "rank0.log",
            extra_args=["--mq-timeout", "5"],
        )
        try:
            with pytest.raises(AssertionError, match="did not respond to register_kv_caches"):
                worker.next_result(timeout=60)
        finally:
            worker.kill()
        assert f"fault injected: {fault}" in server.log(), server.log_tail()
        assert server.status()["is_healthy"] is True
