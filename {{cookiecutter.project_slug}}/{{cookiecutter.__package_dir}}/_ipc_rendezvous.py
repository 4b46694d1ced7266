# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""What an importer of this process's IPC memory needs besides a handle, from the
exporter itself: to be allowed, or the memory's file descriptor. The exporter
listens on a local socket, learns each importer's pid from the kernel
(``SO_PEERCRED``), and allows it or passes the descriptor (``SCM_RIGHTS``).

Why: LMCache's wire carries bytes, and a worker exports its KV caches before it
knows the server's process (a restarted server is another). Some runtimes open a
handle only in processes its exporter allowed (Ascend's ``aclrtIpcMemSetImportPid``),
and memory from a VMM allocator (torch's expandable segments) has no legacy handle:
it is shared as a descriptor, which means nothing in another process until the
kernel passes it (LMCache's ``VmmCudaIPCWrapper`` delivers it out of band too). So
the handle the IPC wrapper sends names this socket (an abstract Unix socket:
nothing on disk, this host only), and the importer asks there (``map_wire``).

Imports ``runtime``; ``ipc_wrapper`` imports it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
import os
import secrets
import socket
import struct
import threading

# Local
from .runtime import (
    allow_importer,
    export_shareable,
    importers_must_be_allowed,
    memory_is_vmm,
    open_shareable,
)

#: Abstract socket names (a leading NUL: no file) of this device's exporters.
_PREFIX = b"\0lmcache-{{ cookiecutter.device_name }}-ipc-"
#: SO_PEERCRED's ``struct ucred``: pid, uid, gid.
_CREDENTIALS = struct.Struct("3i")
_REQUEST = struct.Struct("<cI")  # kind (b"A": allow me, b"F": your descriptor), length
_served: dict[str, bytes | int] = {}
_lock = threading.Lock()
#: What importers may ask for: a handle's device (allow), an export id's descriptor.
_handles: dict[bytes, int] = {}
_descriptors: dict[bytes, int] = {}


def export(
    address: int, device: int, legacy: Callable[[int, int], tuple[bytes, int, int]]
) -> tuple[bytes, int, int]:
    """``(wire handle, offset, size)`` of the allocation holding ``address``: the
    runtime's handle (``legacy``), prefixed with where importers get allowed when the
    runtime needs it; for VMM memory, an export id whose descriptor they fetch here."""
    if memory_is_vmm(address):
        fd, offset, size = export_shareable(address, device)
        key = struct.pack("<qq", address - offset, size)  # the allocation, here
        with _lock:
            if key in _descriptors:
                os.close(fd)
            else:
                _descriptors[key] = fd
        return _wire(b"F", serve(), key), offset, size
    handle, offset, size = legacy(address, device)
    if not importers_must_be_allowed():
        return _wire(b"H", b"", handle), offset, size
    _handles[handle] = device
    return _wire(b"H", serve(), handle), offset, size


def _wire(kind: bytes, address: bytes, key: bytes) -> bytes:
    return kind + bytes([len(address)]) + address + key


def map_wire(
    wire: bytes, nbytes: int, device: int, legacy: Callable[[bytes, int, int], int]
) -> int:
    """Map the allocation ``wire`` names in this process: its device address here."""
    kind, end = wire[:1], 2 + wire[1]
    address, key = wire[2:end], wire[end:]
    if kind == b"F":
        fd = _ask(address, b"F", key)
        try:
            return open_shareable(fd, nbytes, device)
        finally:
            os.close(fd)
    if address:
        _ask(address, b"A", key)
    return legacy(key, nbytes, device)


def serve() -> bytes:
    """The address importers of this process's memory ask at: a listener started
    on first use (once per process: a fork's child starts its own)."""
    with _lock:
        if _served.get("pid") != os.getpid():
            address = _PREFIX + f"{os.getpid()}-{secrets.token_hex(4)}".encode()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            listener.listen(64)
            name = "lmcache-ipc-importers"
            thread = threading.Thread(
                target=_answer, args=(listener,), daemon=True, name=name
            )
            thread.start()
            _served.update(pid=os.getpid(), address=address)
        return _served["address"]  # type: ignore[return-value]


def _answer(listener: socket.socket) -> None:
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                credentials = connection.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size
                )
                pid = _CREDENTIALS.unpack(credentials)[0]
                kind, length = _REQUEST.unpack(_exactly(connection, _REQUEST.size))
                key = _exactly(connection, length)
                if kind == b"F":
                    socket.send_fds(connection, [b"ok"], [_descriptors[key]])
                    continue
                allow_importer(key, pid, _handles[key])
                connection.sendall(b"ok")
            except Exception as exc:  # noqa: BLE001 - the importer reports it
                connection.sendall(f"{type(exc).__name__}: {exc}".encode()[:4096])


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the importer hung up mid-request")
        data += chunk
    return data


def _ask(address: bytes, kind: bytes, key: bytes, timeout: float = 10.0) -> int:
    """Ask the exporter at ``address`` to allow this process (``A``) or for the
    descriptor of ``key`` (``F``: returned, owned by the caller); raises with the
    exporter's reason."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        try:
            connection.connect(address)
        except OSError as exc:
            raise RuntimeError(
                f"the process that exported this memory does not answer ({exc}): "
                "it exited, or its memory was exported on another host"
            ) from exc
        connection.sendall(_REQUEST.pack(kind, len(key)) + key)
        reply, fds, _, _ = socket.recv_fds(connection, 4096, 1)
    if reply != b"ok" or (kind == b"F") != bool(fds):
        for fd in fds:
            os.close(fd)
        raise RuntimeError(
            f"the exporting process did not let this process ({os.getpid()}) open "
            f"its memory: {reply.decode(errors='replace') or 'no answer'}"
        )
    return fds[0] if fds else -1
