# SPDX-License-Identifier: Apache-2.0
"""Nodes of a cluster on one host: ``lmcache server`` processes sharing one L2, each
with its own worker ranks and scheduler.

Why it exists: a node stands for one host of a vendor's cluster (its server, its
engine's ranks on its devices); the cluster tests (``conformance/cluster.py``), the
fault tests that break the L2 under them and a two-node benchmark cell all start
nodes the same way. A node's ranks all serve ``MODEL`` and store ``FIRST`` at
start, so rank r of one node seeds the same bytes for a prompt as rank r of any
other: what one stores, another can check byte for byte.

Imports neither lmcache nor torch (its servers and ranks are processes of their
own; the scheduler imports lmcache when one is made).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
import itertools
import os
import time

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.harness.engine import Scheduler, Worker, close_all
from lmcache_device_kit.harness.servers import CHUNK, LMCacheServer, plugin_server_env
from lmcache_device_kit.harness.worker_kv import token_ids

TOKENS = 2 * CHUNK
#: Every rank's first prompt, stored at its start; the bytes a rank seeds for another
#: prompt depend on the distance from it, so ranks of one TP rank on both nodes
#: seed the same bytes for the same prompt.
FIRST = 7
#: L1 per server: small, and a multiple of 4 KiB (P2P channels register it in pages).
L1_GB = 0.0625
#: Every node's one model (the TP=1 and TP=2 ranks of a node serve the same model).
MODEL = "cluster-model"
_pools = itertools.count()


@dataclass
class Node:
    """One node: its server, its worker ranks of one model, and its scheduler."""

    server: LMCacheServer
    ranks: list[Worker]
    scheduler: Scheduler

    def store(self, first_token: int, timeout: float = 60) -> list[dict]:
        """Every rank stores the prompt starting at ``first_token``; their results
        (each within ``timeout`` seconds)."""
        for rank in self.ranks:
            rank.store(first_token)
        return [rank.next_result(timeout) for rank in self.ranks]

    def retrieve(self, request_id: str, first_token: int) -> list[dict]:
        for rank in self.ranks:
            rank.retrieve(request_id, first_token)
        return [rank.next_result() for rank in self.ranks]

    def close(self) -> list[int]:
        self.scheduler.close()
        return close_all(self.ranks)


def start_server(
    name: str,
    mode: str,
    l2: dict | None,
    log_dir: Path,
    extra_args: tuple = (),
    **options: Any,
) -> LMCacheServer:
    """A node's server: its own L1 (an SHM pool engine-driven, the plugin
    LMCache-driven), the shared L2 if any, and ``extra_args`` (P2P's flags);
    ``options`` go to ``LMCacheServer`` (a benchmark's chunk size, L1, env)."""
    env = dict(options.pop("env", None) or {})
    options = {"transfer_mode": mode, "l1_size_gb": L1_GB, **options}
    if mode == "engine_driven":
        options["shm_name"] = f"e2e_cluster_{name}_{os.getpid()}_{next(_pools)}"
    else:
        env = {**plugin_server_env(), **env}
        extra_args = ("--l1-init-size-gb", "0", *extra_args)
    return LMCacheServer(
        log_dir / f"node-{name}.log",
        l2_adapters=[l2] if l2 else [],
        extra_args=extra_args,
        env=env,
        **options,
    )


@contextmanager
def node(
    server: LMCacheServer, mode: str, devices: list[int], logs: Path
) -> Iterator[Node]:
    """A node of ``server``: one rank per entry of ``devices`` (rank r on device
    ``devices[r]``), each has stored ``FIRST``; closed after the block."""
    world_size, name = len(devices), server.log_path.stem
    ranks = []
    argv = ["--layers", "2", "--first-token", str(FIRST), "--mq-timeout", "10"]
    for rank, index in enumerate(devices):
        log = logs / f"{name}-tp{world_size}-rank{rank}.log"
        ranks.append(
            Worker(server.url, model=MODEL, rank=rank, world_size=world_size,
                   tokens=TOKENS, log_path=log, mode=mode,
                   extra_args=[*argv, "--device-index", str(index)])
        )  # fmt: skip
    started = Node(server, ranks, Scheduler(server.url, MODEL, world_size))
    try:
        for worker in ranks:
            first = worker.next_result(120)
            assert first["phase"] == "store" and first["ok"], first["log"][-3000:]
            assert worker.next_result()["phase"] == "ready"
        yield started
    finally:
        codes = started.close()
    assert codes == [0] * world_size, "every rank must unregister and exit cleanly"


@contextmanager
def two_nodes(mode: str, l2: dict, logs: Path) -> Iterator[tuple[Node, Node]]:
    """Node A (one rank on device 0) and node B (one rank on device 1), each on a
    server of its own started side by side, sharing ``l2``; every rank and server
    stopped after the block, whatever it raised."""
    with running_pair([start_server(name, mode, l2, logs) for name in "AB"]) as pair:
        with node_pair(pair, mode, logs) as ab:
            yield ab


@contextmanager
def node_pair(
    servers: tuple[LMCacheServer, LMCacheServer] | list[LMCacheServer],
    mode: str,
    logs: Path,
) -> Iterator[tuple[Node, Node]]:
    """One rank per node: A's on device 0, B's on device 1 (both rank 0)."""
    with node(servers[0], mode, [0], logs) as a, node(servers[1], mode, [1], logs) as b:
        yield a, b


@contextmanager
def running_pair(
    pair: list[LMCacheServer],
) -> Iterator[tuple[LMCacheServer, LMCacheServer]]:
    """Two nodes' servers, started side by side and stopped side by side (each
    takes seconds either way), whatever the block raised."""
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(LMCacheServer.start, pair))
        yield pair[0], pair[1]
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(LMCacheServer.stop, pair))


def device(index: int) -> str:
    return f"{kit_backend.current().device_type}:{index}"


def retrieved_on(results: list[dict]) -> list[tuple[bool, bool, str]]:
    """Per rank: whether the retrieve succeeded, byte-exact, and on which device."""
    return [(r["ok"], r["bytes_match"], r["kv_device"]) for r in results]


def why(results: list[dict]) -> list[tuple[str, dict, list]]:
    return [(r["error"], r["restored"], r["stray"]) for r in results]


def lookup_once(at: Node, request_id: str, first_token: int) -> int:
    """One lookup on node ``at`` (its read locks freed at once): the tokens that
    hit."""
    tokens = token_ids(TOKENS, first_token)
    hit = at.scheduler.lookup(request_id, tokens)
    at.scheduler.release(request_id, tokens, hit)
    return hit


def lookup_until_stored(at: Node, prefix: str, first_token: int) -> tuple[str, int]:
    """Poll node ``at``'s lookups until the whole prompt hits (the L2 write lands in
    the background after the store returned); the lookup holding the read locks."""
    tokens = token_ids(TOKENS, first_token)
    return at.scheduler.lookup_until(prefix, tokens, TOKENS, timeout=30)


def release(at: Node, request_id: str, first_token: int, hit: int) -> None:
    at.scheduler.release(request_id, token_ids(TOKENS, first_token), hit)


def wait_read_locks(server: LMCacheServer, locked: bool, within: float = 10) -> None:
    """Wait until ``server``'s L1 holds read locks (``locked``) or none: a
    LMCache-driven retrieve's locks are released by the server after the rank's
    retrieve returned (seen under load), so one read right after it would race."""
    deadline = time.monotonic() + within
    while (server.l1_status()["read_locked_count"] > 0) != locked:
        assert time.monotonic() < deadline, (
            f"{server.log_path.stem}: L1 read locks {'never' if locked else 'still'}"
            f" held after {within}s"
        )
        time.sleep(0.02)
