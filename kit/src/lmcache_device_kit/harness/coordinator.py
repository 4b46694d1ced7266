# SPDX-License-Identifier: Apache-2.0
"""A real ``lmcache coordinator`` on a free 127.0.0.1 port, and the flags that put
an ``lmcache server`` on it with P2P: nodes that move KV to each other's L1.

Why it exists: LMCache's P2P (``--p2p-*``, 0.5.6) finds peers through the
coordinator only. Each server registers there (its ``/instances``), polls it
every heartbeat and adds a ``p2p`` L2 adapter per peer it lists; a lookup then
asks every peer, and a hit is read from the peer's L1 by the transfer channel
(``nixl`` or ``mooncake_te``) into its own L1. The channel registers the host L1
buffer only (``lmcache/v1/distributed/transfer_channel/impl/nixl_impl.py``: "CPU/
DRAM"), so the device plugin takes no part in it.

Traps it avoids (found on 0.5.6): a server advertises its outbound IP unless told
``--coordinator-advertise-ip``, and on loopback every peer lookup then times out
as a miss; an L1 whose size is not a multiple of 4 KiB makes nixl's page list
overrun the registered region (the server exits at start, ``NIXL_ERR_NOT_FOUND``).

Imports nothing beyond the standard library and the kit's harness; never lmcache,
torch or a transfer engine (its servers are processes of their own).
"""

# Future
from __future__ import annotations

# Standard
from importlib.util import find_spec
from pathlib import Path
import json
import signal
import subprocess
import sys
import time
import urllib.request

# First Party
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.forked import stop
from lmcache_device_kit.harness.ports import free_port
from lmcache_device_kit.harness.servers import LMCacheServer

#: The transfer engines the kit runs P2P with: LMCache's ``--p2p-transfer-engine``
#: name -> the modules LMCache imports it from (any one will do), and what
#: installs it. nixl's wheels bundle UCX, run on CPU memory with no GPU, and need
#: nothing from the distribution; mooncake's non-CUDA wheel needs libibverbs.so.1
#: (``apt-get install libibverbs1``), so the kit's ``p2p`` extra takes nixl.
ENGINES: dict[str, tuple[tuple[str, ...], str]] = {
    "nixl": (
        ("nixl", "nixl_cu12", "nixl_cu13"),  # lmcache's nixl_impl.py tries these
        "pip install 'lmcache-device-kit[p2p]' (or your project's p2p extra: "
        "pip install '<your plugin>[p2p]'; it pins nixl-cu12)",
    ),
}
#: Seconds between a server's heartbeats, and so between its peer polls: a
#: server lists a peer at most this long after both registered.
HEARTBEAT_S = 1.0
#: Seconds before a peer that does not answer a lookup counts as a miss.
LOOKUP_TIMEOUT_S = 5.0


def missing_engine(engine: str) -> str | None:
    """Why P2P with ``engine`` cannot run here (what to install), or None."""
    modules, install = ENGINES[engine]
    if any(find_spec(module) is not None for module in modules):
        return None
    return f"P2P transfer engine {engine!r} not installed (no {modules}): {install}"


class Coordinator:
    """One ``lmcache coordinator`` process on 127.0.0.1, started and stopped by PID."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [
            str(Path(sys.executable).with_name("lmcache")),
            "coordinator",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-metrics",
        ]
        self.process: subprocess.Popen | None = None

    def server_args(self, engine: str = "nixl") -> tuple[str, ...]:
        """An ``lmcache server``'s flags for P2P through this coordinator with
        ``engine``: its own channel port, advertised (and registered) on loopback."""
        return (
            "--coordinator-url",
            self.url,
            "--coordinator-advertise-ip",
            "127.0.0.1",
            "--coordinator-heartbeat-interval",
            str(HEARTBEAT_S),
            "--p2p-advertise-url",
            f"127.0.0.1:{free_port()}",
            "--p2p-transfer-engine",
            engine,
            "--p2p-lookup-timeout",
            str(LOOKUP_TIMEOUT_S),
        )

    def instances(self) -> list[dict]:
        """The servers registered now (its ``GET /instances``)."""
        with urllib.request.urlopen(f"{self.url}/instances", timeout=5) as reply:
            return list(json.loads(reply.read())["instances"])

    def start(self, ready_timeout: float = 60) -> None:
        """Start it and poll ``/healthz`` until it answers."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=spawn.child_env(),
                start_new_session=True,
            )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"lmcache coordinator exited with {self.process.returncode}:\n"
                    f"{self.log_path.read_text(errors='replace')[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"lmcache coordinator not healthy within {ready_timeout}s")

    def stop(self, grace: float = 15) -> None:
        """SIGINT by PID (SIGKILL after ``grace`` seconds)."""
        stop(self.process, signal.SIGINT, grace)

    def __enter__(self) -> Coordinator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def p2p_peers(server: LMCacheServer) -> int:
    """How many peers ``server``'s P2P controller holds an adapter for (its
    ``/status``, wherever the release nests it); -1 where P2P is off."""
    pending = [server.status()]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if "p2p_peer_count" in item and item.get("p2p_enabled"):
                return int(item["p2p_peer_count"])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return -1


def wait_for_peers(pair: list[LMCacheServer], timeout: float = 30) -> None:
    """Until each server lists the other as its peer (one poll of the coordinator
    after both registered), so a miss on B is a miss A answered."""
    deadline = time.monotonic() + timeout
    while [p2p_peers(server) for server in pair] != [1, 1]:
        if time.monotonic() > deadline:
            counts = [p2p_peers(server) for server in pair]
            raise AssertionError(
                f"servers' P2P peers {counts} after {timeout}s, want [1, 1]:\n"
                + "\n".join(server.log_tail() for server in pair)
            )
        time.sleep(0.2)
