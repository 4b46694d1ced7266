# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Devices, streams and events of the emulated
``torch.{{ cookiecutter.__torch_module_name }}`` (the work is in ``csrc/``).

Why it exists: streams here are asynchronous, as on a device. Work queued on a
stream runs later, in order, on the stream's own worker thread, so code that
forgets to wait for it reads stale bytes here as it would on hardware. Events
complete when the work queued before their ``record()`` has run; interprocess
events are exported by handle and go stale when their exporter destroys them.

The ``*_launcher``, ``report_*`` members give native code the addresses of C
entry points (``cudaLaunchHostFunc``, ``cudaLaunchKernel``, ``cudaMemcpyAsync``,
Ascend's ``aclrtSubscribeReport`` and ``aclrtProcessReport``): no Python runs on a
stream. ``hold_stream`` is a test facility, no runtime's API.

Must not import the rest of the emulator: ``_device`` binds the compiled
extension here (``bind``) once it is loaded.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import contextlib
import struct

# Third Party
import torch

DEVICE_NAME = "{{ cookiecutter.device_name }}"
_ext: Any = None
#: (exporting pid, event table memfd, its identity, slot, slot generation)
_EVENT_HANDLE = struct.Struct("<qqqqq")


def bind(ext: Any) -> None:
    global _ext
    _ext = ext


def device_index(device: Any = None) -> int:
    if device is None:
        return int(_ext.current_device())
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != DEVICE_NAME:
        raise ValueError(f"expected a {DEVICE_NAME} device, got {dev}")
    return int(_ext.current_device()) if dev.index is None else dev.index


class DeviceContext:
    """``with torch.{{ cookiecutter.__torch_module_name }}.device(i):`` makes ``i`` current."""

    def __init__(self, device: Any) -> None:
        self._index = device_index(device)
        self._previous = -1

    def __enter__(self) -> None:
        # As torch.cuda.device: no runtime call when the device is current already
        # (so it binds no context on a thread that has none: the per-thread context
        # rule, which the plugin's runtime.py meets).
        self._previous = int(_ext.current_device())
        if self._index != self._previous:
            _ext.set_device(self._index)

    def __exit__(self, *exc: object) -> None:
        if self._index != self._previous:
            _ext.set_device(self._previous)


class Stream(torch.Stream):
    """A stream on the emulated device: its work runs later, in order, on its own
    worker."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # torch rebuilds streams from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(
            cls,
            device=torch.device(DEVICE_NAME, device_index(device)),
            priority=priority,
        )

    def wait_event(self, event: Any) -> None:
        event.wait(self)

    def record_event(self, event: Any = None) -> Any:
        event = Event() if event is None else event
        event.record(self)
        return event


def stream_handle(s: Any = None) -> int:
    """The native handle of stream ``s`` (default: the current one), what a runtime
    calls its pointer."""
    s = current_stream() if s is None else s
    if isinstance(s, int):
        return s
    return int(_ext.stream_handle(s.device_index, s.stream_id))


def current_stream(device: Any = None) -> Stream:
    s = torch.accelerator.current_stream(device_index(device))
    return Stream(
        stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type
    )


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream inside the block (``None`` is a no-op)."""
    if s is None:
        yield
        return
    previous = torch.accelerator.current_stream(s.device_index)
    torch.accelerator.set_stream(s)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


def synchronize(device: Any = None) -> None:
    """Wait for the work queued on every stream of ``device`` (default: the current
    one)."""
    _ext.synchronize_device(device_index(device))


def host_func_launcher() -> int:
    """Address of
    ``int emulator_launch_host_func(int64_t stream, void (*fn)(void*), void* data)``,
    a runtime's ``cudaLaunchHostFunc``: ``fn(data)`` runs on the stream's worker once
    the work queued before it is done, without the GIL; as with CUDA it must not call
    the runtime. A stream wait keeps the GIL while a host function is queued on the
    stream, as a runtime's binding may, and reports one that takes it (a deadlock on
    such a runtime) instead of hanging (``csrc/launch.cpp``)."""
    return int(_ext.host_func_launcher())


#: The host-function models the emulator runs (``..._HOST_FUNCS``), each with the
#: runtimes it stands for.
HOST_FUNCTION_MODELS = {
    "launch": "CUDA's cudaLaunchHostFunc: runs on the stream",
    "subscribed": "Ascend's aclrtLaunchCallback: runs on a thread subscribed to the "
    "stream (report_subscriber) that processes reports (report_processor)",
    "0": "none, as torch_npu and torch_musa: synchronize, then publish",
}


def host_function_members(model: str) -> dict[str, Any]:
    """The members ``model`` gives ``torch.<device>`` ("" or "1": ``launch``)."""
    model = {"": "launch", "1": "launch"}.get(model, model)
    if model not in HOST_FUNCTION_MODELS:
        raise ValueError(
            "{{ cookiecutter.__emulator_env_var }}_HOST_FUNCS="
            f"{model!r}: set it to one of {sorted(HOST_FUNCTION_MODELS)}"
        )
    if model == "0":
        return {}
    _ext.set_host_function_model(model)
    members: dict[str, Any] = {"host_func_launcher": host_func_launcher}
    if model == "subscribed":
        members["report_subscriber"] = lambda: int(_ext.report_subscriber())
        members["report_processor"] = lambda: int(_ext.report_processor())
    return members


class StreamHold:
    """A stream held by ``hold_stream``: work queued behind it waits for
    ``release()``."""

    def __init__(self, s: Any, seconds: float) -> None:
        self._id = int(_ext.hold_stream(stream_handle(s), seconds))

    def release(self) -> bool:
        """Let the stream run on; True if the hold had expired first."""
        return bool(_ext.release_hold(self._id))


def hold_stream(s: Any, seconds: float) -> StreamHold:
    """Hold stream ``s`` (a stream or its handle) until ``release()``, at most
    ``seconds``. A test facility, as ``torch.cuda._sleep`` is CUDA's: no runtime has
    it, and the plugin never calls it."""
    return StreamHold(s, seconds)


def kernel_launcher() -> int:
    """Address of ``int emulator_launch(int64_t stream, void (*kernel)(const void*),
    void* params, int64_t params_bytes)``: ``kernel`` gets the launch's copy of the
    parameter block (at most 4 KiB; the caller's is poisoned: ``csrc/kernels.cpp``)."""
    return int(_ext.kernel_launcher())


def memcpy_async_launcher() -> int:
    """Address of ``int emulator_memcpy_async(int64_t dst, int64_t src, int64_t
    nbytes, int64_t kind, int64_t stream)`` (kind 1: to the device, 2: from it)."""
    return int(_ext.memcpy_async_launcher())


class Event(torch.Event):
    """An event on the emulated device: complete once the work queued before its
    ``record()`` has run.

    Supports the CUDA-style IPC calls LMCache's ``DefaultEventIPCBackend``
    uses: ``Event(interprocess=True)``, ``ipc_handle()`` and
    ``Event.from_ipc_handle(device, handle)``. An exported event's handle is
    stale once the exporter destroys the event.
    """

    interprocess: bool
    _device: torch.device
    _state: int

    def __new__(
        cls,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> Event:
        return cls._made(
            _ext.event_create(interprocess), interprocess, enable_timing, blocking
        )

    @classmethod
    def _made(
        cls,
        state: int,
        interprocess: bool,
        enable_timing: bool = False,
        blocking: bool = False,
    ) -> Event:
        index = int(_ext.current_device())
        event = super().__new__(
            cls,
            device=torch.device(DEVICE_NAME, index),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=False,  # torch's generic Event has no IPC; handled here
        )
        event.interprocess, event._state = interprocess, state
        event._device = torch.device(DEVICE_NAME, index)
        return event

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", 0), 0
        if state and _ext is not None:
            _ext.event_destroy(state)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        """The device current when the event was created (torch's reports none until
        first recorded)."""
        return self._device

    def record(self, stream: Any = None) -> None:
        _ext.event_record(
            self._state,
            stream_handle(current_stream(self._device) if stream is None else stream),
        )

    def wait(self, stream: Any = None) -> None:
        _ext.event_block(
            self._state,
            stream_handle(current_stream(self._device) if stream is None else stream),
        )

    def query(self) -> bool:
        return bool(_ext.event_query(self._state))

    def synchronize(self) -> None:
        _ext.event_synchronize(self._state)

    def elapsed_time(self, end_event: Any) -> float:
        raise RuntimeError("the emulated device has no timing events")

    def ipc_handle(self) -> bytes:
        if not self.interprocess:
            raise RuntimeError(
                "ipc_handle() needs an Event created with interprocess=True"
            )
        return _EVENT_HANDLE.pack(*_ext.event_ipc_handle(self._state))

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> Event:
        if (
            not isinstance(handle, bytes | bytearray)
            or len(handle) != _EVENT_HANDLE.size
        ):
            raise ValueError(f"not an emulated interprocess event handle: {handle!r}")
        with DeviceContext(
            device if device is not None else int(_ext.current_device())
        ):
            return cls._made(
                _ext.event_open(*_EVENT_HANDLE.unpack(handle)), interprocess=True
            )
