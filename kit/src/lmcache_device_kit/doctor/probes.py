# SPDX-License-Identifier: Apache-2.0
"""The porting ladder's proofs: each step's runtime calls, made once on this device.

Why a module of its own: ``doctor --port`` proves each rung of the ladder
(``ladder.STEPS``) by calling the plugin's code for it on the device at hand, as
LMCache calls it: a context bound on a thread of LMCache's, a stream's handle, a
publish after the stream's work, a host function launcher, IPC export, an
interprocess event, a view of device memory at a pointer, the native ops and a
copy by their kernel. The rungs the ordinary checklist already proves (the device,
pinning, the transfer modes) come from its report (``port``). A proof answers
``Outcome(True)`` (proven), ``Outcome(False, ..., fix)`` or ``Outcome(None)``: the
plugin still gives the sample's answer where a vendor must decide (no launcher, no
kernels bound), so ``port`` reads it "not ported yet".

Imports the standard library, the kit's ``backend`` and the doctor's ``paths``;
torch and the plugin's modules inside the functions, after ``import lmcache``.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from typing import Any, NamedTuple
import functools
import importlib.util
import threading

# Local
from ..backend import current
from .paths import host_page_size, plugin_module


class Outcome(NamedTuple):
    ok: bool | None
    detail: str
    fix: str = ""


def has_module(name: str) -> bool:
    return importlib.util.find_spec(f"{current().package}.{name}") is not None


def _torch() -> Any:
    # Third Party
    import torch

    return torch


def _device() -> Any:
    return _torch().device(current().device_type, 0)


def _on_new_thread(body: Callable[[], object]) -> object:
    """``body()`` on a thread of its own, as LMCache's threads call the plugin."""
    result: list[object] = []

    def run() -> None:
        try:
            result.append(body())
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            result.append(exc)

    thread = threading.Thread(target=run, name="doctor-port")
    thread.start()
    thread.join(30)
    if not result:
        return TimeoutError("no answer within 30 s")
    if isinstance(result[0], Exception):
        raise result[0]
    return result[0]


def _export(ptr: int) -> bytes:
    """The plugin's export of the allocation at ``ptr`` on device 0, as its wrapper
    exports it: through its rendezvous where it has one (VMM memory: a descriptor)."""
    export = plugin_module("ipc_wrapper")._export_handle
    if has_module("_ipc_rendezvous"):
        rendezvous = plugin_module("_ipc_rendezvous")
        export = functools.partial(rendezvous.export, legacy=export)
    return export(ptr, 0)[0]  # type: ignore[no-any-return]


def thread_context(spec: Any) -> Outcome:
    runtime = plugin_module("runtime")
    tensor = _torch().empty(1 << 20, dtype=_torch().uint8, device=_device())

    def body() -> bool:
        runtime.bind_thread_context(0)
        try:  # a call that needs the thread's context (on Ascend, on the emulator)
            _export(tensor.data_ptr())
        except AttributeError:  # the runtime has no IPC export yet: its own step
            return False
        return True

    if _on_new_thread(body):
        return Outcome(True, "a thread of its own bound a context and exported memory")
    return Outcome(
        True,
        "a thread of its own bound a context (the IPC export that "
        "would use it is not ported yet: its own step)",
    )


def stream_handle(spec: Any) -> Outcome:
    handle = spec.get_stream_handle(
        getattr(_torch(), current().torch_module_name).current_stream()
    )
    if not isinstance(handle, int) or handle == 0:
        return Outcome(
            False,
            f"get_stream_handle gave {handle!r}",
            "return your runtime's stream pointer (an int) in get_stream_handle",
        )
    return Outcome(True, f"the current stream's handle is {handle:#x}")


def stream_sync(spec: Any) -> Outcome:
    runtime = plugin_module("runtime")
    module = getattr(_torch(), current().torch_module_name)
    handle = spec.get_stream_handle(module.current_stream())
    queued = _torch().ones(1 << 16, device=_device()) * 2
    done: list[bool] = []
    runtime.after_stream_work(handle, lambda: done.append(bool(queued[-1] == 2)))
    if done != [True]:
        return Outcome(False, f"publish ran {done}", "synchronize, then publish once")
    return Outcome(True, "a publish ran once the stream's queued work had run")


def host_functions(spec: Any, holds_sample: bool) -> Outcome:
    runtime = plugin_module("runtime")
    model = runtime.host_function_model()
    if model not in runtime.HOST_FUNCTION_MODELS:
        return Outcome(
            False,
            f"host_function_model gave {model!r}",
            f"return one of {sorted(runtime.HOST_FUNCTION_MODELS)}",
        )
    if model == "none":
        if holds_sample:
            return Outcome(None, "no host-function launch (the sample's answer)")
        return Outcome(True, "none declared: a publish waits for a synchronize")
    addresses = [runtime.host_function_launcher()]
    if model == "subscribed":
        addresses += list(runtime.report_processing() or [None, None])
    if not all(isinstance(a, int) and a != 0 for a in addresses):
        return Outcome(
            False,
            f"model {model!r}, but the launch functions' addresses are {addresses!r}",
            "return each function's address as an int (runtime.py's TODO(vendor))",
        )
    where = "on a subscribed thread of the plugin's" if model == "subscribed" else ""
    return Outcome(True, f"model {model!r}: recorders publish from C {where}".strip())


def _pinned(spec: Any, size: int) -> tuple[Any, int, Callable[[], object]]:
    """(buffer, page-aligned pointer, release) of ``size`` pinned host bytes: pinned
    by the spec's pin backend where it pins (LMCache's L1), else allocated pinned
    by torch (``pin_memory=True``: the runtime's host allocator)."""
    torch, page = _torch(), host_page_size()
    backend = spec.pin_memory_backend() if has_module("pin_memory") else None
    if backend is None or not backend.is_pin_supported:
        buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        return buffer, buffer.data_ptr(), lambda: None
    buffer = torch.zeros(size + page, dtype=torch.uint8)
    ptr = buffer.data_ptr() + (-buffer.data_ptr()) % page
    if not backend.pin_memory(ptr, size):
        raise RuntimeError(f"the pin backend refused {size} page-aligned bytes")
    return buffer, ptr, lambda: backend.unpin_memory(ptr)


def host_access(spec: Any) -> Outcome:
    size = host_page_size()
    buffer, ptr, release = _pinned(spec, size)
    try:
        address = plugin_module("_host_access").kernel_host_address(ptr, size, 0)
    finally:
        release()
    if address is None:
        return Outcome(
            False,
            "no device address for pinned host memory",
            "keep the address your registration returns (keep_device_address), "
            "ask your runtime for pinned memory's (kernel_host_address)",
        )
    return Outcome(True, f"pinned host memory is reached at {address:#x}")


def ipc_memory(spec: Any) -> Outcome:
    """The wrapper's export of one allocation: the runtime's handle, or (VMM memory)
    a descriptor, through the plugin's rendezvous where it has one."""
    tensor = _torch().empty(1 << 20, dtype=_torch().uint8, device=_device())
    handle = _export(tensor.data_ptr())
    if not isinstance(handle, bytes | bytearray) or not handle:
        return Outcome(False, f"export gave {handle!r}", "return the handle's bytes")
    return Outcome(
        True, f"exported a {len(handle)}-byte handle (open, close: the tests)"
    )


def events(spec: Any) -> Outcome:
    spec.event_ipc_backend.check_event_support(_device())
    return Outcome(True, "an interprocess event was created and exported")


def zero_copy(spec: Any) -> Outcome:
    torch = _torch()
    tensor = torch.zeros(16, dtype=torch.uint8, device=_device())
    ops = plugin_module("_lmcache_compat").resolve_device_ops(current().device_type)
    view = ops.tensor_from_ptr(
        tensor.data_ptr(), (16,), torch.uint8, torch.device(current().device_type)
    )
    view.fill_(7)
    if not bool((tensor.cpu() == 7).all()):
        return Outcome(False, "the view is a copy", "construct a view, not a copy")
    return Outcome(True, "a view at a pointer writes through to its memory")


def native_ops(spec: Any) -> Outcome:
    ops = plugin_module("_lmcache_compat").resolve_device_ops(current().device_type)
    if callable(vars(ops).get("multi_layer_block_kv_transfer")):
        return Outcome(True, "the native ops are bound")
    return Outcome(
        False,
        "LMCache's torch baseline runs: the kernels' launch is not bound",
        "give _launch_on your runtime's launch; _launches_kernels says True",
    )


def native_copy(spec: Any) -> Outcome:
    if not has_module("native_ops"):
        return Outcome(None, "no kernels: ensure_native binds none (the sample's)")
    compat = plugin_module("_lmcache_compat")
    ops = compat.resolve_device_ops(current().device_type)
    if not callable(vars(ops).get("lmcache_memcpy_async")):
        return Outcome(False, "the native ops are not bound", "see kernel launch")
    torch, size = _torch(), host_page_size()
    buffer, ptr, release = _pinned(spec, size)
    paths = plugin_module("native_ops").paths_taken
    before = (sum(compat.slow_paths.values()), paths["lmcache_memcpy_async:native"])
    try:
        buffer[ptr - buffer.data_ptr() :][:size] = 5
        target = torch.zeros(size, dtype=torch.uint8, device=_device())
        h2d = compat.TransferDirection.H2D
        ops.lmcache_memcpy_async(target.data_ptr(), ptr, size, h2d, 0, size)
        copied = bool((target.cpu() == 5).all())
    finally:
        release()
    after = (sum(compat.slow_paths.values()), paths["lmcache_memcpy_async:native"])
    if not copied or after[0] != before[0] or after[1] == before[1]:
        return Outcome(
            False,
            f"a kernel copy of {size} bytes: identical {copied}, slow paths "
            f"{after[0] - before[0]}, native {after[1] - before[1]}",
            "see native_ops.py's kernels and _native_plan.py",
        )
    return Outcome(True, f"a kernel copied {size} pinned bytes to the device")
