# SPDX-License-Identifier: {{ cookiecutter.license }}
"""End to end through a real ``lmcache server``, engine-driven, KV caches on {{ cookiecutter.device_name }}.

The guide's verification steps, without vLLM: worker processes use LMCache's
``LMCacheMPWorkerAdapter`` (what ``LMCacheMPConnector`` uses) and the test
uses ``LMCacheMPSchedulerAdapter`` for lookups. Each case stores seeded random
KV, checks the lookup, retrieves into all-zero caches at other block positions
and compares bytes, on both engine-driven sub-paths:

* pickle: the server has no ``--shm-name``; KV bytes travel in the messages;
* SHM: ``--shm-name``; workers copy into the server's shared-memory pool.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import LMCacheServer, Scheduler, check_round_trip, running_server, workers
from e2e_worker import BLOCK_SIZE, token_ids

pytestmark = pytest.mark.e2e

CHUNK = 64
TOKENS = 4 * CHUNK
DEVICE = "{{ cookiecutter.device_name }}"
#: What LMCache's worker logs for each sub-path ("Worker engine-driven context registered (..., mode=...)").
EXPECTED_MODE = {"pickle": "mode=pickle)", "shm": "mode=SHM)"}
_ids = itertools.count()


@pytest.fixture(scope="module", params=["pickle", "shm"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LMCacheServer]:
    """One real server per sub-path, on free loopback ports, stopped by PID."""
    log = tmp_path_factory.mktemp(f"server-{request.param}") / "server.log"
    shm_name = f"e2e_{DEVICE}_{os.getpid()}_{log.parent.name}" if request.param == "shm" else None
    with running_server(log, transfer_mode="engine_driven", shm_name=shm_name, chunk_size=CHUNK) as srv:
        srv.sub_path = request.param  # type: ignore[attr-defined]
        yield srv


@pytest.mark.parametrize("world_size", [1, 2], ids=["tp1", "tp2"])
def test_store_lookup_retrieve_round_trip_is_byte_exact(server: LMCacheServer, world_size: int, tmp_path: Path) -> None:
    """Stored KV comes back byte for byte into zeroed caches, on this sub-path, for every rank."""
    n = next(_ids)
    model = f"e2e-{server.sub_path}-tp{world_size}-{n}"  # type: ignore[attr-defined]
    tokens = token_ids(TOKENS)
    scheduler = Scheduler(server.url, model, world_size, BLOCK_SIZE)
    try:
        with workers(server.url, tmp_path, model=model, world_size=world_size, tokens=TOKENS) as ranks:
            stored = [w.next_result() for w in ranks]
            for result in stored:
                assert result["phase"] == "store" and result["ok"], result["log"][-3000:]
                assert result["kv_device_type"] == DEVICE
                assert EXPECTED_MODE[server.sub_path] in result["log"], result["log"][-3000:]  # type: ignore[attr-defined]
            assert [w.next_result()["phase"] for w in ranks] == ["ready"] * world_size

            # A store that returns True may still have stored nothing: verify.
            assert scheduler.lookup(f"load-{n}", tokens) == TOKENS
            for w in ranks:
                w.retrieve(f"load-{n}")
            retrieved = [w.next_result() for w in ranks]
            scheduler.end_session(f"load-{n}")
            assert [w.close() for w in ranks] == [0] * world_size
    finally:
        scheduler.close()
    check_round_trip(f"engine_driven/{server.sub_path}", stored, retrieved, world_size)  # type: ignore[attr-defined]
    assert {r["kv_device_type"] for r in retrieved} == {DEVICE}
    l1 = server.l1_status()
    assert l1["read_locked_count"] == 0, "each retrieve must consume its lookup's read lock"


def test_lookup_misses_before_any_store(server: LMCacheServer, tmp_path: Path) -> None:
    """A prompt nobody stored is reported as a miss (hits are real, not assumed)."""
    n = next(_ids)
    model = f"e2e-cold-{server.sub_path}-{n}"  # type: ignore[attr-defined]
    scheduler = Scheduler(server.url, model, 1, BLOCK_SIZE)
    try:
        with workers(server.url, tmp_path, model=model, world_size=1, tokens=TOKENS) as ranks:
            assert ranks[0].next_result()["ok"]
            assert scheduler.lookup(f"other-{n}", [t + 1 for t in token_ids(TOKENS)]) == 0
            scheduler.end_session(f"other-{n}")
    finally:
        scheduler.close()


def test_retrieve_without_a_lookup_is_refused(server: LMCacheServer, tmp_path: Path) -> None:
    """A retrieve the scheduler never looked up fails instead of returning stale or zero bytes."""
    n = next(_ids)
    model = f"e2e-nolookup-{server.sub_path}-{n}"  # type: ignore[attr-defined]
    with workers(server.url, tmp_path, model=model, world_size=1, tokens=TOKENS) as ranks:
        assert ranks[0].next_result()["ok"]
        assert ranks[0].next_result()["phase"] == "ready"
        ranks[0].retrieve(f"never-looked-up-{n}")
        result = ranks[0].next_result()
    assert result["ok"] is False, result["log"][-3000:]
