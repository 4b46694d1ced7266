# SPDX-License-Identifier: Apache-2.0
"""Server faults: each ends with a clear error within 30 s, never a hang, never a
wrong byte.

Each case drives a real ``lmcache server`` on 127.0.0.1 with short timeouts: a server
that dies with a store in flight, one restarted in its place, an L1 too small for what
it is asked to keep. Other fault cases live next to the feature they break: a retrieve
without a lookup (``e2e_engine_driven.py``), a killed LMCache-driven worker
(``e2e_lmcache_driven.py``), faults of the device itself (``injected_faults.py``);
bad input and plugin-loading faults have classes of their own.

Imports torch through the harness's ``worker_kv``: import it from a project's tests
only, after ``conftest.py`` set the environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
import os
import signal
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.harness.engine import (
    MQ_TIMEOUT,
    TIMED_OUT_MQ_TIMEOUT,
    Scheduler,
    Worker,
    start_worker,
)
from lmcache_device_kit.harness.servers import CHUNK, LMCacheServer, running_server
from lmcache_device_kit.harness.worker_kv import token_ids

DEADLINE_S = 30


def engine_server(tmp_path: Path, **kwargs: Any) -> Any:
    """An engine-driven server of the test's own (context manager), for faults that
    break it."""
    return running_server(
        tmp_path / "server.log", transfer_mode="engine_driven", **kwargs
    )


def round_trip(
    server: LMCacheServer,
    worker: Worker,
    model: str,
    first: int,
    tokens: int = 2 * CHUNK,
) -> dict:
    """Store ``tokens`` tokens from ``first``, look them up, retrieve them; the retrieve
    result."""
    worker.store(first)
    stored = worker.next_result()
    assert stored["ok"], stored.get("error")
    scheduler = Scheduler(server.url, model, 1, mq_timeout=float(MQ_TIMEOUT))
    try:
        request_id, hit = scheduler.lookup_until(
            f"rt-{first}", token_ids(tokens, first), tokens, timeout=10
        )
        assert hit == tokens, f"stored, yet the lookup finds {hit} of {tokens} tokens"
        worker.retrieve(request_id, first)
        return worker.next_result()
    finally:
        scheduler.close()


@dataclass
class DeadServer:
    """A worker whose server died with a store in flight: what the worker saw, and where
    to restart it."""

    worker: Worker
    port: int
    store: dict
    seconds: float
    worker_survived: bool
    log_dir: Path


class BaseFaultsTests(ConformanceTests):
    """A server that dies, one restarted in its place, a full L1."""

    starts_servers = True

    @pytest.fixture(scope="class")
    @classmethod
    def died_mid_store(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[DeadServer]:
        """Server frozen (SIGSTOP), a store submitted (surely in flight), server killed
        (SIGKILL)."""
        log_dir = tmp_path_factory.mktemp("died-mid-store")
        server = LMCacheServer(log_dir / "first.log", "engine_driven")
        server.start()
        assert server.process is not None
        worker = start_worker(server, log_dir, "died", mq_timeout=TIMED_OUT_MQ_TIMEOUT)
        try:
            os.kill(server.process.pid, signal.SIGSTOP)
            started = time.monotonic()
            worker.store(50_000)
            time.sleep(0.5)
            server.process.kill()
            server.process.wait(timeout=10)
            result = worker.next_result(timeout=DEADLINE_S)
            seconds = time.monotonic() - started
            yield DeadServer(
                worker,
                server.port,
                result,
                seconds,
                worker.process.poll() is None,
                log_dir,
            )
        finally:
            worker.kill()  # still running only if a test failed

    @pytest.mark.own_server
    @pytest.mark.xdist_group("died-mid-store")
    def test_a_store_in_flight_when_the_server_dies_fails_within_the_deadline(
        self,
        died_mid_store: DeadServer,
    ) -> None:
        """Server frozen, store submitted, server killed: the store reports failure in
        < 30 s; the worker lives on."""
        assert died_mid_store.seconds < DEADLINE_S
        result = died_mid_store.store
        assert result["phase"] == "store" and result["ok"] is False, result.get("error")
        assert died_mid_store.worker_survived, "the worker must survive a dead server"

    @pytest.mark.own_server
    @pytest.mark.xdist_group("died-mid-store")
    def test_a_restarted_server_gets_the_workers_caches_again_and_serves_exact_bytes(
        self,
        died_mid_store: DeadServer,
    ) -> None:
        """A new server on the dead one's port: the worker re-registers, and a round
        trip is exact."""
        worker = died_mid_store.worker
        with running_server(
            died_mid_store.log_dir / "second.log",
            transfer_mode="engine_driven",
            port=died_mid_store.port,
        ) as second:
            # Each adapter's heartbeat notices the new server and re-registers its
            # caches; until both have, a round trip may fail, but never with wrong
            # bytes.
            deadline, attempt, result = time.monotonic() + DEADLINE_S, 0, {}
            while time.monotonic() < deadline:
                attempt += 1
                worker.store(60_000 + attempt * 1_000)
                if not worker.next_result(timeout=DEADLINE_S)["ok"]:
                    time.sleep(0.25)
                    continue
                result = round_trip(
                    second, worker, "fault-died", 60_000 + attempt * 1_000 + 500
                )
                assert result["bytes_match"] or not result["ok"], (
                    "a retrieve reported success with wrong bytes"
                )
                if result["ok"]:
                    break
                time.sleep(1)
            assert result.get("ok"), (
                f"no round trip within {DEADLINE_S} s of the restart:\n"
                f"{worker.log()[-3000:]}"
            )
            assert worker.close(timeout=30) == 0, (
                "the worker must unregister from the new server and exit cleanly"
            )

    @pytest.mark.own_server
    def test_a_full_l1_drops_stores_that_say_true_and_only_the_lookup_tells(
        self,
        tmp_path: Path,
    ) -> None:
        """Twelve 256 KiB prompts into a 1 MiB L1: the stores say True, yet lookups
        find later prompts missing."""
        prompts = [100_000 + i * 4 * CHUNK for i in range(12)]
        # A non-lazy L1: with a pin-capable device LMCache makes L1 lazy, which grows
        # past 1 MiB here.
        with engine_server(tmp_path, l1_size_gb=0.001, lazy_l1=False) as server:
            worker = Worker(
                server.url,
                model="fault-full",
                rank=0,
                world_size=1,
                tokens=4 * CHUNK,
                log_path=tmp_path / "worker.log",
                extra_args=["--mq-timeout", MQ_TIMEOUT],
            )
            scheduler = Scheduler(
                server.url, "fault-full", 1, mq_timeout=float(MQ_TIMEOUT)
            )
            try:
                worker.next_result(timeout=DEADLINE_S)
                assert worker.next_result(timeout=DEADLINE_S)["phase"] == "ready"
                said = {}
                for first in prompts:
                    worker.store(first)
                    said[first] = worker.next_result(timeout=DEADLINE_S)["ok"]
                # Engine-driven stores commit asynchronously: give them time to land (no
                # prompt is sure to: a full L1 may drop any of them, the last included).
                time.sleep(1)
                found = {
                    first: scheduler.lookup(
                        f"full-{first}", token_ids(4 * CHUNK, first)
                    )
                    for first in prompts
                }
                untrue = [
                    first
                    for first in prompts
                    if said[first] and found[first] < 4 * CHUNK
                ]
                assert untrue, (
                    "every store that said True was found in a 1 MiB L1: "
                    f"said {said}, found {found}"
                )
            finally:
                scheduler.close()
                worker.close(timeout=30)
