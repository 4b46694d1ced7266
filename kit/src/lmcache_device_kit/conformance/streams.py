# SPDX-License-Identifier: Apache-2.0
"""Ordering on a stream, made deterministic: hold a stream, queue work behind it, say
when what was published appeared.

Why a module of its own: the ordering tests (streams, events, native recorders) share
these; ``support.py`` holds the rest of the suite's helpers. Holding a stream is the
CPU emulator's test facility (``hold_stream``); on a device runtime without it the
tests that need it skip.

Imports torch: import it from tests only, after ``conftest.py`` set the environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple
import time

# Third Party
import torch

#: Seconds after which work queued on any stream but a held one has run (the emulator's
#: latency is 200 µs).
SETTLE = 0.1


class Hold:
    """What ``held()`` gives its block: how long the block's calls took, and a wait for
    other streams' work."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def settle(self) -> float:
        """Seconds since the block began (its calls' duration), then wait ``SETTLE``:
        anything the calls
        queued on another stream, or ran on the host, has happened by the time this
        returns."""
        took = time.monotonic() - self.started
        time.sleep(SETTLE)
        return took


@contextmanager
def held(stream: Any, timeout: float = 5) -> Iterator[Hold]:
    """``stream`` held until the block ends (the emulator's ``hold_stream``): work
    queued on it meanwhile has not run, deterministically. Fails the test if the hold
    expires first (after ``timeout``: the block waited for the stream it holds). Skips
    the test on a runtime without that test facility (a device)."""
    # Third Party
    import pytest

    hold_stream = getattr(getattr(torch, stream.device.type), "hold_stream", None)
    if hold_stream is None:
        pytest.skip(f"torch.{stream.device.type} has no hold_stream (the emulator's)")
    hold = hold_stream(stream, timeout)
    expired = False
    try:
        yield Hold()
    finally:
        expired = hold.release()
    # Not in `finally`: an error raised in the block is the one to report.
    assert not expired, (
        f"the hold on {stream} expired after {timeout:g}s, before its block ended: a "
        "call in the block waited for the held stream (a blocking copy or a "
        "synchronize?), so the stream ran its queue and the test's ordering is not "
        "what it claims. Queue that call before the hold, or make it non-blocking."
    )


class Published(NamedTuple):
    """What ``publish_behind_a_hold`` saw."""

    early: list  # drained as soon as the publishing call returned
    late: list  # drained once the stream had run
    waited: bool  # the call returned only after the held work had run

    @property
    def too_soon(self) -> bool:
        """Published while the work queued before the publish had not run."""
        return bool(self.early) and not self.waited


def publish_behind_a_hold(
    stream: Any,
    publish: Callable[[], object],
    drain: Callable[[], list],
    seconds: float = 1.0,
) -> Published:
    """Call ``publish()`` while ``stream`` is held for ``seconds``, and say when what
    it published appeared. Either way of publishing after a stream's work passes: a
    host function (returns at once, publishes later; one that takes the GIL is
    reported as a deadlock here) or a synchronization (returns once the hold has
    expired)."""
    runtime = getattr(torch, stream.device.type)
    drain()  # what earlier tests left
    hold = runtime.hold_stream(stream, seconds)
    try:
        publish()
        early = drain()
    finally:
        waited = hold.release()
    # The runtime module's own wait, which keeps the GIL behind a host function (as a
    # vendor binding may; torch's Stream.synchronize releases it).
    runtime.synchronize(stream.device)
    return Published(early, drain(), waited)


def publishes_from_host_functions(ops: Any, device: str) -> bool:
    """Whether ``ops`` publish completions from host functions (native recorders on a
    runtime that launches them) rather than by synchronizing the stream first."""
    recorder = getattr(ops.record_completion_on_stream, "__module__", None) or ""
    runtime = getattr(torch, device)
    return recorder.endswith(".native_ops") and hasattr(runtime, "host_func_launcher")
