# SPDX-License-Identifier: Apache-2.0
"""``doctor --server`` shuts down the worker and scheduler adapters it opened,
however the round trip ends.

LMCache's vLLM adapters stand in as fakes (a worker, a scheduler, and a server's
store in between), so each way a round trip can end is chosen, not waited for.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any
import io
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.doctor.live import check_server, shut_down
from lmcache_device_kit.doctor.report import Report
from lmcache_device_kit.harness import lmcache_calls

ADAPTERS = "lmcache.integration.vllm.vllm_multi_process_adapter"
#: The harness calls the round trip makes (``harness.lmcache_calls``), reduced to what
#: the fakes need: an operation is the list of block ids it moves.
HARNESS = """
def register_kv_caches(worker, kv):
    worker.kv = kv

def packed_tokens(prompt):
    return prompt

def load_store_op(prompt, block_ids, start, end):
    return block_ids[0]

def recorded_event(worker, device_type):
    return None

def engine_sub_path(context):
    return "pickle"
"""


class Server:
    """What the fake adapters share: how this round trip ends, the stored blocks,
    and which adapters were shut down."""

    def __init__(self, ending: str) -> None:
        self.ending = ending
        self.stored: dict[str, Any] = {}
        self.shut_down: list[str] = []


def fake_adapters(server: Server) -> SimpleNamespace:
    class Worker:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.store_futures: dict[str, Future] = {}
            self.retrieve_futures: dict[str, tuple[Future, None]] = {}
            self.transfer_ctx = SimpleNamespace()
            self.kv: dict[str, Any] = {}

        def submit_store_request(self, request: str, blocks: Any, event: Any) -> None:
            future: Future = Future()
            self.store_futures[request] = future
            if server.ending == "raised":
                future.set_exception(TimeoutError("no reply"))
                return
            server.stored = {n: t[:, blocks].clone() for n, t in self.kv.items()}
            future.set_result(server.ending != "refused")

        def submit_retrieve_request(
            self, request: str, blocks: Any, event: Any
        ) -> None:
            for name, values in self.kv.items():
                stored = server.stored[name]
                values[:, blocks] = 0 * stored if server.ending == "wrong" else stored
            future: Future = Future()
            future.set_result(True)
            self.retrieve_futures[request] = (future, None)

        def shutdown(self) -> None:
            server.shut_down.append("worker")

    class Scheduler:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def maybe_submit_lookup_request(self, request: str, tokens: list) -> None:
            self.found = 0 if server.ending == "missed" else len(tokens)

        def check_lookup_result(self, request: str) -> int:
            return self.found

        def free_lookup_locks(self, *args: Any) -> None:
            pass

        def end_session(self, request: str) -> None:
            pass

        def shutdown(self) -> None:
            server.shut_down.append("scheduler")

    return SimpleNamespace(
        LMCacheMPWorkerAdapter=Worker,
        LMCacheMPSchedulerAdapter=Scheduler,
        ParallelStrategy=lambda **kwargs: kwargs,
    )


@pytest.mark.parametrize(
    ("ending", "ok"),
    [
        ("passed", True),
        ("refused", False),
        ("raised", False),
        ("missed", False),
        ("wrong", False),
    ],
)
def test_a_live_check_shuts_its_worker_and_scheduler_down_however_it_ends(
    fake_plugin: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    ending: str,
    ok: bool,
) -> None:
    """Passed, the store refused, the store timed out, the lookup found nothing,
    the retrieve gave wrong bytes: each is reported, and both adapters are shut
    down (LMCache's heartbeats and sockets would otherwise outlive the check)."""
    package = fake_plugin(
        "kit_test_live",
        {"_lmcache_compat.py": "slow_paths = {}\n"},
    )
    monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, package)
    kit_backend.current.cache_clear()
    fakes: dict[str, Any] = {}
    exec(HARNESS, fakes)
    for name in [name for name in fakes if not name.startswith("__")]:
        monkeypatch.setattr(lmcache_calls, name, fakes[name])
    server = Server(ending)
    monkeypatch.setitem(sys.modules, ADAPTERS, fake_adapters(server))
    context = SimpleNamespace(instance=lambda: None)
    monkeypatch.setitem(sys.modules, "zmq", SimpleNamespace(Context=context))
    report = Report()
    url = "tcp://127.0.0.1:1"
    check_server(report, url, "engine_driven", 32, 0.2, io.StringIO(), "engine-driven")
    (check,) = report.checks
    assert check.ok is ok, check
    assert server.shut_down == ["worker", "scheduler"], check


def test_an_adapter_whose_shutdown_raises_leaves_the_others_shut_down() -> None:
    closed: list[str] = []

    def failing() -> None:
        raise RuntimeError("socket already closed")

    worker = SimpleNamespace(shutdown=failing)
    scheduler = SimpleNamespace(shutdown=lambda: closed.append("scheduler"))
    log = io.StringIO()
    shut_down([worker, scheduler], log)
    assert closed == ["scheduler"]
    assert "shutdown() raised RuntimeError('socket already closed')" in log.getvalue()
