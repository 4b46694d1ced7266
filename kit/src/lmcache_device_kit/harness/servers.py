# SPDX-License-Identifier: Apache-2.0
"""Real ``lmcache server`` processes for the end-to-end tests, on free 127.0.0.1 ports.

Why it is shaped this way: a server costs seconds of CPU to start (about 2 s
forked from the suite's zygote, ``spawn.py``; 6 s from a new interpreter) and
seconds to stop, so the suite shares them. ``SharedServers`` keeps one server per
kind (``SERVER_KINDS``); a suite's ``server`` fixture hands it out, runs every test
of one kind on the same pytest-xdist worker, one after another, and stops the
server as soon as the next test does not use it (it shuts down while the tests go
on, not at the end of the run). Tests keep their state apart with their own model
names and request ids. Tests that break a server (freeze, kill, restart or fill
it, or speak the wrong transfer mode to it) start their own with
``running_server`` and are marked ``own_server``.

Nothing here fakes LMCache: servers run the installed ``lmcache`` (and, for the
LMCache-driven kinds, the installed plugin: ``backend.current()``'s). Importing it
imports neither lmcache nor torch and needs no backend yet.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

# First Party
from lmcache_device_kit import backend
from lmcache_device_kit.harness import spawn, surface
from lmcache_device_kit.harness.forked import stop
from lmcache_device_kit.harness.ports import free_port

#: Tokens per LMCache chunk on every server the suite starts.
CHUNK = 64


def plugin_server_env() -> dict[str, str | None]:
    """What a server needs to run the plugin under test (its cache context, event
    backend and ops): its backend, and its CPU emulator when it has one (on unless
    the suite's environment turned it off)."""
    names = backend.current()
    env: dict[str, str | None] = {"LMCACHE_DEVICE_BACKEND": names.backend_name}
    if names.has_emulator:
        env[names.emulator_env_var] = os.environ.get(names.emulator_env_var, "1")
    return env


#: The servers the suite shares, by kind: transfer mode, an SHM pool, and whether it
#: runs the plugin (the LMCache-driven kinds, which only make sense when the spec
#: offers LMCache-driven transfer).
SERVER_KINDS: dict[str, dict[str, Any]] = {
    "engine-pickle": {"transfer_mode": "engine_driven"},
    "engine-shm": {"transfer_mode": "engine_driven", "shm": True},
    # Its L1 is pinned by the lazy allocator's background thread, as a server's whose L1
    # exceeds --l1-init-size-gb (20 GB by default) is: pinning from a thread of its own.
    "lmcache-driven": {
        "transfer_mode": "lmcache_driven",
        "plugin": True,
        "extra_args": ("--l1-init-size-gb", "0"),
    },
    "auto": {"transfer_mode": "auto", "plugin": True},
}
#: LMCache names a server's SHM pool ``lmcache_l1_pool_<--shm-name>``; the suite's pools
#: start so.
SHM_POOL_PREFIX = "lmcache_l1_pool_e2e_"


def declared_server_flags() -> set[str]:
    """The ``lmcache server`` flags the harness declares (``doctor --api`` checks
    each on the installed release)."""
    return set(surface.SERVER_FLAGS)


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def new_shm_entries(before: set[str]) -> list[str]:
    """/dev/shm entries created since ``before``, except the SHM pools of the suite's
    own servers."""
    return sorted(
        name for name in shm_entries() - before if not name.startswith(SHM_POOL_PREFIX)
    )


#: Servers asked to stop and not yet reaped: waited for (killed if need be) when this
#: process exits.
_STOPPING: list[Any] = []


@atexit.register
def _reap_stopped_servers(grace: float = 30) -> None:
    deadline = time.monotonic() + grace
    for process in _STOPPING:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class LMCacheServer:
    """A real ``lmcache server`` on 127.0.0.1, started and stopped by PID."""

    def __init__(
        self,
        log_path: Path,
        transfer_mode: str,
        shm_name: str | None = None,
        chunk_size: int = CHUNK,
        env: Mapping[str, str | None] | None = None,
        l1_size_gb: float = 0.25,
        port: int | None = None,
        lazy_l1: bool = True,
        extra_args: Sequence[str] = (),
        l2_adapters: Sequence[Mapping[str, Any]] = (),  # --l2-adapter JSON objects
    ):
        # a given port: restart a server where workers expect it
        self.port = port or free_port()
        self.http_port = free_port()
        self.log_path = log_path
        self.transfer_mode = transfer_mode
        self.shm_name = shm_name
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.argv = [
            str(Path(sys.executable).with_name("lmcache")),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(self.http_port),
            "--l1-size-gb",
            str(l1_size_gb),
            "--eviction-policy",
            "LRU",
            "--chunk-size",
            str(chunk_size),
            "--max-workers",
            "2",
            "--supported-transfer-mode",
            transfer_mode,
        ]
        if shm_name:
            # The SHM pool needs a non-lazy L1; LMCache keeps L1 lazy (and silently
            # serves engine-driven workers by pickle) when the device can pin memory.
            self.argv += ["--shm-name", shm_name]
        if shm_name or not lazy_l1:
            self.argv += ["--no-l1-use-lazy"]
        for adapter in l2_adapters:  # repeatable: one flag per adapter, in order
            self.argv += ["--l2-adapter", json.dumps(dict(adapter))]
        self.argv += extra_args
        # Every flag is declared, so doctor --api checks it against each release.
        flags = [arg for arg in self.argv if arg.startswith("--")]
        undeclared = sorted(set(flags) - declared_server_flags())
        assert not undeclared, (
            f"declare {undeclared} in {surface.__name__}.SERVER_FLAGS"
        )
        self.env = spawn.child_env(env)
        self.process: Any = None  # subprocess.Popen or spawn.ForkedProcess

    def start(self, ready_timeout: float = 90) -> None:
        """Start the server and poll its health check until it answers."""
        with self.log_path.open("wb") as log:
            self.process = spawn.popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"lmcache server exited with {self.process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.http_port}/healthcheck", timeout=1
                ) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError(
            f"lmcache server not healthy within {ready_timeout}s:\n{self.log_tail()}"
        )

    def stop(self, wait: bool = True, grace: float = 30) -> None:
        """SIGINT by PID; with ``wait``, SIGKILL if it is still alive after ``grace``
        seconds.

        Without ``wait`` the server shuts down while the tests go on, and this
        process reaps it when it exits.
        """
        if wait:
            stop(self.process, signal.SIGINT, grace)
        elif self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            _STOPPING.append(self.process)

    def log(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def status(self) -> dict:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.http_port}/status", timeout=5
        ) as reply:
            return json.loads(reply.read())

    def l1_status(self) -> dict:
        """The default L1 manager's counters (``/status`` nests them differently per
        release)."""
        storage = self.status()["storage_manager"]
        if "l1_managers" in storage:  # lmcache 0.5.6: one entry per named L1 manager
            return storage["l1_managers"]["_default"]
        return storage["l1_manager"]  # lmcache 0.5.4, 0.5.5


#: Whether the running test is marked ``own_server`` (a suite's conftest.py sets it
#: before each test; None outside pytest).
OWN_SERVER_MARKED: bool | None = None


@contextmanager
def running_server(
    log_path: Path, *, wait_stop: bool = False, **kwargs: Any
) -> Iterator[LMCacheServer]:
    """A server of the caller's own, asked to stop when the block ends (waiting for it
    with ``wait_stop``). Only tests marked ``own_server`` start one: they take the
    longest, and the suite hands them out first."""
    assert OWN_SERVER_MARKED is not False, (
        "this test starts a server of its own: mark it @pytest.mark.own_server "
        "(the suite schedules such tests first, so they do not end the run late)"
    )
    server = LMCacheServer(log_path, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop(wait=wait_stop)


class SharedServers:
    """One server per kind of ``SERVER_KINDS``, started on first use and stopped when
    the tests that use it are done (a suite's ``server`` fixture)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.running: dict[str, LMCacheServer] = {}

    def get(self, kind: str) -> LMCacheServer:
        if kind not in self.running:
            options = SERVER_KINDS[kind]
            device = backend.current().device_type
            server = LMCacheServer(
                self.log_dir / f"{kind}.log",
                transfer_mode=options["transfer_mode"],
                shm_name=f"e2e_{device}_{os.getpid()}" if options.get("shm") else None,
                env=plugin_server_env() if options.get("plugin") else {},
                extra_args=options.get("extra_args", ()),
            )
            server.start()
            self.running[kind] = server
        return self.running[kind]

    def stop(self, kind: str) -> None:
        """Ask a kind's server to stop, without waiting (a later ``get`` starts a new
        one): it shuts down while the tests go on."""
        if kind in self.running:
            self.running.pop(kind).stop(wait=False)

    def stop_all(self) -> None:
        for kind in list(self.running):
            self.stop(kind)
