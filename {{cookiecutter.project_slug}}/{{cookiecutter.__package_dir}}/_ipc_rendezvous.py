# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Where an importer of this process's IPC memory has itself allowed: the
exporter listens on a local socket, learns each importer's pid from the kernel
(``SO_PEERCRED``) and allows it before the importer opens the handle.

Why: some runtimes open an IPC handle only in processes its exporter allowed
(Ascend's ``aclrtIpcMemSetImportPid``), but LMCache's wire carries a handle, not
who will open it: a worker exports its KV caches before it knows the server's
process, and a restarted server is another. So the handle the IPC wrapper sends
names this socket (an abstract Unix socket: nothing on disk, this host only), and
the importer asks there first (``ask``), once per allocation it maps.

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
from .runtime import allow_importer, importers_must_be_allowed

#: Abstract socket names (a leading NUL: no file) of this device's exporters.
_PREFIX = b"\0lmcache-{{ cookiecutter.device_name }}-ipc-"
#: SO_PEERCRED's ``struct ucred``: pid, uid, gid.
_CREDENTIALS = struct.Struct("3i")
_LENGTH = struct.Struct("<I")
_served: dict[str, object] = {}
_lock = threading.Lock()
#: The handles this process exported, with their device: what importers may ask for.
_exported: dict[bytes, int] = {}


def named(handle: bytes, device: int) -> bytes:
    """``handle`` (of device ``device``'s memory) as the wire carries it: prefixed
    with where importers ask, where the runtime allows importers one by one."""
    address = b""
    if importers_must_be_allowed():
        _exported[handle] = device
        address = serve(lambda asked, pid: allow_importer(asked, pid, _exported[asked]))
    return bytes([len(address)]) + address + handle


def opened(wire_handle: bytes) -> bytes:
    """The runtime's handle in ``wire_handle``, this process allowed to open it."""
    end = 1 + wire_handle[0]
    address, handle = wire_handle[1:end], wire_handle[end:]
    if address:
        ask(address, handle)
    return handle


def serve(allow: Callable[[bytes, int], None]) -> bytes:
    """The address importers of this process's memory ask at: a listener started
    on first use (once per process: a fork's child starts its own), which calls
    ``allow(handle, importer_pid)`` for each request."""
    with _lock:
        if _served.get("pid") != os.getpid():
            address = _PREFIX + f"{os.getpid()}-{secrets.token_hex(4)}".encode()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(address)
            listener.listen(64)
            name = "lmcache-ipc-importers"
            thread = threading.Thread(
                target=_answer, args=(listener, allow), daemon=True, name=name
            )
            thread.start()
            _served.update(pid=os.getpid(), address=address)
        return _served["address"]  # type: ignore[return-value]


def _answer(listener: socket.socket, allow: Callable[[bytes, int], None]) -> None:
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                credentials = connection.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size
                )
                pid = _CREDENTIALS.unpack(credentials)[0]
                (length,) = _LENGTH.unpack(_exactly(connection, _LENGTH.size))
                allow(_exactly(connection, length), pid)
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


def ask(address: bytes, handle: bytes, timeout: float = 10.0) -> None:
    """Have the exporter listening at ``address`` allow this process to open
    ``handle``; raises with the exporter's reason if it does not."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(timeout)
        try:
            connection.connect(address)
        except OSError as exc:
            raise RuntimeError(
                f"the process that exported this memory does not answer ({exc}): "
                "it exited, or its memory was exported on another host"
            ) from exc
        connection.sendall(_LENGTH.pack(len(handle)) + handle)
        reply = connection.recv(4096)
    if reply != b"ok":
        raise RuntimeError(
            f"the exporting process did not allow this process ({os.getpid()}) to "
            f"open its memory: {reply.decode(errors='replace') or 'no answer'}"
        )
