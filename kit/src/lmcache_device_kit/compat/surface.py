# SPDX-License-Identifier: Apache-2.0
"""Where each LMCache name the shims resolve lives, release by release, as data.

Why a module of its own: ``resolve`` finds LMCache's names from it (``NAMES``), and
the kit's ``doctor --api`` checks the installed lmcache against it (with
``declared``: the classes, calls and shims). Each location names the releases it is
known for: ``first`` and ``last`` bound them (``None``: open). A location whose
``last`` is a release is a shim for older releases, to be removed once no supported
release needs it.

Must import nothing: it is read before LMCache is importable, and by tools that only
inspect it. What the tests' harness takes from LMCache is declared the same way in
``lmcache_device_kit/harness/surface.py``.
"""

# Future
from __future__ import annotations

#: The oldest LMCache release the shims serve: the template's oldest tested release
#: (its tests hold the two equal). A plugin may support fewer (one that extends a
#: built-in starts where its built-in's location does), never older.
FIRST_SERVED_RELEASE = "0.5.4"

#: (module, attribute or None for the module itself, first release, last release)
Location = tuple[str, str | None, str | None, str | None]

# Where each name lives, newest release first; the first location that exists
# wins. The guide ("Adding a New Device Backend") names some differently; the
# code is the truth. In 0.5.6 the torch baseline became a package (torch_ops/),
# MPTransferMode moved to transfer_mode and built-in backends moved from
# platform/<name>/ to platform/devices/<name>/. TransferDirection and
# EngineKVFormat come from the compiled lmcache.lmcache_native.
NAMES: dict[str, tuple[Location, ...]] = {
    "DeviceSpec": (("lmcache.v1.platform.base.device_spec", "DeviceSpec", None, None),),
    "DeviceOps": (("lmcache.v1.platform.base.device_ops", "DeviceOps", None, None),),
    "torch_ops": (("lmcache.v1.platform.torch_ops", None, None, None),),
    "TransferDirection": (("lmcache.lmcache_native", "TransferDirection", None, None),),
    "EngineKVFormat": (("lmcache.lmcache_native", "EngineKVFormat", None, None),),
    "PageBufferShapeDesc": (
        ("lmcache.v1.platform.ops_types", "PageBufferShapeDesc", None, None),
    ),
    "MPTransferMode": (
        ("lmcache.v1.multiprocess.transfer_mode", "MPTransferMode", "0.5.6", None),
        (
            "lmcache.v1.multiprocess.transfer_context.worker_transfer",
            "MPTransferMode",
            None,
            "0.5.5",
        ),
    ),
    "init_logger": (("lmcache.logging", "init_logger", None, None),),
    "resolve_device_ops": (("lmcache.v1.platform", "resolve_device_ops", None, None),),
    # The device-plugin API itself: the entry-point group LMCache loads plugins from.
    "plugin_group": (
        (
            "lmcache.v1.platform._device_detect",
            "DEVICE_PLUGIN_ENTRY_POINT_GROUP",
            None,
            None,
        ),
    ),
    # Private: the registry and detection the doctor reports on.
    "device_registry": (("lmcache.v1.platform", "_DEVICE_REGISTRY", None, None),),
    "detect_device": (
        ("lmcache.v1.platform._device_detect", "_detect_device", None, None),
    ),
    # 0.5.6+: the closed wire allowlist LMCache-driven wrappers travel through.
    "ipc_wire": (("lmcache.v1.platform.base.ipc_wire", None, "0.5.6", None),),
    # Private: the baseline's pointer-mode copy library (tests check it never loads).
    "baseline_copy_module": (
        ("lmcache.v1.platform.torch_ops._tensor_from_ptr", None, "0.5.6", None),
        ("lmcache.v1.platform.torch_ops", None, None, "0.5.5"),
    ),
    # The IPC wrapper base (LMCache-driven transfer; its tests run in every render).
    "DeviceIPCWrapper": (
        ("lmcache.v1.platform.base.ipc_wrapper", "DeviceIPCWrapper", None, None),
    ),
    # LMCache-driven transfer (cache context, event IPC, pinning):
    "BaseCacheContext": (
        ("lmcache.v1.platform.base.cache_context", "BaseCacheContext", None, None),
    ),
    "DefaultEventIPCBackend": (
        ("lmcache.v1.platform.base.event_ipc", "DefaultEventIPCBackend", None, None),
    ),
    "PinMemoryBackend": (
        ("lmcache.v1.platform.base.pin_memory", "PinMemoryBackend", None, None),
    ),
    "EngineType": (("lmcache.utils", "EngineType", None, None),),
    "KVLayerGroupsManager": (
        ("lmcache.v1.kv_layer_groups", "KVLayerGroupsManager", None, None),
    ),
    "engine_group_layer_indices": (
        (
            "lmcache.v1.multiprocess.group_view",
            "engine_group_layer_indices",
            None,
            None,
        ),
    ),
    "get_group_data_ptrs": (
        ("lmcache.v1.gpu_connector.utils", "get_group_data_ptrs", None, None),
    ),
    "get_device": (("lmcache.v1.gpu_connector.utils", "get_device", None, None),),
    "normalize_and_discover_per_layer_formats": (
        (
            "lmcache.v1.gpu_connector.utils",
            "normalize_and_discover_per_layer_formats",
            None,
            None,
        ),
    ),
    "kv_format_spec": (
        (
            "lmcache.v1.gpu_connector.kv_format.specs.registry",
            "get_spec_class",
            None,
            None,
        ),
    ),
    # Private baseline helper: KV dtype from a PageBufferShapeDesc (fp16/bf16 safe).
    "infer_kv_dtype": (
        (
            "lmcache.v1.platform.torch_ops.mp_mem_kernels",
            "_infer_kv_dtype",
            "0.5.6",
            None,
        ),
        ("lmcache.v1.platform.torch_ops", "_infer_kv_dtype", None, "0.5.5"),
    ),
    # Private baseline helper for the per-layer rebuild (kv_layout.py).
    "per_layer_paged_shape": (
        ("lmcache.v1.platform.torch_ops", "_per_layer_paged_shape", None, "0.5.5"),
    ),
}

#: Where LMCache keeps its built-in backends' packages (``<package>.<backend>``, whose
#: ``__init__`` defines the spec), for a plugin that extends one: 0.5.6 moved them
#: from ``platform/<name>/`` to ``platform/devices/<name>/``.
BUILTIN_PACKAGES: tuple[Location, ...] = (
    ("lmcache.v1.platform.devices", None, "0.5.6", None),
    ("lmcache.v1.platform", None, None, "0.5.5"),
)
