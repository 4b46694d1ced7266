# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""End to end, LMCache-driven: the server runs this plugin and maps the workers'
{{ cookiecutter.device_name }} KV caches.

The server runs with this plugin selected (``LMCACHE_DEVICE_BACKEND``) so that
its cache context, event backend and ops are the plugin's; workers hand their
KV caches over as ``{{ cookiecutter.class_prefix }}IPCWrapper`` descriptors
through LMCache's codec.
LMCache-driven stores commit asynchronously, so the lookup is polled.
Skipped, with the reason, when the spec does not offer LMCache-driven transfer.
The servers are shared with the rest of the suite, and each (server, TP size)
keeps one model's worker ranks alive across this module's tests.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
import itertools
import signal

# Third Party
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.engine import Cluster, workers
from lmcache_device_kit.harness.servers import (
    CHUNK,
    LMCacheServer,
    new_shm_entries,
    plugin_server_env,
    running_server,
    shm_entries,
)
from lmcache_device_kit.harness.worker_kv import (
    BLOCK_SIZE,
    DTYPE,
    HEAD_SIZE,
    NUM_HEADS,
    token_ids,
)
import pytest

# First Party
from {{ cookiecutter.__package }}.names import SLOW_PATH_MARK

pytestmark = pytest.mark.e2e

TOKENS = 4 * CHUNK
DEVICE = "{{ cookiecutter.device_name }}"
#: The shared servers running this plugin: LMCache-driven only, and ``auto`` (both kinds
#: of worker).
SERVER_KINDS = ["lmcache-driven", "auto"]
_ids = itertools.count()


def worker_mode(server: LMCacheServer, spec) -> str:  # type: ignore[no-untyped-def]
    """Against an ``auto`` server, let workers use ``auto`` when the spec makes
    LMCache-driven the default."""
    # First Party
    # after lmcache
    from {{ cookiecutter.__package }}._lmcache_compat import (
        auto_transfer_mode,
    )

    if server.transfer_mode == "auto" and auto_transfer_mode(spec) == "lmcache_driven":
        return "auto"
    return "lmcache_driven"


@pytest.fixture(scope="module")
def cluster(  # type: ignore[no-untyped-def]
    server: LMCacheServer,
    spec,
    world_size: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    """``world_size`` LMCache-driven ranks of one model on the shared server; none
    leaves /dev/shm behind."""
    shm_before = shm_entries()
    log_dir = tmp_path_factory.mktemp(f"ranks-{server.transfer_mode}-tp{world_size}")
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


@pytest.mark.parametrize("world_size", [1, 2], ids=["tp1", "tp2"], scope="module")
@pytest.mark.parametrize("server", SERVER_KINDS, indirect=True)
def test_round_trip_is_byte_exact_with_the_server_running_the_plugin(
    server: LMCacheServer,
    cluster: Cluster,
    world_size: int,
    record_transfer_times: Callable[..., None],
) -> None:
    """Store, poll the lookup until committed, retrieve into zeroed caches: identical
    bytes on every rank."""
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
    assert f"torch_device_type={DEVICE}" in log, (
        "the server must run with this plugin's device"
    )
    assert "{{ cookiecutter.class_prefix }}CacheContext:" in log, (
        "the server must build this plugin's cache context"
    )
    assert "{{ cookiecutter.class_prefix }}DeviceOps: serving pointer-mode" in log, (
        "the server must run this plugin's ops"
    )
    slow = [line for line in log.splitlines() if SLOW_PATH_MARK in line]
    assert not slow, f"the server took a slow path: {slow}"


# Registered layouts beyond a tight flash cache (strided: as _support.STRIDED).
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
def test_mla_plane_tuples_and_strided_caches_round_trip_byte_exact_through_the_server(  # type: ignore[no-untyped-def]
    server: LMCacheServer, spec, tmp_path: Path, layout: str, memory: str
) -> None:
    """MLA ((blocks, block_size, head_size) per layer, ``mla_only``), layers registered
    as (K, V) tuples of separate allocations (vLLM's Ascend plugin), padded MLA blocks
    and flash attention stored blocks first: stored and retrieved by the server through
    this plugin's IPC wrapper (strides and offsets kept), cache context and ops: same
    bytes, the padding never written, no slow path."""
    if layout == "kv_planes" and not lmcache_calls.wraps_plane_sequences():
        pytest.skip("this lmcache wraps only tensors: plane tuples arrive with 0.5.6")
    logged = len(server.log())
    ranks = Cluster(
        server,
        tmp_path,
        model=f"ld-{layout}-{memory}-{next(_ids)}",
        world_size=1,
        tokens=TOKENS,
        mode=worker_mode(server, spec),
        layout=layout,
        worker_args=["--memory", memory],
    )
    try:
        stored = ranks.stored[0]
        assert (
            stored["ok"]
            and stored["transfer_context"] == "LMCacheDrivenTransferContext"
        ), stored["log"][-3000:]
        request_id, hit = ranks.scheduler.lookup_until(
            f"{layout}-{memory}-{next(_ids)}", token_ids(TOKENS), TOKENS
        )
        assert hit == TOKENS, "the store was acknowledged but never committed"
        retrieved = ranks.retrieve(request_id)
        ranks.scheduler.end_session(request_id)
        assert [(r["ok"], r["bytes_match"]) for r in retrieved] == [(True, True)], (
            retrieved[0]["log"][-3000:]
        )
    finally:
        assert ranks.close() == [0], "the rank must unregister and exit cleanly"
    slow = [x for x in server.log()[logged:].splitlines() if SLOW_PATH_MARK in x]
    assert not slow, f"the server took a slow path: {slow}"


#: A hybrid model's engine groups, by sliding window in tokens: full attention (-1), a
#: window shorter than a chunk (each chunk keeps only its last window) and one longer
#: (the chunks it reaches, whole).
HYBRID_WINDOWS = [-1, CHUNK // 2, CHUNK + CHUNK // 2]


def restored_blocks(window: int) -> list[int]:
    """The prompt's blocks a retrieve restores for a group with this window: LMCache
    reads the chunks the window reaches from the end, and of each only the last
    ``window`` tokens (all of them without one)."""
    if window < 0:
        return list(range(TOKENS // BLOCK_SIZE))
    chunks, kept = -(-window // CHUNK), min(window, CHUNK)
    ends = range(TOKENS - (chunks - 1) * CHUNK, TOKENS + 1, CHUNK)
    return [
        token // BLOCK_SIZE
        for end in ends
        for token in range(end - kept, end, BLOCK_SIZE)
    ]


@pytest.mark.own_server
def test_a_hybrid_model_restores_each_groups_window_byte_exact_and_writes_nothing_else(  # type: ignore[no-untyped-def]
    spec, tmp_path: Path
) -> None:
    """Sliding-window and full-attention layers in their own engine groups (own block
    ids), on a server with ``--separate-object-groups``: full attention comes back
    whole, each window exactly its blocks, through this plugin's staging; no other byte
    of any layer changes."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    windows = ",".join(map(str, HYBRID_WINDOWS))
    with running_server(
        tmp_path / "server.log",
        transfer_mode="lmcache_driven",
        env=plugin_server_env(),
        extra_args=["--separate-object-groups"],
    ) as server:
        ranks = Cluster(
            server,
            tmp_path,
            model="ld-hybrid",
            world_size=1,
            tokens=TOKENS,
            mode="lmcache_driven",
            worker_args=[
                "--layers",
                str(2 * len(HYBRID_WINDOWS)),
                f"--sw-windows={windows}",
            ],
        )
        try:
            assert ranks.stored[0]["ok"], ranks.stored[0]["log"][-3000:]
            request_id, hit = ranks.scheduler.lookup_until(
                "hybrid", token_ids(TOKENS), TOKENS
            )
            assert hit == TOKENS, "the store was acknowledged but never committed"
            # per chunk, each group holds K and V of its 2 layers for its kept tokens
            kept_tokens = sum(
                min(CHUNK, window) if window > 0 else CHUNK for window in HYBRID_WINDOWS
            )
            token_bytes = 2 * 2 * NUM_HEADS * HEAD_SIZE * DTYPE.itemsize
            stored_bytes = server.l1_status()["memory_used_bytes"]
            assert stored_bytes == TOKENS // CHUNK * kept_tokens * token_bytes, (
                "a window must store only its tokens"
            )
            retrieved = ranks.retrieve(request_id)[0]
            ranks.scheduler.end_session(request_id)
        finally:
            assert ranks.close() == [0], "the rank must unregister and exit cleanly"
        assert retrieved["ok"], retrieved["log"][-3000:]
        expected = {
            f"layer.{layer}": restored_blocks(
                HYBRID_WINDOWS[layer % len(HYBRID_WINDOWS)]
            )
            for layer in range(2 * len(HYBRID_WINDOWS))
        }
        assert (retrieved["restored"], retrieved["stray"]) == (expected, []), (
            server.log_tail()
        )
        built = "{{ cookiecutter.class_prefix }}CacheContext:" in server.log()
        assert built, "the server must build this plugin's cache context"


@pytest.mark.parametrize("server", SERVER_KINDS, indirect=True)
def test_a_killed_worker_leaves_nothing_in_dev_shm(
    server: LMCacheServer, spec, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL a registered worker: no /dev/shm segment survives it, and the server
    stays healthy."""
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
