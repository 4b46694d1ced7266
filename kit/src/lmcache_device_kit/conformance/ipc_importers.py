# SPDX-License-Identifier: Apache-2.0
"""Who may open a worker's exported memory, and how memory without a legacy IPC
handle travels: the runtime rules the IPC wrapper meets beyond CUDA's.

Ascend opens a handle only in processes its exporter allowed
(``aclrtIpcMemSetImportPid``; the emulator's default, ``..._IPC=cuda`` drops it),
and memory from a VMM allocator (torch's expandable segments, vLLM's sleep mode;
the emulator with ``..._VMM=1``) has no legacy handle at all: it is shared as a
file descriptor, passed by the kernel (``SCM_RIGHTS``). LMCache's wire carries
neither who will import nor a descriptor, so the plugin's wrapper names where the
importer asks its exporter (``_ipc_rendezvous.py`` of a render).

Why not ``ipc_wrapper.py``: those tests hold the wrapper to CUDA's rules, on any
runtime; these run the emulator's other rules, in processes of their own.

Imports torch; lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import importlib
import os
import subprocess
import sys
import tempfile

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.harness.spawn import child_env


class BaseIPCImportersTests(ConformanceTests):
    """The importer allowlist, and VMM memory shared as a descriptor."""

    requires = frozenset({"lmcache_driven", "emulator"})

    def test_a_process_opens_exported_memory_only_once_its_exporter_allowed_it(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """With an importer allowlist (Ascend's ``aclrtIpcMemSetImportPid``; the
        emulator's default), a process opens another's handle only once the exporter
        allowed it, and is refused, naming the call, before (the wrapper's handles
        name where importers get allowed: the test above maps through them)."""
        if not hasattr(emulator, "ipc_allow_importer"):
            pytest.skip("the emulator runs without an importer allowlist (CUDA's)")
        backend = kit_backend.current()
        if os.environ.get(f"{backend.emulator_env_var}_VMM") == "1":
            pytest.skip("memory comes from a VMM allocator here: no legacy handles")
        module = kit_backend.current().torch_module_name
        exporter = f"""
import os, sys, torch
runtime = torch.{module}
memory = [torch.full((1 << 16,), 7, dtype=torch.uint8, device="{module}") for _ in "ab"]
handles = [runtime.ipc_export_handle(m.data_ptr())[0] for m in memory]
runtime.ipc_allow_importer(handles[1], os.getppid())
print(" ".join(h.hex() for h in handles), flush=True)
sys.stdin.read()
"""
        child = _exporting(exporter, {})
        try:
            assert child.stdout is not None
            refused, allowed = map(bytes.fromhex, child.stdout.readline().split())
            with pytest.raises(RuntimeError, match="aclrtIpcMemSetImportPid"):
                emulator.ipc_open_handle(refused, 1 << 16, 0)
            address = emulator.ipc_open_handle(allowed, 1 << 16, 0)
            ops = importlib.import_module(f"{kit_backend.current().package}.device_ops")
            on = torch.device(module, 0)
            mapped = ops.device_tensor(address, (1 << 16,), torch.uint8, on)
            assert int(mapped.sum()) == 7 << 16
            emulator.ipc_close_handle(address)
        finally:
            child.communicate("", timeout=60)

    def test_vmm_memory_is_shared_as_a_descriptor_as_legacy_ipc_cannot_export_it(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """Memory from a VMM allocator (torch's expandable segments, vLLM's sleep
        mode; the emulator with ``..._VMM=1``) has no legacy IPC handle: exporting one
        fails, naming the VMM route. The wrapper shares it as a file descriptor the
        importer fetches from the exporter (``SCM_RIGHTS``, as LMCache's
        ``VmmCudaIPCWrapper`` delivers it out of band), and writes through its view."""
        backend = kit_backend.current()
        exporter = f"""
import importlib, sys, lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper as codec
memory = torch.zeros(1 << 16, dtype=torch.uint8, device="{backend.device_type}")
try:
    torch.{backend.torch_module_name}.ipc_export_handle(memory.data_ptr())
except RuntimeError as error:
    print("legacy refused:", "ipc_export_fd" in str(error), flush=True)
module = importlib.import_module("{backend.package}.ipc_wrapper")
wrapper = getattr(module, "{lmcache_driven.ipc_wrapper_cls.__name__}")
print(codec.Serialize(wrapper.wrap(memory)).hex(), flush=True)
sys.stdin.readline()
print("written:", int(memory.sum().cpu()) == 5 << 16, flush=True)
"""
        child = _exporting(exporter, {f"{backend.emulator_env_var}_VMM": "1"})
        try:
            assert child.stdout is not None and child.stdin is not None
            refused = child.stdout.readline().strip()
            payload = bytes.fromhex(child.stdout.readline().strip())
            wrapper = _codec().Deserialize(payload)
            wrapper.to_tensor().fill_(5)
            emulator.synchronize()
            wrapper.close()
            said, _ = child.communicate("go\n", timeout=60)
        finally:
            child.kill()
        assert (refused, said.strip()) == ("legacy refused: True", "written: True")


def _exporting(code: str, env: dict[str, str | None]) -> subprocess.Popen[str]:
    """A fresh interpreter running ``code``, talking on its stdin and stdout."""
    return subprocess.Popen(
        [sys.executable, "-c", code], env=child_env(env), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tempfile.gettempdir(),
    )  # fmt: skip


def _codec() -> Any:
    """LMCache's ``DeviceIPCWrapper``: its Serialize/Deserialize are the wire codec."""
    # First Party
    from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper

    return DeviceIPCWrapper
