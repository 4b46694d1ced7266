# SPDX-License-Identifier: Apache-2.0
"""Bad input: each ends with a clear error within 30 s, never a hang, never a wrong
byte.

Each case drives a real ``lmcache server`` on 127.0.0.1 with short timeouts: a store
of a token range that is not chunk aligned, KV caches whose layers disagree in shape,
dtype or device. Server faults are in ``faults.py``.

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import sys
import textwrap
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.engine import (
    MQ_TIMEOUT,
    TIMED_OUT_MQ_TIMEOUT,
    Scheduler,
    start_worker,
)
from lmcache_device_kit.harness.servers import CHUNK, LMCacheServer
from lmcache_device_kit.harness.spawn import child_env

DEADLINE_S = 30

BAD_KV = textwrap.dedent(
    """
    import json, sys, time
    import lmcache, torch, zmq
    from lmcache.integration.vllm import vllm_multi_process_adapter as mp
    from lmcache_device_kit.harness import lmcache_calls as harness

    url, fault = sys.argv[1], sys.argv[2]
    kv = {
        f"layer.{i}": torch.ones(
            (2, 12, 16, 2, 32), dtype=torch.float16, device=__DEVICE__
        )
        for i in range(2)
    }
    if fault == "mixed-shapes":
        kv["layer.1"] = torch.ones(
            (2, 12, 16, 2, 16), dtype=torch.float16, device=__DEVICE__
        )
    elif fault == "mixed-dtypes":
        kv["layer.1"] = kv["layer.1"].to(torch.bfloat16)
    elif fault == "mixed-devices":
        kv["layer.1"] = kv["layer.1"].cpu()
    strategy = mp.ParallelStrategy(
        mla_only=False, vllm_world_size=1, vllm_worker_id=0, tp_size=1, pp_size=1,
        n_servers=1
    )
    config = {
        "lmcache.mp.mq_timeout": 5.0,
        "lmcache.mp.mp_transfer_mode": "engine_driven",
    }
    model = "fault-kv-" + fault
    adapter = mp.LMCacheMPWorkerAdapter(
        url, zmq.Context.instance(), model, 16, strategy, extra_config=config
    )
    outcome = {"registered": False, "stored": None, "error": ""}
    try:
        harness.register_kv_caches(adapter, kv)
        outcome["registered"] = True
        tokens = list(range(64))
        op = harness.load_store_op(tokens, [[0, 1, 2, 3]], 0, 64)
        event = harness.recorded_event(adapter, __DEVICE__)
        adapter.submit_store_request(model, op, event)
        outcome["stored"] = bool(adapter.store_futures[model].result(timeout=10))
    except Exception as exc:
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(outcome), flush=True)
    adapter.shutdown()
    """
)


class BaseBadInputTests(ConformanceTests):
    """A partial chunk and malformed KV caches, against a real server."""

    starts_servers = True

    @pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
    def test_a_token_range_that_is_not_chunk_aligned_stores_nothing_and_the_server_says_why(  # noqa: E501
        self, server: LMCacheServer, tmp_path: Path
    ) -> None:
        """A store of a partial chunk reports failure within 30 s, stores nothing, and
        the server log names the rule."""
        # First Party
        from lmcache_device_kit.harness.worker_kv import BLOCK_SIZE, token_ids

        tokens = CHUNK + BLOCK_SIZE  # one chunk and one block
        # Registered, with an aligned prompt stored; the server drops the partial
        # store, so it times out.
        worker = start_worker(
            server, tmp_path, "aligned", mq_timeout=TIMED_OUT_MQ_TIMEOUT
        )
        try:
            started = time.monotonic()
            worker.store(90_000, tokens)
            result = worker.next_result(timeout=DEADLINE_S)
            assert time.monotonic() - started < DEADLINE_S
            assert result["phase"] == "store" and result["ok"] is False
            scheduler = Scheduler(
                server.url, "fault-aligned", 1, mq_timeout=float(MQ_TIMEOUT)
            )
            try:
                # The lookup can hit: the aligned prompt stored at start is found ...
                request_id, hit = scheduler.lookup_until(
                    "aligned", token_ids(2 * CHUNK), 2 * CHUNK, timeout=10
                )
                scheduler.release(request_id, token_ids(2 * CHUNK), hit)
                assert hit == 2 * CHUNK
                # ... and the partial one left nothing.
                hit = scheduler.lookup("partial", token_ids(tokens, 90_000))
                assert hit == 0, (
                    "a failed store must leave nothing, not even its aligned first "
                    "chunk"
                )
            finally:
                scheduler.close()
            assert f"must be a multiple of chunk_size ({CHUNK})" in server.log()
        finally:
            worker.close(timeout=30)

    @pytest.mark.parametrize(
        ("fault", "message"),
        [
            (
                "mixed-shapes",
                "KV cache layers of one transfer must share shape, dtype and device",
            ),
            (
                "mixed-dtypes",
                "KV cache layers of one transfer must share shape, dtype and device",
            ),
            ("mixed-devices", "All KV cache tensors must share one device type"),
        ],
    )
    @pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
    def test_malformed_kv_caches_are_refused_with_a_reason_and_store_nothing(
        self, server: LMCacheServer, tmp_path: Path, fault: str, message: str
    ) -> None:
        """Layers that disagree in shape, dtype or device: refused or failed within
        30 s, reason logged, nothing stored."""
        started = time.monotonic()
        device = repr(kit_backend.current().device_type)
        done = spawn.run(
            [
                sys.executable,
                "-c",
                BAD_KV.replace("__DEVICE__", device),
                server.url,
                fault,
            ],
            timeout=DEADLINE_S + 30,
            env=child_env({}),
            cwd=tmp_path,
        )
        # Interpreter and emulator start-up included.
        assert time.monotonic() - started < DEADLINE_S + 10
        outcome = json.loads(done.stdout.splitlines()[-1])
        assert outcome["stored"] is not True, outcome
        assert message in outcome["error"] + done.stderr, done.stderr[-3000:]
        scheduler = Scheduler(
            server.url, f"fault-kv-{fault}", 1, mq_timeout=float(MQ_TIMEOUT)
        )
        try:
            if outcome["registered"]:
                assert scheduler.lookup(f"bad-{fault}", list(range(64))) == 0, (
                    "a refused store must leave nothing"
                )
        finally:
            scheduler.close()
