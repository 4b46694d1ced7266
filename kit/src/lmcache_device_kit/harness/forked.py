# SPDX-License-Identifier: Apache-2.0
"""The suite's handle on a program the zygote forked: what ``subprocess.Popen`` gives.

Why it exists: ``spawn.py`` would pass 300 lines with it; ``spawn`` re-exports
``ForkedProcess``, which its ``popen()`` returns for a forked program. ``stop`` ends
any of the suite's programs (a forked one or a ``subprocess.Popen``). Like
``spawn``, it must not import lmcache, the plugin under test or torch, and it must
not import ``spawn`` (which imports it).
"""

# Future
from __future__ import annotations

# Standard
from typing import IO, Any
import os
import signal
import socket
import subprocess


class ForkedProcess:
    """The parts of ``subprocess.Popen`` the suite uses, for a program the zygote
    forked.

    The zygote is the program's parent: it reports the exit status on this
    program's own connection. Signals go to the PID directly."""

    def __init__(
        self,
        args: list[str],
        conn: socket.socket,
        stdin: IO[Any] | None,
        stdout: IO[Any] | None,
    ) -> None:
        self.args, self._conn = args, conn
        self.stdin, self.stdout, self.stderr = stdin, stdout, None
        self.returncode: int | None = None
        self._received = b""  # kept across a timeout: a line may arrive in pieces
        self.pid = int(self._line(None))

    def _line(self, timeout: float | None) -> str:
        self._conn.settimeout(timeout)
        while b"\n" not in self._received:
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(
                    f"the test zygote went away while running {self.args}"
                )
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return line.decode()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = int(self._line(timeout))
            except (TimeoutError, BlockingIOError):
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self._conn.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass  # reaped by the zygote before it reported the status: as Popen

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def stop(process: Any, sig: int, grace: float) -> None:
    """Send a running program ``sig`` by PID and wait ``grace`` seconds for it to end,
    then SIGKILL it; a program that has ended (or never started) is left alone."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
