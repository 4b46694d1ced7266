# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Your runtime's calls that LMCache's parts make through this plugin (LMCache-driven
mode): a context bound per thread, a stream synchronized by its native handle, a
host function launched on a stream. Each is a capability with its TODO(vendor) and
a fallback where a runtime lacks it.

Per-thread context (``bind_thread_context``). Why: some runtimes keep the current
device context per thread (Ascend's ACL: ``aclrtHostRegister`` and IPC calls fail
with 107002 on a thread that has not bound one), and LMCache calls this plugin from
threads of its own: its lazy allocator pins host memory from a background thread, a
worker's heartbeat thread re-exports KV caches after a server restart, and the
server maps and unmaps them on its request threads. LMCache's NPU pin backend binds
a context once per thread (``_ensure_context``); ``pin_memory.py`` calls
``bind_thread_context`` before each of its runtime calls, ``ipc_wrapper.py`` makes
them in ``on_device``.
The CPU emulator requires it by default (``..._THREAD_CONTEXTS=0``: one context for
every thread, as CUDA's primary context).

A publish after a stream's work (``host_function_model`` and the launches it needs,
``after_stream_work``).
Why: the LMCache server publishes a store's completion, releases read locks and
records observability events only after the device copies queued before them have
run (``record_completion_on_stream``, ``record_event_on_stream``,
``cupy_stream.launch_host_func``). No Python may run on a stream: a runtime's
host-function launch takes a C function pointer (``cudaLaunchHostFunc``), and a
callback that took the GIL could deadlock against a thread holding it while it
waits on the same stream (a runtime's bindings need not release it). So:

* with host functions (the model ``launch``, or ``subscribed``: Ascend runs a
  callback only on a thread subscribed to its stream, and one never processed
  never runs) and the native ops, the completion and event recorders publish from
  C++ host functions, as LMCache's CUDA recorder does (``_recorders.cpp``, bound
  by ``native_ops.py``);
* everything else here (Python callables; recorders without native ops or
  host functions) synchronizes the stream, then publishes on the caller's
  thread, as LMCache's NPU and MUSA backends do (torch_npu and torch_musa have
  no host functions).

Imports only ``names``; ``pin_memory``, ``ipc_wrapper``, ``_ipc_rendezvous``,
``device_ops``, ``native_ops`` and ``cache_context`` import it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
import threading

# Third Party
import torch

# Local
from .names import TORCH_MODULE_NAME

#: Per thread: the devices whose context this thread has bound.
_bound = threading.local()


def bind_thread_context(device: int | None = None) -> None:
    """Make the runtime's context for ``device`` (None: the thread's current device)
    current on the calling thread: bound once per thread and device, and made
    current again whenever the thread's current device is another (a thread that
    binds 0, then 1, then 0 ends on 0).

    TODO(vendor): bind your runtime's context. Setting the device does it on
    Ascend (``torch.npu.set_device`` calls ``aclrtSetDevice``) and on the
    emulator; CUDA's runtime binds its primary context itself (a no-op there).
    """
    runtime = getattr(torch, TORCH_MODULE_NAME)
    index = runtime.current_device() if device is None else int(device)
    devices = _bound.__dict__.setdefault("devices", set())
    if index not in devices or runtime.current_device() != index:
        runtime.set_device(index)
        devices.add(index)


@contextmanager
def on_device(device: int) -> Iterator[Any]:
    """``device`` current on the calling thread, its context bound, for the block:
    ``torch.<device>``, for the runtime calls that need both (IPC export, open,
    close, allowlist), which LMCache makes from threads of its own."""
    runtime = getattr(torch, TORCH_MODULE_NAME)
    with runtime.device(device):
        bind_thread_context(device)
        yield runtime


#: How a runtime runs a host function after a stream's work, by model:
HOST_FUNCTION_MODELS = {
    "launch": "on the stream (cudaLaunchHostFunc)",
    "subscribed": "only on a host thread subscribed to the stream that processes "
    "reports (Ascend: aclrtSubscribeReport, aclrtLaunchCallback, aclrtProcessReport)",
    "none": "not at all (torch_npu, torch_musa): synchronize, then publish",
}


def host_function_model() -> str:
    """Your runtime's model, a key of ``HOST_FUNCTION_MODELS`` (the capability).

    TODO(vendor): return yours. The sample asks the CPU emulator, which runs each
    (``..._HOST_FUNCS``); a runtime the plugin cannot ask declares it here.
    """
    runtime = getattr(torch, TORCH_MODULE_NAME)
    if not hasattr(runtime, "host_func_launcher"):
        return "none"
    return "subscribed" if hasattr(runtime, "report_subscriber") else "launch"


def host_function_launcher() -> int | None:
    """The address of the runtime's host-function launch, or None with the model
    ``none``: ``int launch(int64_t stream, void (*fn)(void*), void* data)``.

    TODO(vendor): your runtime's ``cudaLaunchHostFunc`` (Ascend:
    ``aclrtLaunchCallback`` with ``ACL_CALLBACK_BLOCK``), wrapped to that signature.
    """
    if host_function_model() == "none":
        return None
    return int(getattr(torch, TORCH_MODULE_NAME).host_func_launcher())


def report_processing() -> tuple[int, int] | None:
    """With the model ``subscribed``, the addresses of ``int subscribe(uint64_t
    thread, int64_t stream)`` and ``int process(int32_t timeout_ms)`` (0: one ran):
    ``_recorders.cpp`` subscribes a thread of its own to each stream it launches on,
    and that thread processes reports. Else None.

    TODO(vendor): ``aclrtSubscribeReport`` and ``aclrtProcessReport``, wrapped.
    """
    if host_function_model() != "subscribed":
        return None
    runtime = getattr(torch, TORCH_MODULE_NAME)
    return int(runtime.report_subscriber()), int(runtime.report_processor())


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
            "runtime.py your runtime's stream synchronization by handle (its "
            "TODO(vendor))"
        )
    synchronize(stream_handle)
    publish()


def importers_must_be_allowed() -> bool:
    """Whether the runtime opens an IPC handle only in processes its exporter
    allowed (the capability): then the IPC wrapper's handles name where importers
    ask (``_ipc_rendezvous``), and ``allow_importer`` allows each.

    TODO(vendor): True on Ascend (``aclrtIpcMemSetImportPid``), False where any
    process opens a handle (CUDA). The sample asks the emulator (``..._IPC``).
    """
    return hasattr(getattr(torch, TORCH_MODULE_NAME), "ipc_allow_importer")


def allow_importer(handle: bytes, pid: int, device: int) -> None:
    """Let process ``pid`` open ``handle``, which this process exported from device
    ``device``'s memory.

    TODO(vendor): your runtime's allowlist call (Ascend:
    ``aclrtIpcMemSetImportPid`` with the handle's key and ``[pid]``).
    """
    with on_device(device) as runtime:  # called on the listener's thread
        runtime.ipc_allow_importer(handle, pid)


def memory_is_vmm(address: int) -> bool:
    """Whether the allocation at ``address`` came from a VMM allocator (torch's
    expandable segments, vLLM's sleep mode), which legacy IPC cannot export.

    TODO(vendor): your runtime's test (CUDA: ``cuMemRetainAllocationHandle``
    succeeds), or False when it has no such allocator.
    """
    query = getattr(getattr(torch, TORCH_MODULE_NAME), "ipc_memory_is_vmm", None)
    return bool(query(address)) if query is not None else False


def export_shareable(address: int, device: int) -> tuple[int, int, int]:
    """``(fd, offset of address, allocation size)``: a file descriptor of the VMM
    allocation holding ``address``, which the caller passes on, then closes.

    TODO(vendor): your runtime's shareable export (CUDA:
    ``cuMemExportToShareableHandle`` with ``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``).
    """
    with on_device(device) as runtime:
        return runtime.ipc_export_fd(address)  # type: ignore[no-any-return]


def open_shareable(fd: int, nbytes: int, device: int) -> int:
    """Map the ``nbytes`` allocation behind ``fd`` (received from its exporter):
    its device address here, unmapped as an opened handle is (``_close_handle``).

    TODO(vendor): your runtime's import and map (CUDA:
    ``cuMemImportFromShareableHandle``, ``cuMemMap``, ``cuMemSetAccess``).
    """
    with on_device(device) as runtime:
        return int(runtime.ipc_open_fd(fd, nbytes, device))
