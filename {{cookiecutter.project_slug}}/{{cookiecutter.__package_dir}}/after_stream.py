# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Run a publish once the work queued on a stream has run (LMCache-driven mode).

Why it exists: the LMCache server publishes a store's completion, releases read
locks and records observability events only after the device copies queued
before them have run (``record_completion_on_stream``, ``record_event_on_stream``,
``cupy_stream.launch_host_func``). No Python may run on a stream: a runtime's
host-function launch takes a C function pointer (``cudaLaunchHostFunc``), and a
callback that took the GIL could deadlock against a thread holding it while it
waits on the same stream (a runtime's bindings need not release it). So:

* with a host-function launch (the capability below) and the native ops, the
  completion and event recorders publish from C++ host functions, as LMCache's
  CUDA recorder does (``_recorders.cpp``, bound by ``native_ops.py``);
* everything else here (Python callables; recorders without native ops or
  host functions) synchronizes the stream, then publishes on the caller's
  thread, as LMCache's NPU and MUSA backends do (torch_npu and torch_musa have
  no host functions).

Imports only ``names``; ``device_ops``, ``native_ops`` and ``cache_context``
import it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable

# Third Party
import torch

# Local
from .names import TORCH_MODULE_NAME


def host_function_launcher() -> int | None:
    """The address of the runtime's host-function launch, or None without one (the
    capability): ``int launch(int64_t stream, void (*fn)(void*), void* data)``.

    TODO(vendor): your runtime's ``cudaLaunchHostFunc`` (Ascend:
    ``aclrtLaunchCallback``), wrapped to that signature, or None.
    """
    launcher = getattr(getattr(torch, TORCH_MODULE_NAME), "host_func_launcher", None)
    return None if launcher is None else int(launcher())


def after_stream_work(stream_handle: int, publish: Callable[[], object]) -> None:
    """Run ``publish()`` on this thread once the work queued so far on the stream
    ``stream_handle`` (its native handle) has run: synchronize, then publish."""
    runtime = getattr(torch, TORCH_MODULE_NAME)
    # TODO(vendor): your runtime's synchronization of a stream by its native handle
    # (aclrtSynchronizeStream, musaStreamSynchronize).
    synchronize = getattr(runtime, "synchronize_stream_handle", None)
    if synchronize is None:
        raise NotImplementedError(
            f"torch.{TORCH_MODULE_NAME} has no synchronize_stream_handle: give "
            "after_stream.py your runtime's stream synchronization by handle (its "
            "TODO(vendor))"
        )
    synchronize(stream_handle)
    publish()
