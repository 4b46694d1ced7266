# SPDX-License-Identifier: {{ cookiecutter.license }}
"""A CPU emulation of ``torch.{{ cookiecutter.__torch_module_name }}``: a test and CI tool, never a production path.

Why it exists: LMCache dispatches on ``tensor.device.type``, so this plugin is
only exercised for real by tensors whose device really is
``{{ cookiecutter.device_name }}``. Importing this module compiles (once per torch
version, ~10 s) and loads ``csrc/host_device.cpp``, a PrivateUse1 backend over
host memory, renames PrivateUse1 to ``{{ cookiecutter.device_name }}`` and installs
``torch.{{ cookiecutter.__torch_module_name }}`` with the calls LMCache and the guide's
prerequisites use: ``is_available``, ``device_count``, ``set_device``,
``current_device``, ``synchronize``, ``device``, ``Stream``, ``Event``,
``current_stream``, ``stream``, ``empty_cache``, ``get_device_properties``.

It is active only when a test environment opts in with
``{{ cookiecutter.__emulator_env_var }}=1`` (see ``device.py``). It must not be
imported by production code: it claims PrivateUse1 for the whole process.

Limits: work is synchronous (streams and events cannot catch a missing
synchronisation), RNG is the CPU generator, and mixed-device checks are weaker
than a real device's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

DEVICE_NAME = "{{ cookiecutter.device_name }}"
#: Number of emulated devices; read once, at first import.
DEVICE_COUNT_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_DEVICES"
_SOURCE = Path(__file__).with_name("csrc") / "host_device.cpp"


def _cached_source() -> Path:
    """A copy of the C++ source in a build cache keyed by torch (version, location) and source hash.

    Compiling the copy (not the installed file) keeps its mtime stable, so a
    reinstalled wheel with the same source does not trigger a rebuild.
    """
    text = _SOURCE.read_bytes()
    digest = hashlib.sha256(text + torch.__file__.encode()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    tag = f"torch-{torch.__version__}-{digest}".replace("+", "_")
    build_dir = base / "{{ cookiecutter.import_package }}_emulator" / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    copy = build_dir / _SOURCE.name
    if not copy.exists() or copy.read_bytes() != text:
        partial = copy.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(text)
        os.replace(partial, copy)  # atomic: concurrent first imports are safe
    return copy


def _load_extension() -> Any:
    from torch.utils.cpp_extension import load

    source = _cached_source()
    return load(
        name="{{ cookiecutter.import_package }}_host_device",
        sources=[str(source)],
        extra_cflags=["-O2"],
        build_directory=str(source.parent),
        verbose=False,
    )


def _device_index(device: Any = None) -> int:
    if device is None:
        return int(_ext.current_device())
    if isinstance(device, int):
        return device
    dev = torch.device(device)
    if dev.type != DEVICE_NAME:
        raise ValueError(f"expected a {DEVICE_NAME} device, got {dev}")
    return int(_ext.current_device()) if dev.index is None else dev.index


class _DeviceContext:
    """``with torch.{{ cookiecutter.__torch_module_name }}.device(i):`` makes ``i`` current."""

    def __init__(self, device: Any) -> None:
        self._index = _device_index(device)
        self._previous = -1

    def __enter__(self) -> None:
        self._previous = int(_ext.current_device())
        _ext.set_device(self._index)

    def __exit__(self, *exc: object) -> None:
        _ext.set_device(self._previous)


class Stream(torch.Stream):
    """A stream on the emulated device (synchronous: work is done on return)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # torch rebuilds streams from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device(DEVICE_NAME, _device_index(device)), priority=priority)


class Event(torch.Event):
    """An event on the emulated device (always complete once recorded).

    Supports the CUDA-style IPC calls LMCache's ``DefaultEventIPCBackend``
    uses: ``Event(interprocess=True)``, ``ipc_handle()`` and
    ``Event.from_ipc_handle(device, handle)``. Work on this device is
    synchronous, so an imported event is complete by construction.
    """

    interprocess: bool

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> Event:
        event = super().__new__(
            cls,
            device=torch.device(DEVICE_NAME, int(_ext.current_device())),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=False,  # torch's generic Event has no IPC; handled here
        )
        event.interprocess = interprocess
        return event

    def ipc_handle(self) -> bytes:
        if not self.interprocess:
            raise RuntimeError("ipc_handle() needs an Event created with interprocess=True")
        return _EVENT_HANDLE.pack(os.getpid(), id(self))

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> Event:
        _EVENT_HANDLE.unpack(handle)  # validates the handle's shape
        with _DeviceContext(device if device is not None else int(_ext.current_device())):
            return cls(interprocess=True)


_EVENT_HANDLE = struct.Struct("<qq")  # (exporting pid, event id)
_MEMORY_HANDLE = struct.Struct("<qq")  # (exporting pid, memfd number)


def ipc_export_handle(ptr: int) -> tuple[bytes, int, int]:
    """``(handle, offset, size)`` of the exportable allocation holding device address ``ptr``.

    The handle stays valid while the exporting process keeps the memory
    allocated, like a CUDA IPC memory handle.
    """
    pid, fd, offset, size = _ext.ipc_export(ptr)
    return _MEMORY_HANDLE.pack(pid, fd), int(offset), int(size)


def ipc_open_handle(handle: bytes, size: int, device: Any = None) -> torch.Tensor:
    """Map an exported allocation into this process as a uint8 device tensor of ``size`` bytes."""
    pid, fd = _MEMORY_HANDLE.unpack(handle)
    return _ext.ipc_open(pid, fd, size, _device_index(device))


def current_stream(device: Any = None) -> torch.Stream:
    return torch.accelerator.current_stream(_device_index(device))


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


def get_device_properties(device: Any = None) -> types.SimpleNamespace:
    index = _device_index(device)
    return types.SimpleNamespace(
        name=f"{DEVICE_NAME} (CPU emulator)",
        uuid=uuid.uuid5(uuid.NAMESPACE_URL, f"{DEVICE_NAME}-emulator/{os.uname().nodename}/{index}"),
        total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    )


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _manual_seed(seed: int) -> None:
    # Not torch.manual_seed: that calls back into this module and recurses.
    torch.default_generator.manual_seed(seed)


def _install() -> types.ModuleType:
    if hasattr(torch, "{{ cookiecutter.__torch_module_name }}"):
        return getattr(torch, "{{ cookiecutter.__torch_module_name }}")
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_NAME):
        raise RuntimeError(
            f"PrivateUse1 is already claimed by {current!r} in this process; the "
            f"{DEVICE_NAME} emulator cannot load beside another out-of-tree torch backend. "
            "Run emulator tests in an environment without that backend, or set "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0."
        )
    _ext.register_hooks(int(os.environ.get(DEVICE_COUNT_ENV_VAR, "2")))
    module = types.ModuleType("torch.{{ cookiecutter.__torch_module_name }}", __doc__)
    members: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "init": _noop,
        "device_count": lambda: int(_ext.device_count()),
        "current_device": lambda: int(_ext.current_device()),
        "set_device": lambda device: _ext.set_device(_device_index(device)),
        "synchronize": _noop,
        "empty_cache": lambda: _ext.empty_cache(),
        "device": _DeviceContext,
        "Stream": Stream,
        "Event": Event,
        "current_stream": current_stream,
        "stream": stream,
        "get_device_properties": get_device_properties,
        "ipc_export_handle": ipc_export_handle,
        "ipc_open_handle": ipc_open_handle,
        "manual_seed": _manual_seed,
        "manual_seed_all": _manual_seed,
        "_is_in_bad_fork": lambda: False,
        "is_emulator": True,
    }
    for name, value in members.items():
        setattr(module, name, value)
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module("{{ cookiecutter.__torch_module_name }}", module)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
    return module


_ext = _load_extension()
module = _install()
