# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Opt-in record of what is called on ``torch.{{ cookiecutter.__torch_module_name }}``, and by whom.

Why it exists: the torch-backend functions a vendor's runtime must give are the
ones LMCache and the plugin call, and both reach the device module indirectly
(``lmcache.torch_dev``, ``_get_torch_module()``, ``getattr(torch, name)``), which
reading their source misses. With ``RECORD_ENV_VAR`` set to a directory, each
process appends to ``<dir>/calls-<pid>.jsonl`` one line per distinct call and
caller: the module's attributes (``Event``), the methods and attributes of its
streams, events and device properties (``Event.ipc_handle``,
``get_device_properties().uuid``), ``Event(interprocess=True)``, and attributes
asked for but absent (``"absent": true``: a ``hasattr`` probe). The caller is the
first module on the stack outside torch and the emulator (LMCache's call through
``torch.manual_seed`` is LMCache's); the emulator's own calls are not recorded.
The kit's ``lmcache_device_kit.runtime_calls`` compares the record with its list.

Imported by ``_device`` (``watch``); imports only the standard library and
``_streams``. Nothing changes without ``RECORD_ENV_VAR``.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import functools
import json
import os
import sys
import threading
import types

# Local
from . import _streams

#: A directory: record the calls on the device module into it (one file per process).
RECORD_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_RECORD"
#: Modules a call passes through on behalf of its caller.
_THROUGH = ("torch", "contextlib", "functools")
_EMULATOR = __name__.rpartition(".")[0]
_seen: set[tuple[str, str, bool]] = set()
_lock = threading.Lock()


def _caller(depth: int) -> str | None:
    """The module a call at ``depth`` frames up is made for; None for the emulator."""
    frame: types.FrameType | None = sys._getframe(depth + 1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module == "__main__" and frame.f_globals.get("__spec__") is not None:
            module = frame.f_globals["__spec__"].name  # python -m's module
        if module == _EMULATOR or module.startswith(f"{_EMULATOR}."):
            return None
        if module.partition(".")[0] not in _THROUGH:
            return module
        frame = frame.f_back
    return None


def record(name: str, depth: int = 1, absent: bool = False) -> None:
    """Record the call ``name`` made ``depth`` frames above this function's caller."""
    caller = _caller(depth + 1)
    key = (name, caller or "", absent)
    if caller is None or key in _seen:
        return
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
        line = json.dumps({"call": name, "caller": caller, "absent": absent}) + "\n"
        path = os.path.join(os.environ[RECORD_ENV_VAR], f"calls-{os.getpid()}.jsonl")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _recorded_attributes(cls: Any, prefix: str) -> None:
    """Record every public attribute read on instances of ``cls`` as
    ``<prefix>.<name>``, and its class methods' calls."""
    read: Any = cls.__getattribute__

    def __getattribute__(self: Any, name: str) -> Any:
        try:
            value = read(self, name)
        except AttributeError:
            if not name.startswith("_"):
                record(f"{prefix}.{name}", absent=True)
            raise
        if not name.startswith("_"):
            record(f"{prefix}.{name}")
        return value

    cls.__getattribute__ = __getattribute__
    for name, member in list(vars(cls).items()):
        if isinstance(member, classmethod) and not name.startswith("_"):
            recorded = _recorded(member.__func__, f"{prefix}.{name}")
            setattr(cls, name, classmethod(recorded))


def _recorded(function: Any, name: str) -> Any:
    @functools.wraps(function)  # keeps its signature, which LMCache inspects
    def call(*args: Any, **kwargs: Any) -> Any:
        record(name)
        return function(*args, **kwargs)

    return call


class _Module(types.ModuleType):
    def __getattribute__(self, name: str) -> Any:
        try:
            value = super().__getattribute__(name)
        except AttributeError:
            if not name.startswith("__"):
                record(name, absent=True)
            raise
        if not name.startswith("__"):
            record(name)
        return value


class _Properties(types.SimpleNamespace):
    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_"):
            return super().__getattribute__(name)
        try:
            value = super().__getattribute__(name)
        except AttributeError:
            record(f"get_device_properties().{name}", absent=True)
            raise
        record(f"get_device_properties().{name}")
        return value


def watch(module: types.ModuleType) -> None:
    """Record the calls on ``module`` (the device module, before torch registers it)
    and on its streams, events and device properties, if ``RECORD_ENV_VAR`` is set."""
    if not os.environ.get(RECORD_ENV_VAR):
        return
    os.makedirs(os.environ[RECORD_ENV_VAR], exist_ok=True)
    device: Any = module
    properties = device.get_device_properties
    device.get_device_properties = lambda *args, **kwargs: _Properties(
        **vars(properties(*args, **kwargs))
    )
    event_new = _streams.Event.__new__

    @functools.wraps(event_new)  # LMCache inspects it for interprocess=True
    def new_event(cls: type, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("interprocess") or args[2:3] == (True,):
            record("Event(interprocess=True)")
        return event_new(cls, *args, **kwargs)

    _streams.Event.__new__ = staticmethod(new_event)  # type: ignore[assignment]
    _recorded_attributes(_streams.Event, "Event")
    _recorded_attributes(_streams.Stream, "Stream")
    module.__class__ = _Module
