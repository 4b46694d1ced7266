# SPDX-License-Identifier: Apache-2.0
"""How a plugin wheel's IPC wrapper travels to the LMCache server, release by
release.

lmcache 0.5.4 and 0.5.5 pickle IPC wrappers: the wrapper class travels as it is and
nothing needs registering (``WireType`` does nothing there).

lmcache 0.5.6 encodes IPC wrappers through a closed allowlist in
``lmcache/v1/platform/base/ipc_wire.py`` (the tagged union ``WireIPCData`` and the
dict ``WRAPPER_TYPES``), and accepts only wrapper classes whose module is
``lmcache.v1.platform.devices.<name>``; a wrapper from an external wheel fails there
with KeyError / ValueError. ``WireType.register`` therefore:

1. adds the plugin's descriptor (``<prefix>IPCData``, made here with the plugin's
   namespaced tag) to ``WireIPCData``, validated by building a msgspec Decoder
   first;
2. maps it to the wrapper class in ``WRAPPER_TYPES``;
3. installs an alias module ``lmcache.v1.platform.devices._<tag>`` whose wrapper
   class loads on first use (it cannot be imported during discovery).

The plugin's spec module calls it when LMCache loads the plugin, in the worker *and*
the server (the server decodes a descriptor before it reads any DeviceSpec
property). It changes LMCache internals, so a plugin calls it only on the releases
it was tested with, and it fails loudly: LMCache then skips the plugin and logs why.
The upstream-ready alternative, an in-tree wire type, is in the plugin's README
("Upstream alternative"); an in-tree backend's copy of the shims leaves this out.

Must not import, at top level, anything from LMCache but ``ipc_wire`` (msgspec only:
safe during discovery), and that only on releases that have it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from typing import Any, Literal
import sys
import types

# Local
from .resolve import HAS_WIRE_ALLOWLIST

#: Where LMCache's codec imports wrapper classes from (``WRAPPER_TYPES``' modules).
DEVICES_PACKAGE = "lmcache.v1.platform.devices"


class WireType:
    """One plugin's IPC wire type: its descriptor classes and their registration.

    ``tag`` is the descriptor's msgspec tag, namespaced (``ext_<package>``: never one
    of LMCache's own); ``prefix`` the plugin's class prefix (``<prefix>IPCData``,
    ``<prefix>PlaneData``, the wrapper ``<prefix>IPCWrapper``); ``module`` the
    binding module the descriptor classes say they come from. On a release with the
    allowlist the classes are made at once (``wire.<prefix>IPCData``); before, there
    are none, and registering does nothing.
    """

    def __init__(self, tag: str, prefix: str, module: str) -> None:
        self.tag, self.module = tag, module
        self.wrapper_name = f"{prefix}IPCWrapper"
        self.alias_name = f"_{tag}"
        self.alias_path = f"{DEVICES_PACKAGE}.{self.alias_name}"
        self.classes: dict[str, type] = {}
        self.ipc_wire: Any = None
        if HAS_WIRE_ALLOWLIST:
            # First Party
            from lmcache.v1.platform.base import ipc_wire

            self.ipc_wire = ipc_wire
            self.classes = descriptor_types(ipc_wire, tag, prefix, module)
        self.data_cls = self.classes.get(f"{prefix}IPCData")

    def __getattr__(self, name: str) -> type:
        """The descriptor classes, by name (``<prefix>IPCData``, ...)."""
        if name in self.__dict__.get("classes", {}):
            return self.__dict__["classes"][name]
        raise AttributeError(
            f"{name!r} is not a wire class of tag {self.__dict__.get('tag')!r} on this "
            "lmcache (the wire allowlist, and its classes, exist from 0.5.6 on)"
        )

    def publish_wrapper_class(self, wrapper_cls: type) -> None:
        """Give the wrapper class the module name LMCache's wire accepts (0.5.6+)."""
        if HAS_WIRE_ALLOWLIST:
            wrapper_cls.__module__ = self.alias_path

    def register(self, load_wrapper: Callable[[], type]) -> None:
        """Make the wrapper ``load_wrapper()`` returns decodable by LMCache's IPC codec
        (0.5.6+; idempotent).

        ``load_wrapper`` imports the wrapper class; the codec calls it the first time
        it decodes this plugin's descriptor. Raises on a conflicting tag or alias
        module, before anything is changed.
        """
        if self.data_cls is None:
            return
        ipc_wire, data_cls = self.ipc_wire, self.data_cls
        mapped = (self.alias_name, self.wrapper_name)
        if ipc_wire.WRAPPER_TYPES.get(data_cls) == mapped:
            return
        taken = {getattr(t, "__struct_config__").tag for t in ipc_wire.WRAPPER_TYPES}
        if self.tag in taken:
            raise RuntimeError(
                f"IPC wire tag {self.tag!r} is already registered by another plugin"
            )
        existing = sys.modules.get(self.alias_path)
        if existing is not None and getattr(existing, "WIRE_TAG", None) != self.tag:
            raise RuntimeError(
                f"{self.alias_path} already exists and is not this plugin's alias"
            )
        # Third Party
        import msgspec

        union = ipc_wire.WireIPCData | data_cls
        msgspec.msgpack.Decoder(union)  # raises on a tag clash before any change
        ipc_wire.WireIPCData = union
        wrapper_module = sys.modules.get("lmcache.v1.platform.base.ipc_wrapper")
        if wrapper_module is not None:  # it reads the union from its own globals
            wrapper_module.WireIPCData = union  # type: ignore[attr-defined]
        ipc_wire.WRAPPER_TYPES[data_cls] = mapped
        sys.modules[self.alias_path] = self.alias_module(load_wrapper)

    def alias_module(self, load_wrapper: Callable[[], type]) -> types.ModuleType:
        """The module LMCache's codec imports the wrapper class from."""
        alias = types.ModuleType(
            self.alias_path,
            "Alias of a plugin's IPC wrapper for LMCache's wire allowlist.",
        )
        path, wrapper_name = self.alias_path, self.wrapper_name

        def wrapper_class(name: str) -> Any:
            if name != wrapper_name:
                raise AttributeError(f"module {path!r} has no attribute {name!r}")
            return load_wrapper()

        alias.__getattr__ = wrapper_class  # type: ignore[method-assign]
        alias.WIRE_TAG = self.tag  # type: ignore[attr-defined]
        return alias


def descriptor_types(
    ipc_wire: Any, tag: str, prefix: str, module: str
) -> dict[str, type]:
    """A plugin's wire descriptor: ``<prefix>IPCData`` (tagged ``tag``: one layer as
    the engine registered it, a tensor (``bare``) or its planes, as LMCache's
    ``NpuIPCData``) of ``<prefix>PlaneData`` (one exported tensor view: its
    allocation's opaque runtime handle, the allocation's size and the view's place
    in it), as msgspec Structs of ``module``."""
    # Third Party
    import msgspec

    def check_plane(self: Any) -> None:
        if self.alloc_offset + self.metadata.byte_span() > self.nbytes:
            raise ValueError(
                f"{type(self).__name__}: IPC view exceeds the exported allocation"
            )

    def check_layer(self: Any) -> None:
        if not self.planes or (self.bare and len(self.planes) != 1):
            raise ValueError(
                f"{type(self).__name__}: a bare tensor has one plane, a layer "
                f"at least one; got bare={self.bare} with {len(self.planes)}"
            )
        uuids = {plane.metadata.device_uuid for plane in self.planes}
        if len(uuids) != 1:
            raise ValueError(f"{type(self).__name__}: planes on {len(uuids)} devices")

    plane = msgspec.defstruct(
        f"{prefix}PlaneData",
        [
            ("handle", bytes),
            ("alloc_offset", ipc_wire.NonNegative),
            ("nbytes", ipc_wire.NonNegative),
            ("metadata", ipc_wire.TensorMetadata),
        ],
        module=module,
        namespace={"__post_init__": check_plane},
        forbid_unknown_fields=True,
    )
    layer = msgspec.defstruct(
        f"{prefix}IPCData",
        [("version", Literal[1]), ("bare", bool), ("planes", tuple[plane, ...])],  # type: ignore[valid-type]
        module=module,
        namespace={"__post_init__": check_layer},
        tag=tag,
        forbid_unknown_fields=True,
    )
    return {layer.__name__: layer, plane.__name__: plane}
