# SPDX-License-Identifier: Apache-2.0
"""The three ways a runtime runs a host function after a stream's work, each the
emulator's mode (``..._HOST_FUNCS``) and each a model a plugin declares
(``runtime.py``'s ``host_function_model``):

* ``launch`` (CUDA's ``cudaLaunchHostFunc``): a C function pointer runs on the
  stream; one that takes the GIL deadlocks against a wait that keeps it;
* ``subscribed`` (Ascend's ``aclrtLaunchCallback``): it runs only on a host thread
  subscribed to the stream while that thread processes reports;
* ``none`` (torch_npu, torch_musa): the plugin synchronizes, then publishes.

Each test here runs its model in a fresh interpreter, or in this one when the
suite's emulator runs it; the tests marked ``publishes`` (stream order, cache
context, LMCache-driven round trips) run under each model in the template's CI.

Why not ``stream_order.py``: these are the runtime's models, not its order.

Imports torch; lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.streams import SETTLE
from lmcache_device_kit.conformance.support import run_python


class BaseHostFunctionModelsTests(ConformanceTests):
    """What each host-function model runs, and what it refuses."""

    def test_a_host_function_that_takes_the_gil_is_a_deadlock_a_wait_reports(
        self, runtime: Any
    ) -> None:
        """A runtime launches host functions as C function pointers, and its waits need
        not release the GIL: a Python callable passed as one (through ctypes) blocks
        on the GIL that a thread waiting for the stream holds. The emulator's waits
        keep the GIL while a host function is queued and report that deadlock instead
        of hanging."""
        # Standard
        import ctypes

        if not hasattr(runtime, "host_func_launcher"):
            module = kit_backend.current().torch_module_name
            pytest.skip(f"torch.{module} launches no host functions")
        stream, calls = runtime.Stream(0), []
        callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: calls.append(1))
        launch = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
        )(runtime.host_func_launcher())
        handle = runtime.stream_handle(stream)
        # Held, so the host function starts only once this thread waits holding the
        # GIL (unheld, it may run first, in a moment this thread gives the GIL up).
        runtime.hold_stream(stream, SETTLE)
        assert launch(handle, ctypes.cast(callback, ctypes.c_void_p), None) == 0
        with pytest.raises(RuntimeError, match="deadlock: this thread holds the GIL"):
            runtime.synchronize()  # the runtime's own wait (torch's Stream releases it)
        time.sleep(SETTLE)  # the GIL free: the callback runs
        runtime.synchronize()
        assert calls == [1]

    def test_a_callback_on_a_stream_no_thread_subscribed_to_never_runs_and_a_wait_says_so(  # noqa: E501
        self, emulator: Any
    ) -> None:
        """Ascend's model (the emulator with ``..._HOST_FUNCS=subscribed``): a callback
        runs only on a host thread subscribed to its stream (aclrtSubscribeReport)
        while it processes reports (aclrtProcessReport). Launched as if it were
        cudaLaunchHostFunc, it never runs, and the stream's wait reports that hang;
        once a thread subscribes and processes, it runs and the stream goes on."""
        backend = kit_backend.current()
        done = run_python(
            f"""
import ctypes, threading, lmcache, torch
runtime = torch.{backend.torch_module_name}
C = ctypes.CFUNCTYPE
launch = C(ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)(
    runtime.host_func_launcher())
subscribe = C(ctypes.c_int, ctypes.c_uint64, ctypes.c_int64)(
    runtime.report_subscriber())
process = C(ctypes.c_int, ctypes.c_int32)(runtime.report_processor())
stream, stamp = runtime.Stream(0), ctypes.c_int64(0)
handle = runtime.stream_handle(stream)
libc_time = ctypes.cast(ctypes.CDLL(None).time, ctypes.c_void_p)  # time(&stamp): C
assert launch(handle, libc_time, ctypes.addressof(stamp)) == 0
try:
    stream.synchronize()
    print("synchronized")
except RuntimeError as error:
    print("reported:", "aclrtSubscribeReport" in str(error))
print("ran without a subscriber:", stamp.value != 0)
def reports():
    assert subscribe(threading.get_ident(), handle) == 0
    while process(2000) != 0:
        pass
thread = threading.Thread(target=reports)
thread.start()
thread.join()
stream.synchronize()
print("ran on the subscriber:", stamp.value != 0)
""",
            env={f"{backend.emulator_env_var}_HOST_FUNCS": "subscribed"},
            fresh=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip().splitlines()[-3:] == [
            "reported: True",
            "ran without a subscriber: False",
            "ran on the subscriber: True",
        ]

    def test_without_host_functions_a_publish_waits_for_the_streams_work_then_runs(
        self, emulator: Any, lmcache_driven: Any
    ) -> None:
        """A runtime without host functions (torch_npu, torch_musa; the emulator with
        ``..._HOST_FUNCS=0``): completions, events and the server's host callbacks
        each synchronize the stream, then publish on the caller's thread, as LMCache's
        NPU backend does, instead of failing on the missing launch."""
        backend = kit_backend.current()
        done = run_python(
            f"""
import lmcache, torch
from lmcache.v1.platform import resolve_device_ops, torch_ops
from {backend.package}.cache_context import HostCallbackStream
runtime = torch.{backend.torch_module_name}
ops = resolve_device_ops("{backend.device_type}")
assert not hasattr(runtime, "host_func_launcher")
stream, seen = runtime.Stream(0), []
handle = runtime.stream_handle(stream)
source = torch.ones(1 << 16, dtype=torch.uint8).pin_memory()
target = torch.zeros(1 << 16, dtype=torch.uint8, device="{backend.device_type}")
def queue_a_copy():
    with runtime.stream(stream):
        target.copy_(source, non_blocking=True)
    return stream.query()
pending = queue_a_copy()
ops.record_completion_on_stream(handle, "finish_write", b"1")
seen.append((pending, stream.query(), torch_ops.drain_recorded_completions()))
pending = queue_a_copy()
ops.record_event_on_stream(handle, "mp.store.end", "s", dict(), dict())
seen.append((pending, stream.query(), len(torch_ops.drain_recorded_events())))
pending = queue_a_copy()
callback = lambda pending: seen.append((pending, stream.query()))
HostCallbackStream(stream).launch_host_func(callback, pending)
print(seen)
""",
            env={
                f"{backend.emulator_env_var}_HOST_FUNCS": "0",
                f"{backend.emulator_env_var}_LATENCY_US": "300000",
            },
            fresh=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # Each: (the stream's work pending before the call, done when it published,
        # what)
        completion, event = (False, True, [("finish_write", b"1")]), (False, True, 1)
        want = [completion, event, (False, True)]
        assert done.stdout.strip().splitlines()[-1] == repr(want)
