# SPDX-License-Identifier: Apache-2.0
"""End to end, LMCache-driven, a hybrid model: sliding-window and full-attention
layers in their own engine groups, through the backend's staging.

A server of the test's own (``--separate-object-groups``), as LMCache serves a hybrid
model. Skipped, with the reason, when the spec does not offer LMCache-driven transfer.

Imports torch through the harness's ``worker_kv``: import it from a project's tests
only, after ``conftest.py`` set the environment.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.e2e_lmcache_driven import (
    TOKENS,
    cache_context_class,
)
from lmcache_device_kit.harness.engine import Cluster
from lmcache_device_kit.harness.servers import (
    CHUNK,
    plugin_server_env,
    running_server,
)
from lmcache_device_kit.harness.worker_kv import (
    BLOCK_SIZE,
    DTYPE,
    HEAD_SIZE,
    NUM_HEADS,
    token_ids,
)

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


@pytest.mark.e2e
class BaseE2EHybridModelTests(ConformanceTests):
    """Each engine group's window restored exactly, nothing else written."""

    requires = frozenset({"lmcache_driven"})
    starts_servers = True

    @pytest.mark.own_server
    def test_a_hybrid_model_restores_each_groups_window_byte_exact_and_writes_nothing_else(  # noqa: E501
        self, tmp_path: Path
    ) -> None:
        """Sliding-window and full-attention layers in their own engine groups (own
        block ids), on a server with ``--separate-object-groups``: full attention
        comes back whole, each window exactly its blocks, through this plugin's
        staging; no other byte of any layer changes."""
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
                # per chunk, each group holds K and V of its 2 layers for its kept
                # tokens
                kept_tokens = sum(
                    min(CHUNK, window) if window > 0 else CHUNK
                    for window in HYBRID_WINDOWS
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
            built = f"{cache_context_class()}:" in server.log()
            assert built, "the server must build this plugin's cache context"
