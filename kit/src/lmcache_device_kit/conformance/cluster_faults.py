# SPDX-License-Identifier: Apache-2.0
"""Faults on the shared L2 between two nodes: what LMCache holds, and what it does not.

Two ``lmcache server`` processes share an L2 as in ``cluster.py``; each test breaks
it behind their backs: an object of A's cut short or corrupted at its length, Redis
frozen (SIGSTOP), killed (SIGKILL) or killed and restarted on its port. Node A
stores from device 0 and node B looks up and retrieves into device 1, engine-driven
(the L2 path, LMCache's store controller, adapters and prefetch, is the same in
both transfer modes; ``cluster.py`` proves both). Every wait has a deadline of a
few seconds, and every server, rank and Redis stops after its test, whatever it
raised.

Each requirement LMCache does not meet (no checksum; a ``resp`` client that
neither times out nor reconnects; a failed L2 store logged without its cause:
nothing a plugin can change) is a strict ``xfail`` test written as the
requirement, the limitation and its source in the reason: the day a release meets
it, the run turns red and the vendor drops the mark (and the README's limit).
Marked ``cluster``. Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from pathlib import Path
import itertools
import re
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.cluster import skip_unless_two_devices
from lmcache_device_kit.harness.nodes import (
    TOKENS,
    Node,
    device,
    lookup_until_stored,
    release,
    retrieved_on,
    wait_read_locks,
    why,
)
from lmcache_device_kit.harness.shared_l2 import (
    DAMAGE,
    LOOKUP_DEADLINE,
    STORE_DEADLINE,
    SharedL2,
    freeze_mid_store_and_prefetch,
    landed,
    lookup_by_deadline,
    lookup_result,
    nodes_sharing,
    retrieve_what_hits,
    store_by_deadline,
    submit_lookup,
    wrote_wrong_bytes,
)
from lmcache_device_kit.harness.worker_kv import token_ids

#: The LMCache releases whose sources these limitations were read in.
LMCACHE = "LMCache 0.5.6 and 0.5.7rc2"
NO_CHECKSUM = (
    f"{LMCACHE}: an L2 object has no checksum, only its length is checked "
    "(fs_l2_adapter.py:754 'Incomplete read'; csrc/storage_backends/redis/"
    "connector.cpp:267 'GET: size header mismatch')"
)
NO_TIMEOUT = (
    f"{LMCACHE}: the resp client's sockets have no timeout (csrc/storage_backends/"
    "redis/connector.cpp:11-40) and a prefetch waits on its L2 adapters without a "
    "deadline (prefetch_controller.py), so B's lookup waits as long as Redis does"
)
NO_RECONNECT = (
    f"{LMCACHE}: the resp client connects once per worker thread and never "
    "reconnects (csrc/storage_backends/connector_base.h:542): after Redis restarts, "
    "every L2 store fails and every lookup misses until the servers restart"
)
NO_CAUSE = (
    f"{LMCACHE}: the client's error for a failed store (e.g. 'socket send failed') "
    "is dropped (native_connector_l2_adapter.py:510-552) and the store controller "
    "logs only the keys (store_controller.py:791 'Store task ... failed for keys')"
)
#: The warning LMCache logs for an L2 store that failed.
STORE_FAILED = re.compile(r"Store task \d+ to adapter \d+ failed")
#: How long after Redis is back B may miss what A stores.
RECOVERY = 5
#: The reprs of ``ObjectKey`` a failed store's warning lists (not a cause).
OBJECT_KEYS = re.compile(r"ObjectKey\(.*?\)")
#: Words of a cause: what a socket, a connection or Redis said.
CAUSE = re.compile(r"(?i)connect|socket|refused|reset|broken pipe|closed|errno|redis")
_prompts = itertools.count(50_000, 1_000)
FS, RESP = (
    pytest.param(kind, marks=pytest.mark.xdist_group(f"cluster-faults-{kind}"))
    for kind in ("fs", "resp")
)
Pair = tuple[Node, Node, SharedL2]


@pytest.mark.e2e
@pytest.mark.cluster
class BaseClusterFaultTests(ConformanceTests):
    """Faults on a shared L2 (fs, resp): each test on nodes of its own, or of its
    class where the fault leaves the L2 usable."""

    starts_servers = True

    @pytest.fixture(scope="class")
    @classmethod
    def class_pair(
        cls, l2: str, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Pair]:
        """A and B on an L2 the class's faults leave usable."""
        skip_unless_two_devices()
        with nodes_sharing(l2, tmp_path_factory.mktemp(f"faults-{l2}")) as pair:
            yield pair

    @pytest.fixture
    def own_resp_pair(self, tmp_path: Path) -> Iterator[Pair]:
        skip_unless_two_devices()
        with nodes_sharing("resp", tmp_path) as pair:
            yield pair

    @pytest.fixture(scope="class")
    @classmethod
    def restarted_pair(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
        """A and B once they shared a prompt through Redis, after Redis was killed
        (SIGKILL) and restarted, empty, on its port."""
        skip_unless_two_devices()
        with nodes_sharing("resp", tmp_path_factory.mktemp("faults-restart")) as pair:
            a, b, shared = pair
            prompt = next(_prompts)
            store_by_deadline(a, prompt)
            request_id, hit = lookup_until_stored(b, f"shared-{prompt}", prompt)
            release(b, request_id, prompt, hit)
            assert hit == TOKENS, b.server.log_tail()
            shared.resp.kill()
            shared.resp.restart()
            yield pair

    @pytest.mark.parametrize("l2", [FS, RESP], scope="class")
    def test_an_l2_object_cut_short_is_never_served_and_node_b_logs_why(
        self, l2: str, request: pytest.FixtureRequest
    ) -> None:
        """One of A's objects is cut short once it landed (an fs file, a Redis
        value): B's lookup hits less than the prompt, its retrieve of that hit
        writes no wrong byte into device 1, and B's log says why. On resp the
        cut reply leaves the connection that read it out of step with Redis, so
        that case has nodes and a Redis of its own."""
        fixture = "class_pair" if l2 == "fs" else "own_resp_pair"
        a, b, shared = request.getfixturevalue(fixture)
        prompt = next(_prompts)
        name = landed(a, shared, prompt)[0]
        sizes = shared.damage(name, "truncated")
        hit = lookup_by_deadline(b, f"cut-{prompt}", prompt)
        assert hit < TOKENS, f"B hit all of {name}, cut from {sizes[0]} to {sizes[1]} B"
        retrieved = retrieve_what_hits(b, f"cut-{prompt}", prompt, hit)
        assert not wrote_wrong_bytes(retrieved), why(retrieved)
        said = "Incomplete read" if l2 == "fs" else "GET: size header mismatch"
        assert said in b.server.log(), b.server.log_tail()

    @pytest.mark.xfail(strict=True, reason=NO_CHECKSUM)
    @pytest.mark.parametrize("l2", [FS, RESP], scope="class")
    def test_an_l2_object_corrupted_at_its_length_is_never_served(
        self, class_pair: Pair
    ) -> None:
        """One of A's objects has bytes inverted at its length once it landed: B
        must miss it or restore it exact, never put other bytes in device 1."""
        a, b, shared = class_pair
        prompt = next(_prompts)
        name = landed(a, shared, prompt)[0]
        shared.damage(name, "flipped")
        hit = lookup_by_deadline(b, f"flipped-{prompt}", prompt)
        retrieved = retrieve_what_hits(b, f"flipped-{prompt}", prompt, hit)
        assert not wrote_wrong_bytes(retrieved), (
            f"B served {name} with {DAMAGE} bytes inverted (hit {hit}): "
            f"{why(retrieved)}"
        )

    @pytest.mark.parametrize("l2", [RESP], scope="class")
    def test_what_waits_on_a_frozen_redis_ends_byte_exact_once_it_thaws(
        self, class_pair: Pair
    ) -> None:
        """The windows: Redis frozen (SIGSTOP) once prompt P landed in it; B's lookup
        of P submitted (its prefetch waits on Redis: mid-prefetch); A stores Q (it
        returns by its deadline, on the L1 write; its L2 write waits: mid-store,
        A's objects read-locked meanwhile); Redis thawed (SIGCONT) ``FROZEN``
        seconds later. B's lookup then hits all of P, and P, then Q, reach B's
        device 1 byte-exact; no read lock is left on either node."""
        a, b, shared = class_pair
        p, q = next(_prompts), next(_prompts)
        freeze_mid_store_and_prefetch(a, b, shared, p, q, f"frozen-{p}")
        shared.resp.thaw()
        assert lookup_result(b, f"frozen-{p}", LOOKUP_DEADLINE) == TOKENS
        expected = [(True, True, device(1))]
        retrieved = retrieve_what_hits(b, f"frozen-{p}", p, TOKENS)
        assert retrieved_on(retrieved) == expected, why(retrieved)
        request_id, hit = lookup_until_stored(b, f"thawed-{q}", q)
        retrieved = retrieve_what_hits(b, request_id, q, hit)
        assert retrieved_on(retrieved) == expected, why(retrieved)
        for node in (a, b):
            wait_read_locks(node.server, locked=False)

    @pytest.mark.xfail(strict=True, reason=NO_TIMEOUT)
    @pytest.mark.parametrize("l2", [RESP], scope="class")
    def test_a_lookup_on_a_frozen_redis_ends_by_its_deadline(
        self, class_pair: Pair
    ) -> None:
        """Redis frozen (SIGSTOP) once prompt P landed in it: B's lookup of P must
        end, hit or miss, within ``LOOKUP_DEADLINE`` (the lookup is then ended
        after Redis thaws, so the nodes stay usable)."""
        a, b, shared = class_pair
        prompt = next(_prompts)
        landed(a, shared, prompt)
        shared.resp.freeze()
        try:
            submit_lookup(b, f"frozen-{prompt}", prompt)
            hit = lookup_result(b, f"frozen-{prompt}", LOOKUP_DEADLINE)
        finally:
            shared.resp.thaw()
        late = lookup_result(b, f"frozen-{prompt}", LOOKUP_DEADLINE)
        release(b, f"frozen-{prompt}", prompt, late or 0)
        assert hit is not None, (
            f"B's lookup had not ended {LOOKUP_DEADLINE}s into Redis's freeze "
            f"(it ended with {late} once Redis thawed)"
        )

    @pytest.mark.xdist_group("cluster-faults-kill")
    def test_a_store_and_lookups_end_by_their_deadlines_as_misses_if_redis_dies(
        self, own_resp_pair: Pair
    ) -> None:
        """The windows: Redis frozen once prompt P landed in it; B's lookup of P
        submitted (mid-prefetch); A stores Q (mid-store: its L2 write waits, A's
        objects read-locked); Redis killed (SIGKILL) while both wait. A's store
        returned by its deadline and its read locks are freed; B's pending lookup
        ends by its deadline as a miss, as do B's lookups of P and Q afterwards
        (Redis lost everything): nothing is served."""
        a, b, shared = own_resp_pair
        p, q = next(_prompts), next(_prompts)
        freeze_mid_store_and_prefetch(a, b, shared, p, q, f"killed-{p}")
        shared.resp.kill()
        assert lookup_result(b, f"killed-{p}", LOOKUP_DEADLINE) == 0
        release(b, f"killed-{p}", p, 0)
        wait_read_locks(a.server, locked=False)
        for prompt in (p, q):
            assert lookup_by_deadline(b, f"after-kill-{prompt}", prompt) == 0
            release(b, f"after-kill-{prompt}", prompt, 0)

    @pytest.mark.xfail(strict=True, reason=NO_RECONNECT)
    @pytest.mark.xdist_group("cluster-faults-restart")
    def test_the_nodes_share_again_once_redis_is_back_after_a_restart(
        self, restarted_pair: Pair
    ) -> None:
        """After Redis came back (killed, restarted empty on its port), a prompt A
        stores reaches B again within ``RECOVERY`` seconds."""
        a, b, shared = restarted_pair
        prompt = next(_prompts)
        store_by_deadline(a, prompt)
        tokens = token_ids(TOKENS, prompt)
        request_id, hit = b.scheduler.lookup_until("back", tokens, TOKENS, RECOVERY)
        release(b, request_id, prompt, hit)
        assert hit == TOKENS, (
            f"B still misses what A stored {RECOVERY}s after Redis came back "
            f"(Redis holds {len(shared.names())} objects)"
        )

    @pytest.mark.xfail(strict=True, reason=NO_CAUSE)
    @pytest.mark.xdist_group("cluster-faults-restart")
    def test_a_failed_l2_store_names_its_cause_in_the_server_log(
        self, restarted_pair: Pair
    ) -> None:
        """A store whose L2 write fails (A's connections to Redis died with the
        Redis it knew): A's log, besides saying the store failed, says why."""
        a, _, _ = restarted_pair
        start = len(a.server.log())
        store_by_deadline(a, next(_prompts))
        deadline = time.monotonic() + STORE_DEADLINE
        while not (failed := STORE_FAILED.findall(log := a.server.log()[start:])):
            assert time.monotonic() < deadline, "A's L2 store did not fail"
            time.sleep(0.05)
        lines = OBJECT_KEYS.sub("ObjectKey(...)", log).splitlines()
        said = [line for line in lines if " INFO" not in line and CAUSE.search(line)]
        assert said, f"A's log says its L2 store failed, not why: {failed[-1]}"
