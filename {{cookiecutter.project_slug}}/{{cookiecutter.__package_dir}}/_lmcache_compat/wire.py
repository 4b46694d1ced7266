# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""How this plugin's IPC wrapper travels to the LMCache server, release by release.

lmcache 0.5.4 and 0.5.5 pickle IPC wrappers: the wrapper class travels as it is
and nothing needs registering (both functions below do nothing there).

lmcache 0.5.6 encodes IPC wrappers through a closed allowlist in
``lmcache/v1/platform/base/ipc_wire.py`` (the tagged union ``WireIPCData`` and
the dict ``WRAPPER_TYPES``), and accepts only wrapper classes whose module is
``lmcache.v1.platform.devices.<name>``; a wrapper from an external wheel fails
there with KeyError / ValueError. ``register_wire_type`` therefore:

1. adds this plugin's descriptor (``{{ cookiecutter.class_prefix }}IPCData``, a namespaced
   tag) to ``WireIPCData``, validated by building a msgspec Decoder first;
2. maps it to the wrapper class in ``WRAPPER_TYPES``;
3. installs an alias module ``lmcache.v1.platform.devices.<WIRE_MODULE>`` whose
   wrapper class loads on first use (it cannot be imported during discovery).

The spec module calls it when LMCache loads the plugin, in the worker *and* the
server (the server decodes a descriptor before it reads any DeviceSpec
property). It changes LMCache internals, so it is pinned to the tested releases
and fails loudly: LMCache then skips the plugin and logs why. The upstream-ready
alternative, an in-tree wire type, is in README.md ("Upstream alternative").

Must not import, at top level, anything from LMCache but ``ipc_wire`` (msgspec
and torch only: safe during discovery) nor any module of this package but
``_lmcache_compat``.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from typing import Any, Literal
import sys
import types

# Local
from . import HAS_WIRE_ALLOWLIST

WIRE_TAG = "ext_{{ cookiecutter.import_package }}"
WIRE_MODULE = "_ext_{{ cookiecutter.import_package }}"
WIRE_MODULE_PATH = "lmcache.v1.platform.devices." + WIRE_MODULE
WRAPPER_NAME = "{{ cookiecutter.class_prefix }}IPCWrapper"


def publish_wrapper_class(wrapper_cls: type) -> None:
    """Give the wrapper class the module name LMCache's wire accepts (0.5.6+ only)."""
    if HAS_WIRE_ALLOWLIST:
        wrapper_cls.__module__ = WIRE_MODULE_PATH


def register_wire_type(load_wrapper: Callable[[], type]) -> None:
    """Make the wrapper ``load_wrapper()`` returns decodable by LMCache's IPC codec
    (0.5.6+; idempotent).

    ``load_wrapper`` imports the wrapper class; the codec calls it the first
    time it decodes this plugin's descriptor. Raises on a conflicting tag or
    alias module, before anything is changed.
    """
    if not HAS_WIRE_ALLOWLIST:
        return
    data_cls = {{ cookiecutter.class_prefix }}IPCData
    if ipc_wire.WRAPPER_TYPES.get(data_cls) == (WIRE_MODULE, WRAPPER_NAME):
        return
    taken = {getattr(t, "__struct_config__").tag for t in ipc_wire.WRAPPER_TYPES}
    if WIRE_TAG in taken:
        raise RuntimeError(
            f"IPC wire tag {WIRE_TAG!r} is already registered by another plugin"
        )
    existing = sys.modules.get(WIRE_MODULE_PATH)
    if existing is not None and getattr(existing, "WIRE_TAG", None) != WIRE_TAG:
        raise RuntimeError(
            f"{WIRE_MODULE_PATH} already exists and is not this plugin's alias"
        )
    union = ipc_wire.WireIPCData | data_cls
    msgspec.msgpack.Decoder(union)  # raises on a tag clash before anything is changed
    ipc_wire.WireIPCData = union  # type: ignore[misc]
    wrapper_module = sys.modules.get("lmcache.v1.platform.base.ipc_wrapper")
    if (
        wrapper_module is not None
    ):  # already imported: it reads the union from its own globals
        wrapper_module.WireIPCData = union  # type: ignore[attr-defined]
    ipc_wire.WRAPPER_TYPES[data_cls] = (WIRE_MODULE, WRAPPER_NAME)
    sys.modules[WIRE_MODULE_PATH] = _alias_module(load_wrapper)


def _alias_module(load_wrapper: Callable[[], type]) -> types.ModuleType:
    """The module LMCache's codec imports the wrapper class from."""
    alias = types.ModuleType(
        WIRE_MODULE_PATH,
        "Alias of this plugin's IPC wrapper for LMCache's wire allowlist.",
    )

    def wrapper_class(name: str) -> Any:
        if name != WRAPPER_NAME:
            raise AttributeError(
                f"module {WIRE_MODULE_PATH!r} has no attribute {name!r}"
            )
        return load_wrapper()

    alias.__getattr__ = wrapper_class  # type: ignore[method-assign]
    alias.WIRE_TAG = WIRE_TAG  # type: ignore[attr-defined]
    return alias


if HAS_WIRE_ALLOWLIST:
    # Third Party
    import msgspec

    # First Party
    from lmcache.v1.platform.base import ipc_wire

    class {{ cookiecutter.class_prefix }}PlaneData(
        msgspec.Struct,
        forbid_unknown_fields=True,
    ):
        """One exported tensor view: its allocation's opaque runtime handle, the
        allocation's size and the view's place in it."""

        handle: bytes
        alloc_offset: ipc_wire.NonNegative
        nbytes: ipc_wire.NonNegative
        metadata: ipc_wire.TensorMetadata

        def __post_init__(self) -> None:
            if self.alloc_offset + self.metadata.byte_span() > self.nbytes:
                raise ValueError(
                    f"{type(self).__name__}: IPC view exceeds the exported allocation"
                )

    class {{ cookiecutter.class_prefix }}IPCData(
        msgspec.Struct,
        tag=WIRE_TAG,
        forbid_unknown_fields=True,
    ):
        """Wire descriptor of a {{ cookiecutter.class_prefix }}IPCWrapper: one layer as the
        engine registered it, a tensor (``bare``) or its planes (as ``NpuIPCData``)."""

        version: Literal[1]
        bare: bool
        planes: tuple[{{ cookiecutter.class_prefix }}PlaneData, ...]

        def __post_init__(self) -> None:
            if not self.planes or (self.bare and len(self.planes) != 1):
                raise ValueError(
                    f"{type(self).__name__}: a bare tensor has one plane, a layer "
                    f"at least one; got bare={self.bare} with {len(self.planes)}"
                )
            uuids = {plane.metadata.device_uuid for plane in self.planes}
            if len(uuids) != 1:
                name = type(self).__name__
                raise ValueError(f"{name}: planes on {len(uuids)} devices")
