# SPDX-License-Identifier: Apache-2.0
"""A plugin wheel's IPC wire type (``lmcache_device_kit.compat.wire``): made from the
plugin's names, registered with LMCache's closed allowlist on releases that have it
(0.5.6+), nothing on those that pickle wrappers.

Each case runs in a process of its own: registering changes LMCache's codec.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata

# Third Party
from conftest import in_lmcache
import pytest

#: lmcache 0.5.6+ has the allowlist (read from its files: importing it here would load
#: every installed plugin into this process).
ALLOWLIST = "lmcache/v1/platform/base/ipc_wire.py"
needs_allowlist = pytest.mark.skipif(
    ALLOWLIST not in {str(f) for f in metadata.files("lmcache") or []},
    reason="this lmcache pickles IPC wrappers: it has no wire allowlist (0.5.6+)",
)

#: A descriptor of the test's wire type, and LMCache's union decoding it.
ROUND_TRIP = """
    import importlib, json, msgspec
    from lmcache.v1.platform.base import ipc_wire
    from lmcache_device_kit.compat.wire import WireType

    class KitTestIPCWrapper:
        pass

    wire = WireType("ext_kit_test", "KitTest", "kit_test_binding")
    loads = []
    def load():
        loads.append(1)
        return KitTestIPCWrapper
    metadata = ipc_wire.TensorMetadata(
        dtype="float16", shape=(2, 4), stride=(4, 1), storage_offset=0,
        device_uuid="gpu-0")
    plane = wire.KitTestPlaneData(handle=b"h", alloc_offset=0, nbytes=64,
                                  metadata=metadata)
    data = wire.KitTestIPCData(version=1, bare=True, planes=(plane,))
"""


@needs_allowlist
def test_a_registered_wire_type_has_the_plugins_names_and_decodes_in_lmcache() -> None:
    """The descriptor classes carry the plugin's names and tag; once registered,
    LMCache's union decodes the descriptor, its allowlist maps it to the wrapper,
    whose alias module imports the wrapper on first use only; again is a no-op."""
    found = in_lmcache(
        ROUND_TRIP
        + """
    names = [
        (c.__name__, c.__qualname__, c.__module__)
        for c in (type(data), type(plane))
    ]
    tag = type(data).__struct_config__.tag
    wire.register(load)
    wire.register(load)
    payload = msgspec.msgpack.encode(data)
    decoded = msgspec.msgpack.decode(payload, type=ipc_wire.WireIPCData)
    mapped = ipc_wire.WRAPPER_TYPES[type(data)]
    before = len(loads)
    alias = importlib.import_module("lmcache.v1.platform.devices._ext_kit_test")
    wire.publish_wrapper_class(KitTestIPCWrapper)
    print(json.dumps([names, tag, decoded == data, list(mapped), before,
                      alias.KitTestIPCWrapper is KitTestIPCWrapper, len(loads),
                      KitTestIPCWrapper.__module__]))
    """
    )
    names, tag, equal, mapped, before, same, after, module = found
    assert names == [
        ["KitTestIPCData", "KitTestIPCData", "kit_test_binding"],
        ["KitTestPlaneData", "KitTestPlaneData", "kit_test_binding"],
    ]
    assert tag == "ext_kit_test" and equal is True
    assert mapped == ["_ext_kit_test", "KitTestIPCWrapper"]
    assert (before, same, after) == (0, True, 1)
    assert module == "lmcache.v1.platform.devices._ext_kit_test"


@needs_allowlist
def test_a_descriptor_that_breaks_its_rules_is_refused_by_lmcaches_decoder() -> None:
    """A bare tensor with two planes, a view past its allocation, a layer's planes on
    two devices: the decoder raises."""
    found = in_lmcache(
        ROUND_TRIP
        + """
    wire.register(load)
    refused = []
    fields = msgspec.structs.asdict(plane)
    o = msgspec.structs.replace(metadata, device_uuid="gpu-1")  # another device
    for bad in (
        {"version": 1, "bare": True, "planes": [fields] * 2},
        {"version": 1, "bare": True, "planes": [{**fields, "nbytes": 4}]},
        {"version": 1, "bare": False, "planes": [fields, {**fields, "metadata": o}]},
    ):
        payload = msgspec.msgpack.encode({"type": "ext_kit_test", **bad})
        try:
            msgspec.msgpack.decode(payload, type=ipc_wire.WireIPCData)
        except msgspec.ValidationError as exc:
            refused.append(str(exc))
    print(json.dumps(refused))
    """
    )
    assert len(found) == 3, found
    assert "a bare tensor has one plane" in found[0]
    assert "IPC view exceeds the exported allocation" in found[1]
    assert "KitTestIPCData: planes on 2 devices" in found[2]


@needs_allowlist
def test_a_tag_another_plugin_registered_is_refused_before_anything_changes() -> None:
    found = in_lmcache(
        ROUND_TRIP
        + """
    wire.register(load)
    rival = WireType("ext_kit_test", "Rival", "rival_binding")
    union = ipc_wire.WireIPCData
    try:
        rival.register(load)
        said = "registered"
    except RuntimeError as exc:
        said = str(exc)
    print(json.dumps([said, ipc_wire.WireIPCData is union,
                      rival.RivalIPCData in ipc_wire.WRAPPER_TYPES]))
    """
    )
    assert found == [
        "IPC wire tag 'ext_kit_test' is already registered by another plugin",
        True,
        False,
    ]


@needs_allowlist
def test_where_wrappers_are_pickled_a_wire_type_has_no_classes_and_does_nothing() -> (
    None
):
    """lmcache 0.5.4/0.5.5 have no allowlist (``HAS_WIRE_ALLOWLIST``): the wrapper
    travels pickled, as it is, and nothing of LMCache changes."""
    found = in_lmcache(
        """
        import json, sys
        import lmcache
        from lmcache.v1.platform.base import ipc_wire
        from lmcache_device_kit.compat import wire as module
        module.HAS_WIRE_ALLOWLIST = False
        wire = module.WireType("ext_kit_test", "KitTest", "kit_test_binding")
        types = dict(ipc_wire.WRAPPER_TYPES)
        wrapper = type("KitTestIPCWrapper", (), {})
        wire.register(lambda: wrapper)
        wire.publish_wrapper_class(wrapper)
        try:
            wire.KitTestIPCData
            said = "a class"
        except AttributeError as exc:
            said = str(exc)
        alias = "lmcache.v1.platform.devices._ext_kit_test" in sys.modules
        print(json.dumps([wire.classes, ipc_wire.WRAPPER_TYPES == types, alias,
                          wrapper.__module__, said]))
        """
    )
    assert found[:4] == [{}, True, False, "__main__"]
    assert "exist from 0.5.6 on" in found[4]
