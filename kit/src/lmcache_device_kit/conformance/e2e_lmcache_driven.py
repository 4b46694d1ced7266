# SPDX-License-Identifier: Apache-2.0
"""End to end, LMCache-driven: the server runs the backend and maps the workers' KV
caches on its device.

The server runs with the backend selected (``LMCACHE_DEVICE_BACKEND``) so that its
cache context, event backend and ops are the backend's; workers hand their KV caches
over as the backend's IPC wrapper descriptors through LMCache's codec.
LMCache-driven stores commit asynchronously, so the lookup is polled. Skipped, with
the reason, when the spec does not offer LMCache-driven transfer. The servers are
shared with the rest of the suite, and each (server, TP size) keeps one model's
worker ranks alive across this class's tests. A hybrid model's windows are in
``e2e_hybrid.py``.

Imports torch through the harness's ``worker_kv``: import it from a project's tests
only, after ``conftest.py`` set the environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
import importlib
import itertools
import signal

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.engine import Cluster, workers
from lmcache_device_kit.harness.servers import (
    CHUNK,
    LMCacheServer,
    new_shm_entries,
    shm_entries,
)
from lmcache_device_kit.harness.worker_kv import ONE_BYTE_KV_DTYPES, token_ids

TOKENS = 4 * CHUNK
#: The shared servers running the backend: LMCache-driven only, and ``auto`` (both
#: kinds of worker).
SERVER_KINDS = ["lmcache-driven", "auto"]
_ids = itertools.count()


def worker_mode(server: LMCacheServer, spec: Any) -> str:
    """Against an ``auto`` server, let workers use ``auto`` when the spec makes
    LMCache-driven the default."""
    # after lmcache
    compat = importlib.import_module(f"{kit_backend.current().package}._lmcache_compat")
    if (
        server.transfer_mode == "auto"
        and compat.auto_transfer_mode(spec) == "lmcache_driven"
    ):
        return "auto"
    return "lmcache_driven"


def one_rank_round_trip(
    server: LMCacheServer, spec: Any, log_dir: Path, name: str, **cluster: Any
) -> None:
    """One LMCache-driven rank of a model of its own (``cluster``: ``Cluster``'s
    ``layout`` and ``worker_args``) stores, and retrieves the same bytes; the server
    took no slow path meanwhile."""
    logged = len(server.log())
    model = f"ld-{name}-{next(_ids)}"
    ranks = Cluster(
        server,
        log_dir,
        model=model,
        world_size=1,
        tokens=TOKENS,
        mode=worker_mode(server, spec),
        **cluster,
    )
    try:
        stored = ranks.stored[0]
        assert (
            stored["ok"]
            and stored["transfer_context"] == "LMCacheDrivenTransferContext"
        ), stored["log"][-3000:]
        request_id, hit = ranks.scheduler.lookup_until(model, token_ids(TOKENS), TOKENS)
        assert hit == TOKENS, "the store was acknowledged but never committed"
        retrieved = ranks.retrieve(request_id)
        ranks.scheduler.end_session(request_id)
        assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [(True, True)], (
            retrieved[0]["log"][-3000:]
        )
    finally:
        assert ranks.close() == [0], "the rank must unregister and exit cleanly"
    mark = kit_backend.current().slow_path_mark
    slow = [x for x in server.log()[logged:].splitlines() if mark in x]
    assert not slow, f"the server took a slow path: {slow}"


def cache_context_class() -> str:
    """The name of the backend's cache context class (what its log lines say): the
    subclass of LMCache's ``BaseCacheContext`` its ``cache_context`` module defines,
    or for a backend that extends a built-in, the built-in's module."""
    # First Party
    from lmcache.v1.platform.base.cache_context import BaseCacheContext

    backend = kit_backend.current()
    package = backend.package
    if backend.extends:
        # First Party
        from lmcache_device_kit.compat.builtin import builtin_spec

        package = builtin_spec(backend.extends).__module__
    module = importlib.import_module(f"{package}.cache_context")
    (name,) = {
        value.__name__
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, BaseCacheContext)
        and value.__module__ == module.__name__
    }
    return name


@pytest.mark.e2e
class BaseE2ELMCacheDrivenTests(ConformanceTests):
    """Round trips through the shared servers running the backend, and a killed
    worker."""

    requires = frozenset({"lmcache_driven"})
    starts_servers = True

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(
        cls,
        server: LMCacheServer,
        spec: Any,
        world_size: int,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[Cluster]:
        """``world_size`` LMCache-driven ranks of one model on the shared server;
        none leaves /dev/shm behind."""
        shm_before = shm_entries()
        log_dir = tmp_path_factory.mktemp(
            f"ranks-{server.transfer_mode}-tp{world_size}"
        )
        ranks = Cluster(
            server,
            log_dir,
            model=f"ld-{server.transfer_mode}-tp{world_size}",
            world_size=world_size,
            tokens=TOKENS,
            mode=worker_mode(server, spec),
        )
        yield ranks
        assert ranks.close() == [0] * world_size, (
            "every rank must unregister and exit cleanly"
        )
        assert not new_shm_entries(shm_before), (
            f"left in /dev/shm: {new_shm_entries(shm_before)}"
        )

    @pytest.mark.publishes
    @pytest.mark.parametrize("world_size", [1, 2], ids=["tp1", "tp2"], scope="class")
    @pytest.mark.parametrize("server", SERVER_KINDS, indirect=True)
    def test_round_trip_is_byte_exact_with_the_server_running_the_plugin(
        self,
        server: LMCacheServer,
        spec: Any,
        cluster: Cluster,
        world_size: int,
        record_transfer_times: Callable[..., None],
    ) -> None:
        """Store, poll the lookup until committed, retrieve into zeroed caches:
        identical bytes on every rank."""
        backend = kit_backend.current()
        for result in cluster.stored:
            assert result["ok"], result["log"][-3000:]
            assert result["transfer_context"] == "LMCacheDrivenTransferContext", result[
                "log"
            ][-3000:]
        assert cluster.ready == ["ready"] * world_size
        request_id, hit = cluster.scheduler.lookup_until(
            f"load-{next(_ids)}", token_ids(TOKENS), TOKENS
        )
        assert hit == TOKENS, "the stores were acknowledged but never committed"
        retrieved = cluster.retrieve(request_id)
        cluster.scheduler.end_session(request_id)
        assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [
            (True, True)
        ] * world_size
        record_transfer_times(
            f"lmcache_driven/server={server.transfer_mode}",
            cluster.stored + retrieved,
            world_size,
        )
        log = server.log()
        assert f"torch_device_type={backend.device_type}" in log, (
            "the server must run with this plugin's device"
        )
        assert f"{cache_context_class()}:" in log, (
            "the server must build this plugin's cache context"
        )
        assert f"{spec.ops_cls.__name__}: serving pointer-mode" in log, (
            "the server must run this plugin's ops"
        )
        slow = [line for line in log.splitlines() if backend.slow_path_mark in line]
        assert not slow, f"the server took a slow path: {slow}"

    # Registered layouts beyond a tight flash cache (strided: as support.STRIDED).
    @pytest.mark.parametrize(
        ("layout", "memory"),
        [
            ("mla", "tight"),
            ("kv_planes", "tight"),
            ("mla", "padded"),
            ("flash", "blocks_first"),
        ],
    )
    @pytest.mark.parametrize("server", ["lmcache-driven"], indirect=True)
    def test_mla_plane_tuples_and_strided_caches_round_trip_byte_exact_through_the_server(  # noqa: E501
        self,
        server: LMCacheServer,
        spec: Any,
        tmp_path: Path,
        layout: str,
        memory: str,
    ) -> None:
        """MLA ((blocks, block_size, head_size) per layer, ``mla_only``), layers
        registered as (K, V) tuples of separate allocations (vLLM's Ascend plugin),
        padded MLA blocks and flash attention stored blocks first: stored and
        retrieved by the server through this plugin's IPC wrapper (strides and
        offsets kept), cache context and ops: same bytes, the padding never written,
        no slow path."""
        if layout == "kv_planes" and not lmcache_calls.wraps_plane_sequences():
            pytest.skip(
                "this lmcache wraps only tensors: plane tuples arrive with 0.5.6"
            )
        name, worker_args = f"{layout}-{memory}", ["--memory", memory]
        one_rank_round_trip(
            server, spec, tmp_path, name, layout=layout, worker_args=worker_args
        )

    @pytest.mark.parametrize("dtype", ONE_BYTE_KV_DTYPES)
    @pytest.mark.parametrize("server", ["lmcache-driven"], indirect=True)
    def test_fp8_int8_and_uint8_caches_round_trip_byte_exact_through_the_server(
        self, server: LMCacheServer, spec: Any, tmp_path: Path, dtype: str
    ) -> None:
        """One-byte KV caches (fp8 e4m3 and e5m2, int8, uint8), every bit pattern in
        them (fp8 NaNs too), stored and retrieved by the server through this plugin:
        the same bytes, no slow path."""
        worker_args = ["--dtype", dtype]
        one_rank_round_trip(server, spec, tmp_path, dtype, worker_args=worker_args)

    @pytest.mark.parametrize("server", SERVER_KINDS, indirect=True)
    def test_a_killed_worker_leaves_nothing_in_dev_shm(
        self, server: LMCacheServer, spec: Any, tmp_path: Path
    ) -> None:
        """SIGKILL a registered worker: no /dev/shm segment survives it, and the
        server stays healthy."""
        shm_before = shm_entries()
        mode = worker_mode(server, spec)
        model = f"ld-kill-{server.transfer_mode}-{next(_ids)}"
        with workers(
            server.url, tmp_path, model=model, world_size=1, tokens=TOKENS, mode=mode
        ) as ranks:
            assert ranks[0].next_result()["ok"]
            assert ranks[0].next_result()["phase"] == "ready"
            ranks[0].process.send_signal(signal.SIGKILL)
            ranks[0].process.wait(timeout=30)
        assert not new_shm_entries(shm_before), (
            f"left in /dev/shm: {new_shm_entries(shm_before)}"
        )
        assert server.status()["is_healthy"] is True
