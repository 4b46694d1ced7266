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
from lmcache_device_kit.conformance.support import run_python
from lmcache_device_kit.harness.spawn import child_env

#: A process that maps a wrapper (its serialized form in ``argv[1]``) and fills it.
IMPORTER = """
import sys, lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
wrapper = DeviceIPCWrapper.Deserialize(bytes.fromhex(sys.argv[1]))
view = wrapper.to_tensor()
view.fill_(5)
view.cpu()
wrapper.close()
"""


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
        child = subprocess.Popen(
            [sys.executable, "-c", exporter], env=child_env({}), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tempfile.gettempdir(),
        )  # fmt: skip
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
        device, package = backend.device_type, backend.package
        done = run_python(
            f"""
import importlib, subprocess, sys, lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper as codec
memory = torch.zeros(1 << 16, dtype=torch.uint8, device="{device}")
try:
    torch.{backend.torch_module_name}.ipc_export_handle(memory.data_ptr())
except RuntimeError as error:
    print("legacy refused:", "ipc_export_fd" in str(error), flush=True)
module = importlib.import_module("{package}.ipc_wrapper")
wrapper = getattr(module, "{lmcache_driven.ipc_wrapper_cls.__name__}")
payload = codec.Serialize(wrapper.wrap(memory)).hex()
done = subprocess.run([sys.executable, "-c", {IMPORTER!r}, payload], text=True,
                      capture_output=True)
print(done.returncode, done.stderr[-2000:], flush=True)
print("written:", int(memory.sum().cpu()) == 5 << 16)
""",
            env={f"{backend.emulator_env_var}_VMM": "1"},
            fresh=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.strip().splitlines()
        assert lines[0] == "legacy refused: True", done.stdout
        assert lines[-1] == "written: True", done.stdout[-3000:]
