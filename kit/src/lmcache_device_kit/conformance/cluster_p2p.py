# SPDX-License-Identifier: Apache-2.0
"""Two nodes moving KV peer to peer: stored from one node's device, retrieved on
another's, with no shared L2 at all.

Two ``lmcache server`` processes on 127.0.0.1 stand for two hosts, each on one
real ``lmcache coordinator`` with P2P on (``harness/coordinator.py``: the flags,
the traps). Neither has an ``--l2-adapter``: what node B finds, it finds in node
A's L1 through its ``p2p`` adapter, and its transfer channel (nixl, on CPU memory)
copies it into B's L1. Node A's rank stores from device 0; node B's looks up and
retrieves through B's own server into device 1, byte for byte, in both transfer
modes.

What the plugin does for it: nothing. LMCache's channel registers the host L1
buffer only, so P2P moves L1 to L1 in host memory and the device is touched only
by the store on A and the retrieve on B, as on one node.

Marked ``cluster``: a project's default run deselects it, ``pytest -m cluster``
runs it. Skips, naming the extra to install, where the transfer engine is
missing. Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.cluster import (
    MODES,
    check_across_devices,
    check_miss_until_stored,
    skip_unless_two_nodes_can_run,
)
from lmcache_device_kit.harness.coordinator import (
    Coordinator,
    missing_engine,
    wait_for_peers,
)
from lmcache_device_kit.harness.nodes import (
    Node,
    node_pair,
    running_pair,
    start_server,
)
from lmcache_device_kit.harness.servers import LMCacheServer


@pytest.mark.e2e
@pytest.mark.cluster
@pytest.mark.xdist_group("cluster-p2p")
class BaseClusterP2PTests(ConformanceTests):
    """Two servers on one coordinator, P2P through ``engine``, in both modes."""

    starts_servers = True
    #: LMCache's ``--p2p-transfer-engine``; one of ``harness.coordinator.ENGINES``.
    engine = "nixl"

    @pytest.fixture(scope="class")
    @classmethod
    def p2p_servers(
        cls,
        mode: str,
        request: pytest.FixtureRequest,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[tuple[LMCacheServer, LMCacheServer]]:
        """Node A's and node B's servers, P2P peers on one coordinator, no L2."""
        missing = missing_engine(cls.engine)
        if missing:
            pytest.skip(missing)
        skip_unless_two_nodes_can_run(mode, request)
        logs = tmp_path_factory.mktemp(f"cluster-p2p-{mode}")
        with Coordinator(logs / "coordinator.log") as hub:
            pair = [  # each its own channel port
                start_server(name, mode, None, logs, hub.server_args(cls.engine))
                for name in "AB"
            ]
            with running_pair(pair) as ab:
                wait_for_peers(pair)
                yield ab

    @pytest.fixture(scope="class")
    @classmethod
    def p2p_tp1(
        cls,
        p2p_servers: tuple[LMCacheServer, LMCacheServer],
        mode: str,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[tuple[Node, Node]]:
        """One rank per node: A's on device 0, B's on device 1 (both rank 0)."""
        with node_pair(p2p_servers, mode, tmp_path_factory.mktemp("p2p-ranks")) as ab:
            yield ab

    @pytest.mark.parametrize("mode", MODES, scope="class")
    def test_node_b_misses_a_prompt_until_node_a_stores_it_then_hits_it_through_p2p(
        self, p2p_tp1: tuple[Node, Node]
    ) -> None:
        """B's lookup, which asks its peer A, misses a prompt no node stored; once
        A stores it, B's lookups hit it in full, with no L2 between them."""
        check_miss_until_stored(*p2p_tp1)

    @pytest.mark.parametrize("mode", MODES, scope="class")
    def test_kv_stored_from_node_a_device_0_is_retrieved_on_node_b_device_1_via_p2p(
        self, p2p_tp1: tuple[Node, Node]
    ) -> None:
        """A's rank stores from device 0 into A's L1; B's rank retrieves through
        B's server, which copied it from A's L1 peer to peer, into device 1: every
        block byte for byte, nothing written elsewhere, B's read locks consumed."""
        check_across_devices(*p2p_tp1)
