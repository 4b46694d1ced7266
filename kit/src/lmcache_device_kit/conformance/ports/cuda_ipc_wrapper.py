# SPDX-License-Identifier: Apache-2.0
"""LMCache's CUDA IPC-wrapper tests, ported to this plugin's wrapper.

Source: LMCache 0.5.6 tests/v1/platform/devices/cuda/test_cuda_ipc_wrapper.py. CUDA
has two wrappers (torch's storage sharing and a raw ``cudaIpc*`` one) chosen by an
isolated-IPC switch; the plugin has one, which every case here uses.

Departures (each also in README.md beside this module):
- The isolated-IPC switch (test_spec_selects_*, the switch in
  test_factory_dispatch_follows_switch) is CUDA's: kept is that LMCache's factory
  returns this plugin's wrapper at call time.
- ``_alloc_offset`` and ``_nbytes`` (the raw wrapper's view bytes): the plugin keeps
  the allocation's offset and the view's storage offset apart; their sum is asserted,
  and the view's bytes through ``to_tensor()``.
- test_raw_wrapper_rejects_unpermutable_noncontiguous: inverted. The raw wrapper
  rebuilds flat bytes, so it must refuse a strided slice; the plugin keeps strides,
  so it must rebuild the slice element for element.
- test_close_refcounts_shared_allocation: the exporter is this process (the device
  maps its own handle as another process's); the cross-process case is the round
  trip below.
- test_close_releases_dead_exporters_memory: ``mem_get_info`` becomes the
  emulator's count of open mappings (emulator only); 1 MiB instead of 2 GiB.
- The fake close-recording wrapper becomes the plugin's wrapper with ``close``
  logged; the malformed layer is 32 Ki elements (exportable) instead of 7.
- Child processes are forked from the suite (``run_python``, the kit's
  ``spawn.popen``), not ``multiprocessing`` spawn children.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import subprocess
import sys
import tempfile
import threading

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform import resolve_kv_wrapper_factory
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    runtime_name,
)
from lmcache_device_kit.conformance.support import open_mappings, run_python
from lmcache_device_kit.harness.spawn import child_env, popen

EXPORTER = """
import sys, lmcache, torch
from lmcache.v1.platform import get_device_spec
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
cls = get_device_spec("{device}").ipc_wrapper_cls
pool = torch.zeros((1 << 20) // 4, device="{device}", dtype=torch.float32)
pool[1024:2048].copy_(torch.arange(1024, dtype=torch.float32))
for view in (pool[1024:2048], pool[4096:8192]):
    print(DeviceIPCWrapper.Serialize(cls.wrap(view)).hex(), flush=True)
sys.stdin.readline()  # exit once the parent has mapped both
"""


def kv_layers(count: int) -> list[torch.Tensor]:
    """vLLM-format layers: [2, num_blocks, block_size, heads, head_size]."""
    return [
        torch.randn(2, 64, 16, 4, 32, device=device_type(), dtype=torch.float16)
        for _ in range(count)
    ]


def logged_closes(cls, monkeypatch) -> list[object]:
    closed: list[object] = []
    real = cls.close

    def close(self) -> None:
        closed.append(self)
        real(self)

    monkeypatch.setattr(cls, "close", close)
    return closed


class BaseCudaIpcWrapperTests(PortTests):
    """LMCache's cuda/test_cuda_ipc_wrapper.py against the plugin's IPC wrapper."""

    def test_factory_dispatch_returns_the_plugins_wrapper(
        self, lmcache_driven: Any
    ) -> None:
        tensor = torch.arange(1 << 14, device=device_type(), dtype=torch.float32)
        wrapper = resolve_kv_wrapper_factory(device_type())(tensor)
        assert type(wrapper) is lmcache_driven.ipc_wrapper_cls

    def test_an_interior_view_wraps_the_same_allocation_at_its_offset(
        self, lmcache_driven: Any
    ) -> None:
        base = torch.arange(1 << 16, device=device_type(), dtype=torch.float32)
        interior = base[4096:8192]
        cls = lmcache_driven.ipc_wrapper_cls

        base_wrapper, interior_wrapper = cls.wrap(base), cls.wrap(interior)

        assert interior_wrapper.handle == base_wrapper.handle

        def offset(wrapper) -> int:
            itemsize = wrapper.dtype.itemsize
            return int(
                wrapper.planes[0].alloc_offset + wrapper.storage_offset * itemsize
            )

        delta = offset(interior_wrapper) - offset(base_wrapper)
        assert delta == 4096 * base.element_size()

    def test_a_wrapper_constructs_on_a_fresh_thread(self, lmcache_driven: Any) -> None:
        """The MP heartbeat re-registers the KV caches from its own thread after a
        server restart: a fresh thread has no current device context."""
        base = torch.arange(1 << 14, device=device_type(), dtype=torch.float32)
        view = base[256:512]
        result: dict[str, object] = {}

        def construct() -> None:
            try:
                result["wrapper"] = lmcache_driven.ipc_wrapper_cls.wrap(view)
            except Exception as exc:  # report, don't raise across the thread
                result["error"] = exc

        thread = threading.Thread(target=construct)
        thread.start()
        thread.join()

        assert "error" not in result, result.get("error")
        wrapper = result["wrapper"]
        assert isinstance(wrapper, lmcache_driven.ipc_wrapper_cls)
        assert wrapper.shape == (256,)
        mapped = wrapper.to_tensor()
        assert mapped.nbytes == 256 * 4 and torch.equal(mapped.cpu(), view.cpu())
        wrapper.close()

    def test_a_strided_slice_is_rebuilt_element_for_element(
        self, lmcache_driven: Any
    ) -> None:
        base = torch.arange(1 << 14, device=device_type(), dtype=torch.float32)
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(base[::2])
        assert torch.equal(wrapper.to_tensor().cpu(), base[::2].cpu())
        wrapper.close()

    def test_close_refcounts_a_shared_allocation(self, lmcache_driven: Any) -> None:
        """Closing one of two wrappers sharing an allocation keeps the other's tensor
        valid; after the last close a fresh import works."""
        pool = torch.zeros((1 << 20) // 4, device=device_type(), dtype=torch.float32)
        pool[1024:2048].copy_(torch.arange(1024, dtype=torch.float32))
        pool[4096:8192].copy_(torch.arange(4096, dtype=torch.float32))
        cls = lmcache_driven.ipc_wrapper_cls
        wrapper_a = DeviceIPCWrapper.Deserialize(
            DeviceIPCWrapper.Serialize(cls.wrap(pool[1024:2048]))
        )
        wrapper_b = DeviceIPCWrapper.Deserialize(
            DeviceIPCWrapper.Serialize(cls.wrap(pool[4096:8192]))
        )

        tensor_a, tensor_b = wrapper_a.to_tensor(), wrapper_b.to_tensor()
        assert tensor_a[100].item() == 100.0

        wrapper_a.close()
        wrapper_a.close()  # idempotent
        assert tensor_b[4095].item() == 4095.0  # the shared mapping still serves b

        wrapper_b.close()
        reopened = wrapper_b.to_tensor()  # a fresh import after the last close
        assert reopened[1].item() == 1.0
        wrapper_b.close()

    def test_close_releases_a_dead_exporters_memory(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """A dead exporter's pool stays mapped while this process holds the mapping and
        is returned by close()."""
        before = open_mappings()
        child = popen(
            [sys.executable, "-c", EXPORTER.format(device=device_type())],
            env=child_env(),
            cwd=tempfile.gettempdir(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        wrappers = [
            DeviceIPCWrapper.Deserialize(bytes.fromhex(child.stdout.readline()))
            for _ in range(2)
        ]
        tensor_a = wrappers[0].to_tensor()  # import while the exporter is alive
        wrappers[1].to_tensor()
        child.stdin.write("exit\n")
        child.stdin.close()
        assert child.wait(timeout=60) == 0

        assert tensor_a[100].item() == 100.0  # resident after the exporter's exit
        assert open_mappings() == before + 1
        for wrapper in wrappers:
            wrapper.close()
        assert open_mappings() == before, "close() kept the dead exporter's pool mapped"

    def test_cache_context_close_closes_every_wrapper(
        self, lmcache_driven: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The hook the server's _release_entries teardown relies on."""
        cls = lmcache_driven.ipc_wrapper_cls
        source = kv_layers(2)
        wrappers = [cls.wrap(layer) for layer in source]
        closed = logged_closes(cls, monkeypatch)
        context = create_cache_context(wrappers, 256)
        assert closed == []
        context.close()
        assert {id(w) for w in closed} == {id(w) for w in wrappers}

    def test_cache_context_init_failure_closes_the_wrappers(
        self, lmcache_driven: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A registration that fails part way closes the wrappers it imported instead of
        pinning the worker's pool."""
        cls = lmcache_driven.ipc_wrapper_cls
        source = [
            *kv_layers(1),
            torch.randn(1 << 15, device=device_type(), dtype=torch.float16),
        ]
        wrappers = [cls.wrap(layer) for layer in source]  # the last: not a KV shape
        closed = logged_closes(cls, monkeypatch)
        with pytest.raises((ValueError, RuntimeError, IndexError)):
            lmcache_driven.create_cache_context(wrappers, 256)
        assert {id(w) for w in closed} == {id(w) for w in wrappers}

    def test_a_consumer_process_reads_and_writes_an_interior_view(
        self, lmcache_driven: Any
    ) -> None:
        """The consumer sees the producer's exact bytes for an interior view, and its
        writes land in the producer's memory, neighbours untouched."""
        pool = torch.zeros(1 << 16, device=device_type(), dtype=torch.float32)
        view = pool[4096 : 4096 + 2048].reshape(64, 32)
        view.copy_(torch.arange(view.numel(), dtype=torch.float32).reshape(view.shape))
        payload = DeviceIPCWrapper.Serialize(lmcache_driven.ipc_wrapper_cls.wrap(view))

        done = run_python(
            f"""
import lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
wrapper = DeviceIPCWrapper.Deserialize(bytes.fromhex("{payload.hex()}"))
tensor = wrapper.to_tensor()
expected = torch.arange(tensor.numel(), dtype=tensor.dtype).reshape(tensor.shape)
print(bool(torch.equal(tensor.cpu(), expected)))
tensor.fill_(-1.0)
torch.{runtime_name()}.synchronize()
wrapper.close()
"""
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == "True"  # the consumer saw the exact pattern
        assert bool((view == -1.0).all().item())  # the consumer wrote back
        assert bool((pool[:4096] == 0).all().item())
        assert bool((pool[4096 + 2048 :] == 0).all().item())
