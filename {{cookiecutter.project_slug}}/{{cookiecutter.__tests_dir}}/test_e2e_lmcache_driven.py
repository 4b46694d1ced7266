# SPDX-License-Identifier: {{ cookiecutter.license }}
"""End to end, LMCache-driven: the server maps the workers' {{ cookiecutter.device_name }} KV caches and runs this plugin.

The server runs with this plugin selected (``LMCACHE_DEVICE_BACKEND``) so that
its cache context, event backend and ops are the plugin's; workers hand their
KV caches over as ``{{ cookiecutter.class_prefix }}IPCWrapper`` descriptors through LMCache's codec.
LMCache-driven stores commit asynchronously, so the lookup is polled.
Skipped, with the reason, when the spec does not offer LMCache-driven transfer.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import LMCacheServer, Scheduler, check_round_trip, running_server, workers
from e2e_worker import BLOCK_SIZE, token_ids

pytestmark = pytest.mark.e2e

CHUNK = 64
TOKENS = 4 * CHUNK
DEVICE = "{{ cookiecutter.device_name }}"
#: The server runs this plugin: its cache context, event backend and ops.
SERVER_ENV = {
    "LMCACHE_DEVICE_BACKEND": "{{ cookiecutter.backend_name }}",
    "{{ cookiecutter.__emulator_env_var }}": os.environ.get("{{ cookiecutter.__emulator_env_var }}", "1"),
}
_ids = itertools.count()


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.fixture(scope="module", params=["lmcache_driven", "auto"])
def server(  # type: ignore[no-untyped-def]
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spec
) -> Iterator[LMCacheServer]:
    """A real server with this plugin selected, accepting LMCache-driven workers (``auto``: both kinds)."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    log = tmp_path_factory.mktemp(f"server-{request.param}") / "server.log"
    with running_server(log, transfer_mode=request.param, shm_name=None, chunk_size=CHUNK, env=SERVER_ENV) as srv:
        srv.mode = request.param  # type: ignore[attr-defined]
        yield srv


def worker_mode(server: LMCacheServer, spec) -> str:  # type: ignore[no-untyped-def]
    """Against an ``auto`` server, let workers use ``auto`` when the spec makes LMCache-driven the default."""
    from {{ cookiecutter.__package }}._lmcache_compat import auto_transfer_mode  # after lmcache

    if server.mode == "auto" and auto_transfer_mode(spec) == "lmcache_driven":
        return "auto"
    return "lmcache_driven"


@pytest.mark.parametrize("world_size", [1, 2], ids=["tp1", "tp2"])
def test_round_trip_is_byte_exact_with_the_server_running_the_plugin(  # type: ignore[no-untyped-def]
    server: LMCacheServer, spec, world_size: int, tmp_path: Path
) -> None:
    """Store, poll the lookup until committed, retrieve into zeroed caches: identical bytes on every rank."""
    n = next(_ids)
    model = f"ld-{server.mode}-tp{world_size}-{n}"  # type: ignore[attr-defined]
    tokens = token_ids(TOKENS)
    shm_before = shm_entries()
    scheduler = Scheduler(server.url, model, world_size, BLOCK_SIZE)
    try:
        mode = worker_mode(server, spec)
        with workers(server.url, tmp_path, model=model, world_size=world_size, tokens=TOKENS, mode=mode) as ranks:
            stored = [w.next_result() for w in ranks]
            for result in stored:
                assert result["ok"], result["log"][-3000:]
                assert result["transfer_context"] == "LMCacheDrivenTransferContext", result["log"][-3000:]
            assert [w.next_result()["phase"] for w in ranks] == ["ready"] * world_size
            request_id, hit = scheduler.lookup_until(f"load-{n}", tokens, TOKENS)
            assert hit == TOKENS, "the stores were acknowledged but never committed"
            for w in ranks:
                w.retrieve(request_id)
            retrieved = [w.next_result() for w in ranks]
            scheduler.end_session(request_id)
            assert [w.close() for w in ranks] == [0] * world_size
    finally:
        scheduler.close()
    check_round_trip(f"lmcache_driven/server={server.mode}", stored, retrieved, world_size)  # type: ignore[attr-defined]
    log = server.log()
    assert f"torch_device_type={DEVICE}" in log, "the server must run with this plugin's device"
    assert "{{ cookiecutter.class_prefix }}CacheContext:" in log, "the server must build this plugin's cache context"
    assert "{{ cookiecutter.class_prefix }}DeviceOps: serving pointer-mode" in log, "the server must run this plugin's ops"
    assert shm_entries() <= shm_before, f"left in /dev/shm: {sorted(shm_entries() - shm_before)}"


def test_a_killed_worker_leaves_nothing_in_dev_shm(server: LMCacheServer, spec, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL a registered worker: no /dev/shm segment survives it, and the server stays healthy."""
    n = next(_ids)
    shm_before = shm_entries()
    mode = worker_mode(server, spec)
    with workers(server.url, tmp_path, model=f"ld-kill-{n}", world_size=1, tokens=TOKENS, mode=mode) as ranks:
        assert ranks[0].next_result()["ok"]
        assert ranks[0].next_result()["phase"] == "ready"
        ranks[0].process.send_signal(signal.SIGKILL)
        ranks[0].process.wait(timeout=30)
    assert shm_entries() <= shm_before, f"left in /dev/shm: {sorted(shm_entries() - shm_before)}"
    assert server.status()["is_healthy"] is True
