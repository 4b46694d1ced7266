# SPDX-License-Identifier: Apache-2.0
"""Start the suite's Python programs from a warm interpreter: the same programs, less
CPU each.

Why it exists: a backend's suite starts dozens of Python processes (``lmcache
server``s, worker ranks, doctor runs, fresh registries), and most of each one's CPU
went to importing torch and LMCache's third-party dependencies again (about 2 s for
a worker, 4 s for a server, on two cores). A zygote process (``zygote.py``) imports
those once (``PRELOAD``) and forks a child per program; the child takes its own
argv, environment, working directory, ``sys.path`` and standard streams and runs
the program as ``python`` would (a script, ``-m module`` or ``-c code``), ending
through the interpreter's normal shutdown (atexit handlers run, exit status and
signals as for any process).

What a child does not get fresh: the modules in ``PRELOAD``, imported with the
suite's environment. So the zygote never imports lmcache, the plugin under test or
the device's torch extension (LMCache builds its plugin registry at ``import
lmcache``, from the child's own environment; torch's device-backend autoloading
runs in each child, with its environment, as ``import torch`` would), and a
program whose environment differs in anything but ``SAFE_TO_VARY`` runs as a
plain subprocess, as do calls with ``fresh=True`` (tests of what a fresh
interpreter imports) and every call when ``FRESH_ENV_VAR=1`` (a device runtime
that cannot be forked).

``popen()`` and ``run()`` mirror ``subprocess.Popen`` and ``subprocess.run``; a
forked program's handle is a ``ForkedProcess`` (``forked.py``, re-exported here);
``child_env()`` is the environment the suite gives them. This module must not
import lmcache, the plugin under test or torch.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any
import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

# First Party
from lmcache_device_kit.harness.forked import ForkedProcess

#: Third-party modules the suite's programs import, loaded once by the zygote (absent
#: ones are left out).
PRELOAD = (
    "torch",
    "numpy",
    "zmq",
    "msgspec",
    "transformers",
    "fastapi",
    "uvicorn",
    "aiohttp",
    "httpx",
    "prometheus_client",
    "google.cloud.bigtable.data",
    "numba",
)
#: Environment variables a forked program may set differently from the zygote (none is
#: read by ``PRELOAD``; pytest changes PYTEST_CURRENT_TEST for every test).
SAFE_TO_VARY = ("LMCACHE_", "DEVICE_TYPE", "PYTHONPATH", "PYTEST_")
#: Environment for every program the tests start, and for the zygote: no telemetry,
#: quiet banner, one torch thread (two cores make oversubscription swing timings 5-50x).
QUIET_ENV = {
    "LMCACHE_TRACK_USAGE": "false",
    "DO_NOT_TRACK": "1",
    "LMCACHE_DISABLE_BANNER": "1",
    "OMP_NUM_THREADS": "1",
}
#: The zygote imports ``PRELOAD`` without torch's device-backend autoloading, which
#: would load the device's extension (a vendor's, or the CPU emulator) with the zygote's
#: environment; each child runs it itself.
NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
#: Set to 1 to start every program as a plain subprocess.
FRESH_ENV_VAR = "LMCACHE_TESTS_FRESH_INTERPRETERS"
#: The zygote's module, run as ``python -m ZYGOTE DIRECTORY``.
ZYGOTE = "lmcache_device_kit.harness.zygote"


def child_env(overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """This process's environment with ``QUIET_ENV``, plus ``overrides``; a value of
    None removes the variable."""
    env = {**os.environ, **QUIET_ENV}
    for key, value in dict(overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def popen(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    start_new_session: bool = False,
    fresh: bool = False,
) -> Any:
    """``subprocess.Popen(argv, ...)``: forked from the zygote when it can be, else a
    plain subprocess.

    Streams are None (inherit), ``subprocess.PIPE`` (stdin/stdout), an open file,
    or ``subprocess.STDOUT`` (stderr)."""
    argv = [str(arg) for arg in argv]
    if fresh or not _forkable(argv, env):
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            text=text,
            start_new_session=start_new_session,
        )
    return _zygote().spawn(
        argv,
        dict(env),
        str(cwd or os.getcwd()),
        stdin,
        stdout,
        stderr,
        text,
        start_new_session,
    )


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    timeout: float,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=...)`` through
    ``popen``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            fresh=fresh,
        )
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        texts = []
        for stream in (out, err):
            stream.seek(0)
            texts.append(stream.read().decode(errors="replace"))
    return subprocess.CompletedProcess(argv, process.returncode, *texts)


def _forkable(argv: list[str], env: Mapping[str, str]) -> bool:
    if os.environ.get(FRESH_ENV_VAR) == "1" or not hasattr(os, "fork"):
        return False
    if not (argv[0] == sys.executable or _is_python_script(argv[0])):
        return False
    if argv[0] == sys.executable and (
        len(argv) < 2 or argv[1].startswith("-") and argv[1] not in ("-c", "-m")
    ):
        return False  # interpreter options (-X, -W, ...) need a fresh interpreter
    # what PRELOAD saw at import, whatever this process's environment is now
    zygote_env = _zygote().env
    changed = {
        key for key in {*env, *zygote_env} if env.get(key) != zygote_env.get(key)
    }
    return all(key.startswith(SAFE_TO_VARY) for key in changed)


def _is_python_script(path: str) -> bool:
    """A console script of this interpreter (``#!<sys.executable>``), such as
    ``lmcache``."""
    try:
        with open(path, "rb") as script:
            return script.readline().strip() == b"#!" + os.fsencode(sys.executable)
    except OSError:
        return False


class _Zygote:
    """The client side: starts the zygote (``python -m`` ``ZYGOTE``) and asks it for
    children."""

    def __init__(self) -> None:
        # its log; removed when it exits
        self.dir = tempfile.mkdtemp(prefix="lmcache-tests-zygote-")
        self.address = socket_address(self.dir)
        self.env = {**os.environ, **QUIET_ENV}
        # self.env: what the children's environments are compared with
        env = {**self.env, **NO_AUTOLOAD}
        with open(os.path.join(self.dir, "log"), "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE, self.dir],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                cwd=self.dir,
            )
        self._ready = threading.Event()
        self._lock = threading.Lock()

    def spawn(
        self, argv, env, cwd, stdin, stdout, stderr, text, new_session
    ) -> ForkedProcess:  # type: ignore[no-untyped-def]
        with self._lock:
            # the zygote says "ready" once its imports are done
            if not self._ready.is_set():
                assert self.process.stdout is not None
                if self.process.stdout.readline() != b"ready\n":
                    log = Path(self.dir, "log").read_text()
                    raise RuntimeError(f"the test zygote failed to start: {log}")
                self._ready.set()
        ends: list[IO[Any] | None] = [None, None]
        # the child's stdin, stdout, stderr; the descriptors this process opened for it
        theirs, ours = [], []
        for i, stream in enumerate((stdin, stdout)):
            if stream == subprocess.PIPE:
                read, write = os.pipe()
                mine, child = (write, read) if i == 0 else (read, write)
                mode = ("w" if i == 0 else "r") + ("" if text else "b")
                buffering = 1 if text and i == 0 else -1
                # the caller's to close
                ends[i] = open(mine, mode, buffering=buffering)  # noqa: SIM115
                theirs.append(child)
                ours.append(child)
            else:
                theirs.append(_fd(stream, i, ours))
        theirs.append(
            theirs[1] if stderr == subprocess.STDOUT else _fd(stderr, 2, ours)
        )
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.address)
        request = json.dumps(
            {"argv": argv, "env": env, "cwd": cwd, "new_session": new_session}
        ).encode()
        socket.send_fds(conn, [len(request).to_bytes(8, "big") + request], theirs)
        for fd in ours:
            os.close(fd)
        return ForkedProcess(argv, conn, ends[0], ends[1])

    def close(self) -> None:
        """EOF on its stdin: the zygote waits for its children (killing them after 60 s)
        and exits."""
        if self.process.stdin is not None:
            self.process.stdin.close()


def socket_address(directory: str) -> str:
    """The zygote's Unix socket: in Linux's abstract namespace (no file, and no 108-byte
    limit on the temporary directory's path), named after the zygote's directory."""
    return "\0" + os.path.basename(directory)


def _fd(stream: Any, standard: int, opened: list[int]) -> int:
    if stream is None:
        return standard
    if stream == subprocess.DEVNULL:
        opened.append(os.open(os.devnull, os.O_RDWR))
        return opened[-1]
    return stream if isinstance(stream, int) else stream.fileno()


_ZYGOTE: _Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote:
    """This process's zygote, started on first use (one per pytest-xdist worker)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None:
            _ZYGOTE = _Zygote()
            atexit.register(_ZYGOTE.close)
        return _ZYGOTE
