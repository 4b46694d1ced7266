# SPDX-License-Identifier: Apache-2.0
"""TCP ports for the suite's servers that no other test process on this host is handed.

Why it exists: a port found free by binding port 0 is free only until the socket
closes; the server binds it a second later, and in between another pytest-xdist
worker (or another test run on this host) could be handed the same number, and one
server then fails with "address already in use". So a port is handed out only
while this process holds an exclusive lock on a file named after it, kept until
the process exits, and only from below the kernel's ephemeral range, which the
outgoing connections of every process draw from. Imports nothing beyond the
standard library.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import fcntl
import os
import random
import socket
import tempfile

#: One lock file per port handed out, shared by every test run of this user.
LOCKS = Path(tempfile.gettempdir()) / f"lmcache-tests-ports-{os.getuid()}"
#: Ports below the ephemeral range are handed out from here up.
LOWEST = 10000
#: Where Linux says which ports outgoing connections are given.
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The locks this process holds: open until it exits.
_HELD: list[int] = []


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port(attempts: int = 1000) -> int:
    """A port on 127.0.0.1 that is free now and that no other process holding this
    module's lock for it is handed, for as long as this process lives."""
    LOCKS.mkdir(exist_ok=True)
    highest = max(LOWEST + 1000, _ephemeral_start() - 1)
    for _ in range(attempts):
        port = random.randint(LOWEST, highest)
        lock = os.open(LOCKS / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
        except OSError:  # another test process holds it, or something is bound to it
            os.close(lock)
            continue
        _HELD.append(lock)
        return port
    raise RuntimeError(
        f"no free port in {LOWEST}-{highest} after {attempts} tries: "
        f"is something holding the locks in {LOCKS}?"
    )
