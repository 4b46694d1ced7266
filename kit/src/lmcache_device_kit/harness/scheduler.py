# SPDX-License-Identifier: Apache-2.0
"""LMCache's scheduler-side adapter for the end-to-end tests' lookups, without vLLM.

Why it exists: ``engine.py`` (worker ranks, and the ``Cluster`` that pairs them
with this scheduler) would pass 300 lines with it; ``engine`` re-exports
``Scheduler``. It imports lmcache only inside ``Scheduler`` (the test processes
import this module at collection) and must not import ``engine`` or ``worker``:
``engine`` imports it. Needs no backend: lookups carry token ids only.
"""

# Future
from __future__ import annotations

# Standard
import time

# First Party
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.worker_kv import BLOCK_SIZE


class Scheduler:
    """LMCache's scheduler-side adapter (what vLLM's connector uses) for lookups."""

    def __init__(
        self,
        server_url: str,
        model: str,
        world_size: int,
        block_size: int = BLOCK_SIZE,
        mq_timeout: float = 20.0,
        mla: bool = False,
    ):
        # Third Party
        import zmq

        self.packed_tokens = lmcache_calls.packed_tokens

        strategy = lmcache_calls.lazy("ParallelStrategy")(
            mla_only=mla,
            vllm_world_size=world_size,
            vllm_worker_id=0,
            tp_size=world_size,
            pp_size=1,
            n_servers=1,
        )
        self.adapter = lmcache_calls.lazy("LMCacheMPSchedulerAdapter")(
            [server_url],
            zmq.Context.instance(),
            model,
            block_size,
            strategy,
            extra_config={
                "lmcache.mp.mq_timeout": mq_timeout,
                "lmcache.mp.heartbeat_interval": 1.0,
            },
        )
        self.mq_timeout = mq_timeout

    def lookup_until(
        self,
        request_prefix: str,
        tokens: list[int],
        expected: int,
        timeout: float = 20.0,
    ) -> tuple[str, int]:
        """Look up with fresh request ids until ``expected`` tokens hit (LMCache-driven
        stores commit asynchronously); returns the request id whose lookup holds the
        read locks, and the hit."""
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            request_id = f"{request_prefix}-{attempt}"
            hit = self.lookup(request_id, tokens)
            if hit >= expected or time.monotonic() > deadline:
                return request_id, hit
            self.release(request_id, tokens, hit)
            attempt += 1
            time.sleep(0.02)

    def lookup(self, request_id: str, tokens: list[int]) -> int:
        """Hit tokens for ``tokens`` (prefix, all ranks); also read-locks them for one
        retrieve."""
        self.adapter.maybe_submit_lookup_request(request_id, self.packed_tokens(tokens))
        deadline = time.monotonic() + self.mq_timeout
        while time.monotonic() < deadline:
            hit = self.adapter.check_lookup_result(request_id)
            if hit is not None:
                return int(hit)
            time.sleep(0.005)
        raise AssertionError(
            f"lookup {request_id!r} did not finish within {self.mq_timeout}s"
        )

    def end_session(self, request_id: str) -> None:
        self.adapter.end_session(request_id)

    def release(self, request_id: str, tokens: list[int], hit: int) -> None:
        """End a lookup that no retrieve will follow: free the read locks its hit holds,
        end its session."""
        if hit:
            self.adapter.free_lookup_locks(
                self.packed_tokens(tokens), 0, hit, request_id
            )
        self.end_session(request_id)

    def close(self) -> None:
        self.adapter.shutdown()
