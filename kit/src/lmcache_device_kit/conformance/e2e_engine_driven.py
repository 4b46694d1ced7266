# SPDX-License-Identifier: Apache-2.0
"""End to end through a real ``lmcache server``, engine-driven, KV caches on the
backend's device.

The guide's verification steps, without vLLM: worker processes use LMCache's
``LMCacheMPWorkerAdapter`` (what ``LMCacheMPConnector`` uses) and the test
uses ``LMCacheMPSchedulerAdapter`` for lookups. Each case stores seeded random
KV, checks the lookup, retrieves into all-zero caches at other block positions
and compares bytes, on both engine-driven sub-paths:

* pickle: the server has no ``--shm-name``; KV bytes travel in the messages;
* SHM: ``--shm-name``; workers copy into the server's shared-memory pool.

The servers are shared with the rest of the suite, and each (sub-path, TP size)
keeps one model's worker ranks alive across this class's tests.

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
import itertools

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.harness.engine import Cluster
from lmcache_device_kit.harness.servers import CHUNK, LMCacheServer
from lmcache_device_kit.harness.worker_kv import ONE_BYTE_KV_DTYPES, token_ids

TOKENS = 4 * CHUNK
#: The shared server of each sub-path, and the transports LMCache's worker may take
#: on it (``harness.engine_sub_path``: KV bytes in the messages are pickled up to
#: lmcache 0.5.6, encoded inline from 0.5.7).
SUB_PATHS = {"engine-pickle": ("pickle", "inline"), "engine-shm": ("SHM",)}
_ids = itertools.count()


@pytest.mark.e2e
class BaseE2EEngineDrivenTests(ConformanceTests):
    """Engine-driven round trips through the shared pickle and SHM servers."""

    starts_servers = True

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(
        cls,
        server: LMCacheServer,
        world_size: int,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[Cluster]:
        """``world_size`` engine-driven ranks of one model on the shared server, for
        this class's tests."""
        log_dir = tmp_path_factory.mktemp(
            f"ranks-{server.transfer_mode}-tp{world_size}"
        )
        model = f"e2e-{'shm' if server.shm_name else 'pickle'}-tp{world_size}"
        ranks = Cluster(
            server, log_dir, model=model, world_size=world_size, tokens=TOKENS
        )
        yield ranks
        assert ranks.close() == [0] * world_size, (
            "every rank must unregister and exit cleanly"
        )

    @pytest.mark.parametrize("world_size", [1, 2], ids=["tp1", "tp2"], scope="class")
    @pytest.mark.parametrize("server", list(SUB_PATHS), indirect=True)
    def test_store_lookup_retrieve_round_trip_is_byte_exact(
        self,
        server: LMCacheServer,
        cluster: Cluster,
        world_size: int,
        record_transfer_times: Callable[..., None],
    ) -> None:
        """Stored KV comes back byte for byte into zeroed caches, on this sub-path,
        for every rank."""
        backend = kit_backend.current()
        sub_path = "engine-shm" if server.shm_name else "engine-pickle"
        for result in cluster.stored:
            assert result["phase"] == "store" and result["ok"], result["log"][-3000:]
            assert result["kv_device_type"] == backend.device_type
            assert result["sub_path"] in SUB_PATHS[sub_path], result["log"][-3000:]
        assert cluster.ready == ["ready"] * world_size

        # A store that returns True may still have stored nothing: verify.
        request_id = f"load-{next(_ids)}"
        assert cluster.scheduler.lookup(request_id, token_ids(TOKENS)) == TOKENS
        retrieved = cluster.retrieve(request_id)
        cluster.scheduler.end_session(request_id)
        assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [
            (True, True)
        ] * world_size
        assert {r["kv_device_type"] for r in retrieved} == {backend.device_type}
        # KV bytes in the messages (pickled, or inline from lmcache 0.5.7) arrive in
        # unpinned chunks: pageable copies are what that sub-path asks for. The SHM
        # pool is pinned: no slow path.
        slow = [
            line
            for r in (*cluster.stored, *retrieved)
            for line in r["log"].splitlines()
            if backend.slow_path_mark in line and server.shm_name
        ]
        assert not slow, f"a rank took a slow path: {slow}"
        record_transfer_times(
            f"engine_driven/{sub_path.removeprefix('engine-')}",
            cluster.stored + retrieved,
            world_size,
        )
        assert server.l1_status()["read_locked_count"] == 0, (
            "each retrieve must consume its lookup's read lock"
        )

    @pytest.mark.parametrize("dtype", ONE_BYTE_KV_DTYPES)
    @pytest.mark.parametrize("server", ["engine-shm"], indirect=True)
    def test_fp8_int8_and_uint8_caches_round_trip_byte_exact_through_the_shm_pool(
        self, server: LMCacheServer, tmp_path: Path, dtype: str
    ) -> None:
        """One-byte KV caches (fp8 e4m3 and e5m2, int8, uint8), every bit pattern in
        them (fp8 NaNs too), gathered into the server's pool and scattered back by
        this plugin's ops: the same bytes."""
        model = f"e2e-{dtype}-{next(_ids)}"
        rank = Cluster(
            server, tmp_path, model=model, world_size=1, tokens=TOKENS,
            worker_args=["--dtype", dtype],
        )  # fmt: skip
        try:
            assert rank.stored[0]["ok"], rank.stored[0]["log"][-3000:]
            assert rank.scheduler.lookup(model, token_ids(TOKENS)) == TOKENS
            retrieved = rank.retrieve(model)
            rank.scheduler.end_session(model)
            assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [(True, True)], (
                retrieved[0]["log"][-3000:]
            )
        finally:
            assert rank.close() == [0], "the rank must unregister and exit cleanly"

    @pytest.mark.parametrize("world_size", [1], ids=["tp1"], scope="class")
    @pytest.mark.parametrize("server", list(SUB_PATHS), indirect=True)
    def test_lookup_misses_before_any_store(self, cluster: Cluster) -> None:
        """A prompt nobody stored is reported as a miss (hits are real, not
        assumed)."""
        assert cluster.stored[0]["ok"]
        request_id = f"other-{next(_ids)}"
        other = [t + 1 for t in token_ids(TOKENS)]
        assert cluster.scheduler.lookup(request_id, other) == 0
        cluster.scheduler.end_session(request_id)

    @pytest.mark.parametrize("world_size", [1], ids=["tp1"], scope="class")
    @pytest.mark.parametrize("server", list(SUB_PATHS), indirect=True)
    def test_retrieve_without_a_lookup_is_refused(self, cluster: Cluster) -> None:
        """A retrieve the scheduler never looked up fails instead of returning stale
        or zero bytes."""
        (rank,) = cluster.ranks
        rank.retrieve(f"never-looked-up-{next(_ids)}")
        result = rank.next_result()
        assert result["ok"] is False, result["log"][-3000:]
