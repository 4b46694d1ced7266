# SPDX-License-Identifier: Apache-2.0
"""Two nodes on a shared L2 whose objects a test reaches behind the servers' backs,
and the deadlines a fault test holds them to.

Why it exists: the cluster fault tests (``conformance/cluster_faults.py``) damage
what node A's server wrote to the L2 (a file of the ``fs`` directory, a value in
Redis for ``resp``) before node B reads it, and break Redis while A's L2 write or
B's prefetch waits on it. ``SharedL2`` lists, reads and rewrites the objects of
either L2 the same way; ``truncated`` and ``flipped`` are the two damages;
``submit_lookup`` and ``lookup_result`` split a scheduler's lookup so a fault can
land while it is in flight; every wait has a deadline of seconds.

Imports neither lmcache nor torch (the scheduler a lookup goes through imports
lmcache when one is made).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
import shutil
import time

# First Party
from lmcache_device_kit.harness.nodes import (
    TOKENS,
    Node,
    release,
    two_nodes,
    wait_read_locks,
)
from lmcache_device_kit.harness.redis import RedisServer, command
from lmcache_device_kit.harness.servers import CHUNK
from lmcache_device_kit.harness.worker_kv import token_ids

#: The L2 objects one rank's prompt becomes: one per chunk.
OBJECTS_PER_PROMPT = TOKENS // CHUNK
#: How many bytes ``truncated`` cuts, and ``flipped`` inverts.
DAMAGE = 100
#: The fs adapter's objects (its temporary files end otherwise).
FS_SUFFIX = ".data"
#: A's store returns on its L1 write, whatever the L2 does.
STORE_DEADLINE = 10
#: B's lookup ends within this, hit or miss (a healthy one takes milliseconds).
LOOKUP_DEADLINE = 3
#: How long Redis stays frozen with A's L2 write and B's prefetch waiting on it.
FROZEN = 1.0


@dataclass
class SharedL2:
    """One shared L2 as a test sees it: ``fs`` (``directory``) or ``resp``
    (``redis``)."""

    adapter: dict
    directory: Path | None = None
    redis: RedisServer | None = None

    @property
    def resp(self) -> RedisServer:
        """The Redis of a ``resp`` L2."""
        assert self.redis is not None, f"a {self.adapter['type']} L2 has no Redis"
        return self.redis

    def names(self) -> set[str]:
        if self.redis is not None:
            return {key.decode() for key in self.redis.keys()}
        assert self.directory is not None
        return {path.name for path in self.directory.glob(f"*{FS_SUFFIX}")}

    def read(self, name: str) -> bytes:
        if self.redis is not None:
            value = command(self.redis.port, "GET", name)
            assert isinstance(value, bytes), f"redis has no {name}"
            return value
        assert self.directory is not None
        return (self.directory / name).read_bytes()

    def write(self, name: str, data: bytes) -> None:
        if self.redis is not None:
            assert command(self.redis.port, "SET", name, data) == "OK"
            return
        assert self.directory is not None
        (self.directory / name).write_bytes(data)

    def new_objects(
        self, before: set[str], count: int = OBJECTS_PER_PROMPT, timeout: float = 10
    ) -> list[str]:
        """The ``count`` objects written since ``before`` (polled: the L2 write
        follows a store's return in the background), sorted."""
        deadline = time.monotonic() + timeout
        while True:
            new = sorted(self.names() - before)
            if len(new) >= count:
                return new
            assert time.monotonic() < deadline, (
                f"the L2 holds {len(new)} of {count} new objects after {timeout}s"
            )
            time.sleep(0.02)

    def damage(self, name: str, how: str) -> tuple[int, int]:
        """Rewrite object ``name`` ``truncated`` or ``flipped``; its sizes before
        and after."""
        data = self.read(name)
        damaged = truncated(data) if how == "truncated" else flipped(data)
        self.write(name, damaged)
        return len(data), len(damaged)


def truncated(data: bytes) -> bytes:
    """``data`` cut ``DAMAGE`` bytes short (a write that never finished)."""
    return data[:-DAMAGE]


def flipped(data: bytes) -> bytes:
    """``data`` at the same length with ``DAMAGE`` bytes inverted in its middle (a
    bit rot no length check sees)."""
    middle = len(data) // 2
    inverted = bytes(byte ^ 0xFF for byte in data[middle : middle + DAMAGE])
    return data[:middle] + inverted + data[middle + DAMAGE :]


def submit_lookup(at: Node, request_id: str, first_token: int) -> None:
    """Start node ``at``'s lookup of the prompt at ``first_token`` without waiting
    for it (its server starts the prefetch from L2)."""
    scheduler = at.scheduler
    tokens = scheduler.packed_tokens(token_ids(TOKENS, first_token))
    scheduler.adapter.maybe_submit_lookup_request(request_id, tokens)


def lookup_result(at: Node, request_id: str, within: float) -> int | None:
    """The submitted lookup's hit once it ends, or ``None`` if it has not ended
    within ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        hit = at.scheduler.adapter.check_lookup_result(request_id)
        if hit is not None:
            return int(hit)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


@contextmanager
def new_shared_l2(kind: str, work: Path) -> Iterator[SharedL2]:
    """A new L2 of ``kind`` for two nodes to share: ``fs``, a directory under
    ``work``, removed after the block; ``resp``, a Redis of its own (its log in
    ``work``), stopped after it."""
    if kind == "fs":
        directory = work / "fs-l2"
        directory.mkdir(parents=True, exist_ok=True)
        try:
            yield SharedL2({"type": "fs", "base_path": str(directory)}, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return
    with RedisServer(work / "redis.log") as server:
        yield SharedL2(server.adapter | {"num_workers": 2}, redis=server)


@contextmanager
def nodes_sharing(
    kind: str, logs: Path, mode: str = "engine_driven"
) -> Iterator[tuple[Node, Node, SharedL2]]:
    """Nodes A and B sharing a new L2 of ``kind`` (``new_shared_l2``), and that L2;
    all stopped after the block."""
    with new_shared_l2(kind, logs) as shared:
        with two_nodes(mode, shared.adapter, logs) as (a, b):
            yield a, b, shared


def store_by_deadline(a: Node, prompt: int) -> None:
    """A stores ``prompt``; it must return, stored, within ``STORE_DEADLINE``."""
    started = time.monotonic()
    (result,) = a.store(prompt, timeout=STORE_DEADLINE)
    took = time.monotonic() - started
    assert result["ok"] and took < STORE_DEADLINE, (took, result["log"][-2000:])


def landed(a: Node, shared: SharedL2, prompt: int) -> list[str]:
    """A stores ``prompt``; the names of its objects, once the L2 holds them."""
    before = shared.names()
    store_by_deadline(a, prompt)
    return shared.new_objects(before)


def lookup_by_deadline(b: Node, request_id: str, prompt: int) -> int:
    """B's lookup of ``prompt``: its hit, which must come within
    ``LOOKUP_DEADLINE``."""
    submit_lookup(b, request_id, prompt)
    hit = lookup_result(b, request_id, LOOKUP_DEADLINE)
    assert hit is not None, f"B's lookup {request_id} took over {LOOKUP_DEADLINE}s"
    return hit


def retrieve_what_hits(b: Node, request_id: str, prompt: int, hit: int) -> list[dict]:
    """B retrieves the prompt its lookup ``request_id`` hit (nothing on a miss)."""
    if not hit:
        release(b, request_id, prompt, hit)
        return []
    retrieved = b.retrieve(request_id, prompt)
    b.scheduler.end_session(request_id)
    return retrieved


def wrote_wrong_bytes(retrieved: list[dict]) -> bool:
    """Whether a retrieve left a byte in B's device that A never stored there."""
    return any(result["stray"] for result in retrieved)


def freeze_mid_store_and_prefetch(
    a: Node, b: Node, shared: SharedL2, p: int, q: int, request_id: str
) -> None:
    """Leave Redis frozen (SIGSTOP) with two operations waiting on it: B's lookup
    ``request_id`` of prompt ``p``, which landed in Redis first (mid-prefetch), and
    A's L2 write of prompt ``q``, whose store returned by its deadline
    (mid-store: A's objects stay read-locked). Thawed again if that fails."""
    landed(a, shared, p)
    shared.resp.freeze()
    try:
        submit_lookup(b, request_id, p)
        store_by_deadline(a, q)
        wait_read_locks(a.server, locked=True)
        assert lookup_result(b, request_id, FROZEN) is None, (
            "B's lookup ended while Redis was frozen: the mid-prefetch window is "
            "gone (does LMCache time out L2 operations now?)"
        )
    except BaseException:
        shared.resp.thaw()
        raise
