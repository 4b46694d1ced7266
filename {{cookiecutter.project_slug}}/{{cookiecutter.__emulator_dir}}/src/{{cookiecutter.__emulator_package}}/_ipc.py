# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""IPC memory of the emulated ``torch.{{ cookiecutter.__torch_module_name }}``
(the work is in ``csrc/ipc.cpp``).

Why it exists: LMCache-driven transfer maps a worker's KV caches into the server
through IPC memory handles. As on a device: one mapping per (process,
allocation), one close unmaps it for every user, and, by default as on Ascend
(``aclrtIpcMemSetImportPid``), a process opens another's handle only once the
exporter has allowed it (``ipc_allow_importer``); ``..._IPC=cuda`` drops that rule
(CUDA: any process may open a handle), ``..._IPC=0`` every IPC member (not ported).

Must not import the rest of the emulator: ``_device`` binds the compiled
extension here (``bind``) once it is loaded.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import struct

# Local
from ._streams import device_index

_ext: Any = None
#: (exporting pid, memfd number, the memory's identity, the allowlist's memfd)
_MEMORY_HANDLE = struct.Struct("<qqqq")
#: The IPC models (``..._IPC``): "" (Ascend's allowlist), ``cuda``, ``0`` (none).
MODELS = ("", "cuda", "0")


def bind(ext: Any) -> None:
    global _ext
    _ext = ext


def members(model: str, vmm: bool = False) -> dict[str, Any]:
    """The IPC members ``model`` gives ``torch.<device>``; ``vmm``: device memory is
    allocated through the VMM API (as with torch's expandable segments), which legacy
    IPC cannot export: ``ipc_export_fd`` shares it as a file descriptor."""
    if model not in MODELS:
        raise ValueError(
            f"{{ cookiecutter.__emulator_env_var }}_IPC={model!r}: set it to "
            "cuda, 0 or nothing (Ascend's importer allowlist)"
        )
    _ext.require_ipc_allowlist(model == "")
    _ext.allocate_through_vmm(vmm)
    if model == "0":
        return {}
    calls = [ipc_export_handle, ipc_open_handle, ipc_close_handle]
    calls += [ipc_memory_is_vmm, ipc_export_fd, ipc_open_fd]
    calls += [ipc_allow_importer] if model == "" else []
    return {call.__name__: call for call in calls}


def ipc_export_handle(ptr: int) -> tuple[bytes, int, int]:
    """``(handle, offset, size)`` of the exportable allocation holding device address
    ``ptr``.

    The handle stays valid while the exporting process keeps the memory
    allocated, like a CUDA IPC memory handle.
    """
    pid, fd, identity, offset, size, allowlist = _ext.ipc_export(ptr)
    return _MEMORY_HANDLE.pack(pid, fd, identity, allowlist), int(offset), int(size)


def _unpack(handle: bytes) -> tuple[int, int, int, int]:
    if not isinstance(handle, bytes | bytearray) or len(handle) != _MEMORY_HANDLE.size:
        raise ValueError(f"not an emulated IPC memory handle: {handle!r}")
    return _MEMORY_HANDLE.unpack(handle)  # type: ignore[return-value]


def ipc_allow_importer(handle: bytes, pid: int) -> None:
    """Let process ``pid`` open ``handle``, one of this process's exports
    (``aclrtIpcMemSetImportPid``)."""
    exporter, fd, identity, _ = _unpack(handle)
    _ext.ipc_allow(exporter, fd, identity, int(pid))


def ipc_open_handle(handle: bytes, size: int, device: Any = None) -> int:
    """Map an exported allocation of ``size`` bytes into this process: its device
    address here.

    As with ``cudaIpcOpenMemHandle``: one mapping per (process, allocation),
    so opening a handle again returns the same address; the mapping stays
    until ``ipc_close_handle`` and one close unmaps it for every user.
    """
    pid, fd, identity, allowlist = _unpack(handle)
    return int(_ext.ipc_open(pid, fd, identity, size, device_index(device), allowlist))


def ipc_memory_is_vmm(ptr: int) -> bool:
    """Whether the allocation at ``ptr`` came through the VMM API (legacy IPC cannot
    export it; CUDA: ``cuMemRetainAllocationHandle`` succeeds)."""
    return bool(_ext.memory_is_vmm(ptr))


def ipc_export_fd(ptr: int) -> tuple[int, int, int]:
    """``(fd, offset, size)``: a descriptor of its own for the allocation holding
    ``ptr`` (``cuMemExportToShareableHandle``), sent over a Unix socket
    (``SCM_RIGHTS``), then closed by the caller."""
    fd, offset, size = _ext.ipc_export_fd(ptr)
    return int(fd), int(offset), int(size)


def ipc_open_fd(fd: int, size: int, device: Any = None) -> int:
    """Map the allocation behind descriptor ``fd`` (received from its exporter;
    ``cuMemImportFromShareableHandle`` and ``cuMemMap``): its device address here,
    closed as an opened handle is (``ipc_close_handle``)."""
    return int(_ext.ipc_open_fd(fd, size, device_index(device)))


def ipc_close_handle(address: int) -> None:
    """Unmap an opened allocation for every user in this process
    (``cudaIpcCloseMemHandle``)."""
    _ext.ipc_close(address)
