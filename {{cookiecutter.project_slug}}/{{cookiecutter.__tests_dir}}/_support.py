# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Helpers for the conformance tests: fresh interpreters, a real LMCache server, lookups.

Nothing here fakes LMCache: subprocesses import the installed ``lmcache`` and
this installed plugin, and ``LMCacheServer`` runs the real ``lmcache server``.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "e2e_worker.py"

#: Environment for every LMCache process the tests start: no telemetry, quiet
#: banner, one torch thread (two cores make oversubscription swing timings 5-50x).
QUIET_ENV = {
    "LMCACHE_TRACK_USAGE": "false",
    "DO_NOT_TRACK": "1",
    "LMCACHE_DISABLE_BANNER": "1",
    "OMP_NUM_THREADS": "1",
}


def child_env(overrides: Mapping[str, str | None] = ()) -> dict[str, str]:
    """This process's environment plus ``overrides``; a value of None removes the variable."""
    env = {**os.environ, **QUIET_ENV}
    for key, value in dict(overrides).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(code: str, env: Mapping[str, str | None] = (), timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (LMCache caches its registry per process)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE.parent.parent,  # outside the source tree's src/ on sys.path
    )


#: Paged KV geometry shared by the op-level tests: block size, blocks, heads, head size, layers.
BS, NB, NH, HS, LAYERS = 16, 12, 2, 32, 3
#: Flat block ids of three two-block chunks, out of order.
BLOCK_IDS = [5, 1, 3, 7, 10, 0]
#: Per-layer KV shapes for the formats LMCache detects, with the hints vLLM passes.
KV_LAYOUTS: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {
    "flash_nhd": ((2, NB, BS, NH, HS), {"kv_layout": "NHD"}),
    "flash_hnd": ((2, NB, NH, BS, HS), {"kv_layout": "HND"}),
    "flashinfer_nhd": ((NB, 2, BS, NH, HS), {"kv_layout": "NHD"}),
    "mla": ((NB, BS, HS), {"kv_layout": "NHD"}),
}


def seeded_kv(
    shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float16, layers: int = LAYERS, device: str = "cpu"
) -> dict[str, torch.Tensor]:
    """Per-layer KV tensors of random values, a pure function of the arguments."""
    generator = torch.Generator().manual_seed(seed)
    return {f"layer.{i}": torch.randn(shape, generator=generator).to(dtype).to(device) for i in range(layers)}


def same_bytes(a: Any, b: Any) -> bool:
    """Two tensors (any devices) have equal shapes and identical bytes."""
    as_bytes = [t.cpu().contiguous().view(torch.uint8) for t in (a, b)]
    return bool(a.shape == b.shape and torch.equal(*as_bytes))


def last_json_line(text: str) -> dict:
    """The last line of ``text`` that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result line in output:\n{text[-3000:]}")


#: (path, phase, rank, ms, world size) per E2E transfer; conftest prints them after the run.
TRANSFER_TIMES: list[tuple[str, str, int, float, int]] = []


def check_round_trip(label: str, stored: list[dict], retrieved: list[dict], world_size: int) -> None:
    """Every rank got its bytes back intact; keep the measured times for the summary."""
    assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [(True, True)] * world_size
    for result in stored + retrieved:
        TRANSFER_TIMES.append((label, result["phase"], result["rank"], result["elapsed_ms"], world_size))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LMCacheServer:
    """A real ``lmcache server`` on 127.0.0.1, started and stopped by PID."""

    def __init__(
        self,
        log_path: Path,
        transfer_mode: str,
        shm_name: str | None,
        chunk_size: int,
        env: Mapping[str, str | None] = (),
        l1_size_gb: float = 0.25,
        port: int | None = None,
        lazy_l1: bool = True,
    ):
        self.port = port or free_port()  # a given port: restart a server where workers expect it
        self.http_port = free_port()
        self.log_path = log_path
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.argv = [
            str(Path(sys.executable).with_name("lmcache")),
            "server",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
            "--l1-size-gb", str(l1_size_gb), "--eviction-policy", "LRU",
            "--chunk-size", str(chunk_size),
            "--max-workers", "2",
            "--supported-transfer-mode", transfer_mode,
        ]  # fmt: skip
        if shm_name:
            # The SHM pool needs a non-lazy L1; LMCache keeps L1 lazy (and silently
            # serves engine-driven workers by pickle) when the device can pin memory.
            self.argv += ["--shm-name", shm_name]
        if shm_name or not lazy_l1:
            self.argv += ["--no-l1-use-lazy"]
        self.env = child_env(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout: float = 90) -> None:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"lmcache server exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthcheck", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise AssertionError(f"lmcache server not healthy within {ready_timeout}s:\n{self.log_tail()}")

    def stop(self, grace: float = 30) -> None:
        """SIGINT by PID, then SIGKILL if it is still alive after ``grace`` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/status", timeout=5) as reply:
            return json.loads(reply.read())

    def l1_status(self) -> dict:
        """The default L1 manager's counters (``/status`` nests them differently per release)."""
        storage = self.status()["storage_manager"]
        if "l1_managers" in storage:  # lmcache 0.5.6: one entry per named L1 manager
            return storage["l1_managers"]["_default"]
        return storage["l1_manager"]  # lmcache 0.5.4, 0.5.5


@contextmanager
def running_server(log_path: Path, **kwargs: object) -> Iterator[LMCacheServer]:
    server = LMCacheServer(log_path, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Worker:
    """One ``e2e_worker.py`` rank in its own process (see its docstring for the protocol)."""

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
        env: Mapping[str, str | None] = (),
        extra_args: Sequence[str] = (),
    ):
        argv = [
            sys.executable, str(WORKER), "--url", server_url, "--model", model, "--mode", mode,
            "--rank", str(rank), "--world-size", str(world_size), "--tokens", str(tokens), *extra_args,
        ]  # fmt: skip
        self.log_path = log_path
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_path.open("w"),
            text=True, env=child_env(env), cwd=HERE.parent.parent,
        )  # fmt: skip
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
            if self.process.poll() is None:  # stalled: dump its stacks into the log first
                self.process.send_signal(signal.SIGUSR1)
                time.sleep(1)
            self.process.kill()
        if result is None:
            raise AssertionError(f"worker gave no result (exit {self.process.poll()}):\n{self.log()[-4000:]}")
        result["log"] = self.log()
        return result

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def retrieve(self, request_id: str, first_token: int | None = None) -> None:
        """Retrieve the prompt starting at ``first_token`` (default: the first one stored)."""
        self._send(f"retrieve {request_id}" + ("" if first_token is None else f" {first_token}"))

    def store(self, first_token: int) -> None:
        """Store the same KV bytes again under the prompt starting at ``first_token``."""
        self._send(f"store {first_token}")

    def close(self, timeout: float = 60) -> int:
        """Close stdin (the worker unregisters and exits) and return its exit code."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@contextmanager
def workers(
    server_url: str, log_dir: Path, *, model: str, world_size: int, tokens: int, mode: str = "engine_driven"
) -> Iterator[list[Worker]]:
    """``world_size`` worker ranks, each in its own process, always stopped afterwards."""
    started = [
        Worker(
            server_url,
            model=model,
            rank=rank,
            world_size=world_size,
            tokens=tokens,
            log_path=log_dir / f"rank{rank}.log",
            mode=mode,
        )
        for rank in range(world_size)
    ]
    try:
        yield started
    finally:
        for worker in started:
            worker.close()


class Scheduler:
    """LMCache's scheduler-side adapter (what vLLM's connector uses) for lookups."""

    def __init__(self, server_url: str, model: str, world_size: int, block_size: int, mq_timeout: float = 20.0):
        import zmq
        from lmcache.integration.vllm.vllm_multi_process_adapter import (
            LMCacheMPSchedulerAdapter,
            ParallelStrategy,
        )

        strategy = ParallelStrategy(
            mla_only=False, vllm_world_size=world_size, vllm_worker_id=0, tp_size=world_size, pp_size=1, n_servers=1
        )
        self.adapter = LMCacheMPSchedulerAdapter(
            [server_url],
            zmq.Context.instance(),
            model,
            block_size,
            strategy,
            extra_config={"lmcache.mp.mq_timeout": mq_timeout, "lmcache.mp.heartbeat_interval": 1.0},
        )
        self.mq_timeout = mq_timeout

    def lookup_until(
        self, request_prefix: str, tokens: list[int], expected: int, timeout: float = 20.0
    ) -> tuple[str, int]:
        """Look up with fresh request ids until ``expected`` tokens hit (LMCache-driven stores commit
        asynchronously); returns the request id whose lookup holds the read locks, and the hit."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            request_id = f"{request_prefix}-{attempt}"
            hit = self.lookup(request_id, tokens)
            if hit >= expected or time.monotonic() > deadline:
                return request_id, hit
            if hit:  # a partial hit holds read locks on the chunks it found
                self.adapter.free_lookup_locks(tokens, 0, hit, request_id)
            self.end_session(request_id)
            attempt += 1
            time.sleep(0.02)

    def lookup(self, request_id: str, tokens: list[int]) -> int:
        """Hit tokens for ``tokens`` (prefix, all ranks); also read-locks them for one retrieve."""
        self.adapter.maybe_submit_lookup_request(request_id, tokens)
        deadline = time.monotonic() + self.mq_timeout
        while time.monotonic() < deadline:
            hit = self.adapter.check_lookup_result(request_id)
            if hit is not None:
                return int(hit)
            time.sleep(0.005)
        raise AssertionError(f"lookup {request_id!r} did not finish within {self.mq_timeout}s")

    def end_session(self, request_id: str) -> None:
        self.adapter.end_session(request_id)

    def close(self) -> None:
        self.adapter.shutdown()


def fake_plugin(root: Path, dist: str, entry_point: str, module: str, source: str) -> Path:
    """Install a one-module distribution with one ``{{ cookiecutter._entry_point_group }}`` entry point
    into ``root`` (put ``root`` on ``PYTHONPATH``), as LMCache's own registry tests fake plugins."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{{ cookiecutter._entry_point_group }}]\n{entry_point}\n")
    return root


#: A fake spec claiming this device type; ``__BACKEND__`` is replaced by its backend name.
RIVAL_SPEC = """
    from lmcache.v1.platform.base.device_spec import DeviceSpec

    class RivalSpec(DeviceSpec):
        device_type = "{{ cookiecutter.device_name }}"
        backend_name = "__BACKEND__"
        torch_module_name = "{{ cookiecutter.__torch_module_name }}"
        ops_cls = None

        def is_available(self):  # wherever this plugin's device is
            from {{ cookiecutter.__spec_module }} import {{ cookiecutter.class_prefix }}DeviceSpec

            return {{ cookiecutter.class_prefix }}DeviceSpec().is_available()
"""
