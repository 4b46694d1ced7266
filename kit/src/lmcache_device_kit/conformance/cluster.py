# SPDX-License-Identifier: Apache-2.0
"""Two nodes sharing one L2: KV stored from one node's device, retrieved on another's.

A node is a real ``lmcache server`` with its own worker ranks; two on 127.0.0.1
stand for two hosts. They share LMCache's own L2 (``--l2-adapter``): ``fs`` on one
directory (a shared file system), or ``resp`` against one real Redis
(``harness/redis.py``). Node A's rank stores from device 0; node B's looks up and
retrieves through B's own server into device 1, byte for byte, in both transfer
modes (engine-driven through B's SHM pool; LMCache-driven, where the spec offers
it, through the plugin in B's server).

What LMCache does (0.5.4 to 0.5.7rc2): the store controller writes every chunk
to every L2 adapter as soon as its L1 write finishes (write-through, not on L1
eviction, so no small L1 is needed), in the background: the rank's store returns
on the L1 write, so B polls (``Scheduler.lookup_until``), never sleeps. B's lookup
asks each adapter, loads the hits into its L1, and serves them from there. The
L2 holds LMCache's chunk bytes from L1, under ``model@kv_rank@group@chunk_hash``:
nothing in a key names a server, but ``kv_rank`` packs the TP world size, so
nodes share only at the same TP size (and the same ``--chunk-size`` and
``--hash-algorithm``). The plugin does nothing for any of it.

Marked ``cluster``: a project's default run deselects it, ``pytest -m cluster``
runs it. Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from pathlib import Path
import itertools

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests, missing_reason
from lmcache_device_kit.conformance.fixtures import offers_lmcache_driven
from lmcache_device_kit.harness.nodes import (
    TOKENS,
    Node,
    device,
    lookup_once,
    lookup_until_stored,
    node,
    node_pair,
    release,
    retrieved_on,
    running_pair,
    start_server,
    wait_read_locks,
    why,
)
from lmcache_device_kit.harness.servers import LMCacheServer
from lmcache_device_kit.harness.shared_l2 import new_shared_l2

#: The L2s the nodes share, each tested on an xdist worker of its own.
L2_KINDS = [
    pytest.param(kind, marks=pytest.mark.xdist_group(f"cluster-{kind}"))
    for kind in ("fs", "resp")
]
MODES = ("engine_driven", "lmcache_driven")
_prompts = itertools.count(10_000, 1_000)  # first tokens of prompts no test shares


def skip_unless_two_devices() -> None:
    """Skip, with the reason, where this host lacks A's device 0 and B's device 1."""
    # First Party
    from lmcache_device_kit.conformance.support import device_runtime

    count = int(device_runtime().device_count())
    if count < 2:
        pytest.skip(
            f"two nodes need two {kit_backend.current().device_type} devices "
            f"(A's device 0, B's device 1); this host has {count}"
        )


def skip_unless_two_nodes_can_run(mode: str, request: pytest.FixtureRequest) -> None:
    """Skip, with the reason, where this host lacks the two devices or the spec the
    transfer ``mode`` needs."""
    skip_unless_two_devices()
    if mode == "lmcache_driven" and not offers_lmcache_driven(
        request.getfixturevalue("spec")
    ):
        pytest.skip(missing_reason({"lmcache_driven"}))


@pytest.mark.e2e
@pytest.mark.cluster
class BaseClusterTests(ConformanceTests):
    """Two servers sharing one L2 (``fs``, ``resp``), in both transfer modes."""

    starts_servers = True

    @pytest.fixture(scope="class")
    @classmethod
    def shared_l2(
        cls, l2: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[dict]:
        """The L2 both nodes' ``--l2-adapter`` name: a directory, or a real Redis."""
        with new_shared_l2(l2, tmp_path_factory.mktemp(f"{l2}-l2")) as shared:
            yield shared.adapter

    @pytest.fixture(scope="class")
    @classmethod
    def servers_ab(
        cls,
        shared_l2: dict,
        mode: str,
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[tuple[LMCacheServer, LMCacheServer]]:
        """Node A's and node B's servers on the shared L2, started side by side."""
        skip_unless_two_nodes_can_run(mode, request)
        logs = tmp_path_factory.mktemp(f"cluster-{shared_l2['type']}-{mode}")
        with running_pair([start_server(n, mode, shared_l2, logs) for n in "AB"]) as ab:
            yield ab

    @pytest.fixture(scope="class")
    @classmethod
    def tp1(
        cls,
        servers_ab: tuple[LMCacheServer, LMCacheServer],
        mode: str,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[tuple[Node, Node]]:
        """One rank per node: A's on device 0, B's on device 1 (both rank 0)."""
        with node_pair(servers_ab, mode, tmp_path_factory.mktemp("tp1-ranks")) as ab:
            yield ab

    @pytest.mark.parametrize("mode", MODES, scope="class")
    @pytest.mark.parametrize("l2", L2_KINDS, scope="class")
    def test_node_b_misses_a_prompt_until_node_a_stores_it(
        self, tp1: tuple[Node, Node]
    ) -> None:
        """B's lookup misses a prompt no node stored; once A stores it, B's lookups
        hit it in full (polled: the L2 write follows A's store in the background)."""
        check_miss_until_stored(*tp1)

    @pytest.mark.parametrize("mode", MODES, scope="class")
    @pytest.mark.parametrize("l2", L2_KINDS, scope="class")
    def test_kv_stored_from_node_a_device_0_is_retrieved_on_node_b_device_1_byte_exact(
        self, tp1: tuple[Node, Node]
    ) -> None:
        """A's rank stores from device 0 through A's server; B's rank retrieves
        through B's server into device 1: every block byte for byte, nothing
        written elsewhere, B's read locks consumed."""
        check_across_devices(*tp1)

    @pytest.mark.parametrize("mode", MODES, scope="class")
    @pytest.mark.parametrize("l2", L2_KINDS, scope="class")
    def test_tp2_nodes_share_kv_and_never_see_what_tp1_ranks_stored(
        self,
        servers_ab: tuple[LMCacheServer, LMCacheServer],
        tp1: tuple[Node, Node],
        mode: str,
        tmp_path: Path,
    ) -> None:
        """TP=2 on both nodes (B's rank r on the device A's rank r does not use):
        each rank's KV crosses byte-exact. Every L2 key carries ``kv_rank``, which
        packs the TP world size, so a prompt TP=1 ranks stored (and B's TP=1 lookup
        finds) stays a miss for the same model's TP=2 lookup: nodes share only at
        the same TP size."""
        a1, b1 = tp1
        with node(servers_ab[0], mode, [0, 1], tmp_path) as a:
            with node(servers_ab[1], mode, [1, 0], tmp_path) as b:
                by_tp1 = next(_prompts)
                assert [r["ok"] for r in a1.store(by_tp1)] == [True]
                request_id, hit = lookup_until_stored(b1, f"tp1-{by_tp1}", by_tp1)
                release(b1, request_id, by_tp1, hit)
                assert hit == TOKENS
                assert lookup_once(b, f"tp2-of-tp1-{by_tp1}", by_tp1) == 0
                self.check_tp2_round_trip(a, b)

    @staticmethod
    def check_tp2_round_trip(a: Node, b: Node) -> None:
        """A's two ranks store from devices 0 and 1; B's retrieve into 1 and 0."""
        prompt = next(_prompts)
        assert lookup_once(b, f"before-{prompt}", prompt) == 0
        stored = a.store(prompt)
        assert [(r["ok"], r["kv_device"]) for r in stored] == [
            (True, device(0)),
            (True, device(1)),
        ]
        request_id, hit = lookup_until_stored(b, f"load-{prompt}", prompt)
        assert hit == TOKENS, b.server.log_tail()
        retrieved = b.retrieve(request_id, prompt)
        b.scheduler.end_session(request_id)
        expected = [(True, True, device(1)), (True, True, device(0))]
        assert retrieved_on(retrieved) == expected, why(retrieved)


def check_miss_until_stored(a: Node, b: Node) -> None:
    """B misses a prompt no node stored; once A stores it, B's polled lookups hit
    it in full."""
    prompt = next(_prompts)
    assert lookup_once(b, f"before-{prompt}", prompt) == 0
    assert [r["ok"] for r in a.store(prompt)] == [True]
    request_id, hit = lookup_until_stored(b, f"after-{prompt}", prompt)
    assert hit == TOKENS, b.server.log_tail()
    release(b, request_id, prompt, hit)


def check_across_devices(a: Node, b: Node) -> None:
    """A's rank stores from device 0; B's rank retrieves into device 1, byte for
    byte, nothing written elsewhere, and B's read locks are released."""
    prompt = next(_prompts)
    (stored,) = a.store(prompt)
    assert stored["ok"] and stored["kv_device"] == device(0), stored["log"][-3000:]
    request_id, hit = lookup_until_stored(b, f"load-{prompt}", prompt)
    assert hit == TOKENS, b.server.log_tail()
    retrieved = b.retrieve(request_id, prompt)
    b.scheduler.end_session(request_id)
    assert retrieved_on(retrieved) == [(True, True, device(1))], why(retrieved)
    # LMCache-driven, B's server releases the lookup's read locks after the
    # retrieve's completion is published: polled, a lock never released fails
    wait_read_locks(b.server, locked=False)
