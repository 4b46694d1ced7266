# SPDX-License-Identifier: Apache-2.0
"""A serving engine's processes, without vLLM: worker ranks and LMCache's scheduler
adapter.

Why it exists: the end-to-end tests drive a real ``lmcache server`` the way
vLLM's ``LMCacheMPConnector`` does. Each worker rank is a ``worker.py`` process
using LMCache's ``LMCacheMPWorkerAdapter`` on the backend under test's device;
lookups go through ``LMCacheMPSchedulerAdapter`` (``Scheduler``, in
``scheduler.py``, re-exported here). A rank costs about a second of CPU to start
(forked from the suite's zygote, ``spawn.py``), so ``Cluster`` keeps a model's
ranks and scheduler alive across a module's tests. Imports lmcache only inside
``Scheduler``; the ranks find the backend as every process of the run does.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
import json
import queue
import signal
import subprocess
import sys
import threading
import time

# First Party
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.scheduler import Scheduler
from lmcache_device_kit.harness.servers import CHUNK, LMCacheServer

#: The worker rank's module, run as ``python -m WORKER``.
WORKER = "lmcache_device_kit.harness.worker"
#: Short LMCache timeouts for fault tests: every failure must surface within seconds.
MQ_TIMEOUT = "5"
#: Shorter still where the failure can only surface as a timeout.
TIMED_OUT_MQ_TIMEOUT = "2"


class Worker:
    """One ``worker.py`` rank in its own process (see its docstring for the
    protocol)."""

    def __init__(
        self,
        server_url: str,
        *,
        model: str,
        rank: int,
        world_size: int,
        tokens: int,
        log_path: Path,
        mode: str = "engine_driven",
        env: Mapping[str, str | None] | None = None,
        extra_args: Sequence[str] = (),
    ):
        argv = [
            sys.executable,
            "-m",
            WORKER,
            "--url",
            server_url,
            "--model",
            model,
            "--mode",
            mode,
            "--rank",
            str(rank),
            "--world-size",
            str(world_size),
            "--tokens",
            str(tokens),
            *extra_args,
        ]
        self.log_path = log_path
        # ``-m`` puts the working directory first on sys.path: the log's, where no
        # source tree can shadow the installed lmcache or plugin
        with log_path.open("w") as log:
            self.process = spawn.popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=spawn.child_env(env),
                cwd=log_path.parent,
            )
        self._results: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self._results.put(json.loads(line))
        self._results.put(None)  # EOF: the worker exited

    def next_result(self, timeout: float = 60) -> dict:
        """The worker's next JSON line; fails with its log if it dies or stalls."""
        try:
            result = self._results.get(timeout=timeout)
        except queue.Empty:
            result = None
            # stalled: dump its stacks into the log first
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGUSR1)
                time.sleep(1)
            self.process.kill()
        if result is None:
            raise AssertionError(
                f"worker gave no result (exit {self.process.poll()}):\n"
                f"{self.log()[-4000:]}"
            )
        result["log"] = self.log()
        return result

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def retrieve(self, request_id: str, first_token: int | None = None) -> None:
        """Retrieve the prompt starting at ``first_token`` (default: the first one
        stored)."""
        self._send(
            f"retrieve {request_id}"
            + ("" if first_token is None else f" {first_token}")
        )

    def store(self, first_token: int, tokens: int | None = None) -> None:
        """Store the prompt starting at ``first_token`` (``tokens`` long, default the
        worker's ``--tokens``)."""
        self._send(f"store {first_token}" + ("" if tokens is None else f" {tokens}"))

    def begin_close(self) -> None:
        """Close stdin: the worker unregisters from its server and exits."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()

    def close(self, timeout: float = 60) -> int:
        """Close stdin and return the worker's exit code (killed after ``timeout``
        seconds)."""
        self.begin_close()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def kill(self) -> None:
        """SIGKILL: for a worker whose server is gone (a clean exit would wait for it to
        unregister)."""
        self.begin_close()
        self.process.kill()
        self.process.wait(timeout=30)


def start_worker(
    server: LMCacheServer, tmp_path: Path, name: str, mq_timeout: str = MQ_TIMEOUT
) -> Worker:
    """A fault test's registered worker rank (model ``fault-<name>``) that stored its
    first 2-chunk prompt."""
    worker = Worker(
        server.url,
        model=f"fault-{name}",
        rank=0,
        world_size=1,
        tokens=2 * CHUNK,
        log_path=tmp_path / f"{name}-worker.log",
        extra_args=["--mq-timeout", mq_timeout, "--layers", "2"],
    )
    first = worker.next_result()
    assert first["phase"] == "store" and first["ok"], (
        first.get("error") or first["log"][-3000:]
    )
    assert worker.next_result()["phase"] == "ready"
    return worker


def close_all(ranks: Iterable[Worker], timeout: float = 60) -> list[int]:
    """Close every rank at once (each waits on its server to unregister) and return
    their exit codes."""
    ranks = list(ranks)
    for worker in ranks:
        worker.begin_close()
    return [worker.close(timeout) for worker in ranks]


def start_ranks(
    server_url: str,
    log_dir: Path,
    *,
    model: str,
    world_size: int,
    tokens: int,
    mode: str,
    extra_args: Sequence[str] = (),
) -> list[Worker]:
    """``world_size`` ranks of ``model``, each in its own process, logging to
    ``<log_dir>/<model>-rank<N>.log``."""

    def start(rank: int) -> Worker:
        log_path = log_dir / f"{model}-rank{rank}.log"
        return Worker(
            server_url,
            model=model,
            rank=rank,
            world_size=world_size,
            tokens=tokens,
            mode=mode,
            log_path=log_path,
            extra_args=extra_args,
        )

    return [start(rank) for rank in range(world_size)]


@contextmanager
def workers(
    server_url: str,
    log_dir: Path,
    *,
    model: str,
    world_size: int,
    tokens: int,
    mode: str = "engine_driven",
) -> Iterator[list[Worker]]:
    """``world_size`` worker ranks, each in its own process, always stopped
    afterwards."""
    started = start_ranks(
        server_url,
        log_dir,
        model=model,
        world_size=world_size,
        tokens=tokens,
        mode=mode,
    )
    try:
        yield started
    finally:
        close_all(started)


class Cluster:
    """A serving engine's processes for one model: ``world_size`` worker ranks and the
    scheduler.

    Each rank registers its KV caches and stores the model's first prompt at
    start (``stored``). Kept alive across a module's tests; ``close`` returns the
    ranks' exit codes.
    """

    def __init__(
        self,
        server: LMCacheServer,
        log_dir: Path,
        *,
        model: str,
        world_size: int,
        tokens: int,
        mode: str = "engine_driven",
        layout: str = "flash",
        worker_args: Sequence[str] = (),
    ) -> None:
        """``worker_args``: more ``worker.py`` options for every rank."""
        self.server, self.model, self.world_size = server, model, world_size
        argv = ["--layout", layout, *worker_args]
        self.ranks = start_ranks(
            server.url,
            log_dir,
            model=model,
            world_size=world_size,
            tokens=tokens,
            mode=mode,
            extra_args=argv,
        )
        self.scheduler = Scheduler(server.url, model, world_size, mla=layout == "mla")
        self.stored = [worker.next_result() for worker in self.ranks]
        self.ready = [worker.next_result()["phase"] for worker in self.ranks]

    def retrieve(self, request_id: str) -> list[dict]:
        """Every rank retrieves the first prompt under the lookup ``request_id``; their
        results."""
        for worker in self.ranks:
            worker.retrieve(request_id)
        return [worker.next_result() for worker in self.ranks]

    def close(self) -> list[int]:
        self.scheduler.close()
        return close_all(self.ranks)
