# SPDX-License-Identifier: Apache-2.0
"""What a plugin takes from LMCache beyond where names live, as data: the base-class
members its classes override, the calls it makes and the shims for old releases.

Why a module of its own: only the kit's ``doctor --api`` and the conformance tests
read it (``surface.NAMES`` is what the shims resolve at run time), so an in-tree
backend's copy of the shims leaves it out. The plugin's classes are named after its
class prefix, which its binding module (``<package>/_lmcache_compat.py``) declares:
``classes`` builds the table from it. Each entry names the releases it is known for
(``first``, ``last``; ``None``: open), as in ``surface``.

Must import nothing: tools read it without LMCache.
"""

# Future
from __future__ import annotations

#: (member, first release that has it, last release that has it)
Member = tuple[str, str | None, str | None]
#: How a callable is called: (positional arguments: their names as LMCache declares
#: them, or only how many; keyword arguments; first release; last release).
Shape = tuple[tuple[str, ...] | int, tuple[str, ...], str | None, str | None]
#: A plugin class: (module relative to the package, class, the LMCache base it
#: extends, the base's members it overrides that LMCache calls).
PluginClass = tuple[str, str, str, tuple[Member, ...]]


def always(
    positional: tuple[str, ...] | int, keywords: tuple[str, ...] = ()
) -> tuple[Shape, ...]:
    """A call shape every release takes."""
    return ((positional, keywords, None, None),)


SPEC_MEMBERS: tuple[Member, ...] = (
    ("device_type", None, None),
    ("backend_name", None, None),
    ("torch_module_name", None, None),
    ("ops_cls", None, None),
    ("is_available", None, None),
    ("get_stream_handle", "0.5.6", None),
    ("is_lmcache_driven_available", "0.5.6", None),
    ("is_handle_transfer_available", None, "0.5.5"),
)
OPS_MEMBERS: tuple[Member, ...] = (
    ("device_type", None, None),
    ("ensure_native", None, None),
    ("tensor_from_ptr", "0.5.6", None),
    ("lmcache_memcpy_async", None, None),
    ("multi_layer_block_kv_transfer", None, None),
)
#: The members and classes of LMCache-driven transfer (the server maps the worker's
#: KV caches: IPC wrapper, cache context, event IPC, pinning).
LMCACHE_DRIVEN_SPEC_MEMBERS: tuple[Member, ...] = (
    ("default_mp_transfer_mode", "0.5.6", None),
    ("ipc_wrapper_cls", None, None),
    ("event_ipc_backend", None, None),
    ("pin_memory_backend", None, None),
    ("create_cache_context", None, None),
)
LMCACHE_DRIVEN_OPS_MEMBERS: tuple[Member, ...] = (
    ("record_completion_on_stream", None, None),
    ("record_event_on_stream", None, None),
)
#: role -> (module, class name after the prefix, base, members), as ``PluginClass``.
LMCACHE_DRIVEN_CLASSES: dict[str, PluginClass] = {
    "ipc_wrapper": (
        ".ipc_wrapper",
        "IPCWrapper",
        "DeviceIPCWrapper",
        (
            ("to_tensor", None, None),
            ("close", "0.5.5", None),
            ("to_wire", "0.5.6", None),
            ("from_wire", "0.5.6", None),
        ),
    ),
    "cache_context": (
        ".cache_context",
        "CacheContext",
        "BaseCacheContext",
        (
            ("device_type", None, None),
            ("stream", None, None),
            ("cupy_stream", None, None),
            ("max_batch_size", None, None),
            ("close", None, None),
            ("get_kernel_group_kv_pointers", None, None),
            ("get_temp_kernel_group_buffer", None, None),
            ("get_temp_object_group_buffer", None, None),
            ("get_kernel_group_shape_dtype", None, None),
            ("cache_size_per_token", None, None),
        ),
    ),
    "event_ipc": (
        ".event_ipc",
        "EventIPCBackend",
        "DefaultEventIPCBackend",
        (
            ("check_event_support", None, None),
            ("create_event", None, None),
            ("export_event", None, None),
            ("import_event", None, None),
            ("wait_event", None, None),
        ),
    ),
    "pin_memory": (
        ".pin_memory",
        "PinMemoryBackend",
        "PinMemoryBackend",
        (
            ("pin_memory", None, None),
            ("unpin_memory", None, None),
            ("is_pin_supported", None, None),
        ),
    ),
}


def classes(prefix: str, lmcache_driven: bool) -> dict[str, PluginClass]:
    """A plugin's classes by role (its spec module is ``device``), named
    ``<prefix>DeviceSpec``, ``<prefix>DeviceOps``, ...; with the LMCache-driven ones
    when the plugin has them."""
    driven = lmcache_driven
    found: dict[str, PluginClass] = {
        "spec": (
            ".device",
            f"{prefix}DeviceSpec",
            "DeviceSpec",
            SPEC_MEMBERS + (LMCACHE_DRIVEN_SPEC_MEMBERS if driven else ()),
        ),
        "ops": (
            ".device_ops",
            f"{prefix}DeviceOps",
            "DeviceOps",
            OPS_MEMBERS + (LMCACHE_DRIVEN_OPS_MEMBERS if driven else ()),
        ),
    }
    for role, (module, suffix, base, members) in LMCACHE_DRIVEN_CLASSES.items():
        if driven:
            found[role] = (module, prefix + suffix, base, members)
    return found


def extension_classes(prefix: str) -> dict[str, PluginClass]:
    """The classes of a plugin that extends a built-in backend: its spec alone (the
    ops and LMCache-driven parts are the built-in's), whose members may override the
    built-in's LMCache-driven answers."""
    members = SPEC_MEMBERS + LMCACHE_DRIVEN_SPEC_MEMBERS
    return {"spec": (".device", f"{prefix}DeviceSpec", "DeviceSpec", members)}


#: LMCache callables every plugin and these shims call, and how, newest release
#: first: the first shape that binds wins; one that binds on no shape is a call that
#: would fail.
CALLS: dict[str, tuple[Shape, ...]] = {
    "init_logger": always(1),
    "resolve_device_ops": always(1),
    "torch_ops.lmcache_memcpy_async": always(6),
    "torch_ops.multi_layer_block_kv_transfer": always(9),
}
#: The calls of LMCache-driven transfer (the ops' recorders, the KV layouts, the
#: cache context, event IPC).
LMCACHE_DRIVEN_CALLS: dict[str, tuple[Shape, ...]] = {
    "torch_ops.record_completion_on_stream": always(3),
    "torch_ops.record_event_on_stream": always(5),
    "normalize_and_discover_per_layer_formats": always(4),
    "engine_group_layer_indices": always(1),
    "get_group_data_ptrs": always(3),
    "get_device": always(1),
    "infer_kv_dtype": always(3),
    "kv_format_spec": always(1),
    "KVLayerGroupsManager": always(
        1,
        (
            "engine_kv_formats",
            "engine_group_infos",
            "lmcache_tokens_per_chunk",
            "separate_object_groups",
        ),
    ),
    "BaseCacheContext.__init__": always(
        1,
        (
            "kv_caches",
            "device",
            "num_layers",
            "kv_layer_groups_manager",
            "block_ids_buffer",
            "lmcache_tokens_per_chunk",
        ),
    ),
    "DefaultEventIPCBackend.__init__": always(1, ("event_module", "device_type")),
}


#: What LMCache looks up on ``lmcache.device_ops`` beyond its torch baseline, by
#: ``hasattr`` (``multiprocess/object_group_transfer.py``): its own compiled
#: extension's fast paths, which a plugin's native module may export too (bind_native
#: binds every public callable and type), shaped as LMCache calls or constructs
#: them, from the first release that does: one native call per object group
#: (``execute_object_group_transfer``), and the copy engine moving each block
#: straight between the paged cache and the pinned L1 chunk (the direct path: the
#: four names LMCache looks up together, and the types it builds the plan with).
NATIVE_ONLY: dict[str, tuple[Shape, ...]] = {
    "execute_object_group_transfer": ((5, (), "0.5.4", None),),
    "execute_direct_copy_transfer": ((5, (), "0.5.6", None),),
    "batch_memcpy_supported": ((0, (), "0.5.6", None),),
    "direct_copy_format_supported": ((1, (), "0.5.6", None),),
    "DirectCopyGroupSpec": ((6, (), "0.5.6", None),),
    "DirectCopyObject": ((5, (), "0.5.6", None),),
}


def calls(lmcache_driven: bool) -> dict[str, tuple[Shape, ...]]:
    """The calls a plugin makes: with LMCache-driven transfer's when it has it."""
    return {**CALLS, **(LMCACHE_DRIVEN_CALLS if lmcache_driven else {})}


#: Code that serves older releases only (beyond the locations of ``surface``): what
#: it is, where it lives, and the last release that needs it.
SHIMS: dict[str, tuple[str, str]] = {
    "is_handle_transfer_available, the old spelling": ("PortableDeviceSpec", "0.5.5"),
    "auto is LMCache-driven for CUDA only": ("auto_transfer_mode", "0.5.5"),
    "per-layer rebuild of paged caches": (
        "kv_layout.paged_layers_for_baseline",
        "0.5.5",
    ),
    "exported events kept alive by the backend": ("event_ipc", "0.5.4"),
}
