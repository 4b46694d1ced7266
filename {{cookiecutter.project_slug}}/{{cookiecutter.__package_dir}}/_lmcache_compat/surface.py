# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Everything this backend takes from LMCache, declared once, as data.

Why a module of its own: the compat layer resolves LMCache's names from it
(``NAMES``).
{%- if cookiecutter.ownership == 'wheel' %} The doctor's ``--api`` checks the installed lmcache against all
of it, and a test retires the shims with it.
{%- endif %}
Each entry names the releases it is known for: ``first`` and ``last`` bound them
(``None``: open). An entry whose ``last`` is a release is a shim for older
releases, to be removed once no supported release needs it.

Must import nothing: it is read before LMCache is importable, and by tools that
only inspect it. What the tests' harness (worker, scheduler and servers) takes
from LMCache is declared the same way, in the kit
(``lmcache_device_kit/harness/surface.py``).
"""

# Future
from __future__ import annotations

#: (module, attribute or None for the module itself, first release, last release)
Location = tuple[str, str | None, str | None, str | None]
#: (member, first release that has it, last release that has it)
Member = tuple[str, str | None, str | None]
#: How a callable is called: (positional arguments: their names as LMCache declares
#: them, or only how many; keyword arguments; first release; last release).
Shape = tuple[tuple[str, ...] | int, tuple[str, ...], str | None, str | None]


def always(
    positional: tuple[str, ...] | int, keywords: tuple[str, ...] = ()
) -> tuple[Shape, ...]:
    """A call shape every release takes."""
    return ((positional, keywords, None, None),)


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
{%- if cookiecutter.lmcache_driven != 'no' %}
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
{%- endif %}
}
{%- if cookiecutter.ownership == 'wheel' %}

#: This backend's classes: role -> (module, class, the LMCache base it extends, the
#: base's members it overrides that LMCache calls).
CLASSES: dict[str, tuple[str, str, str, tuple[Member, ...]]] = {
    "spec": (
        "{{ cookiecutter.__spec_relative }}",
        "{{ cookiecutter.class_prefix }}DeviceSpec",
        "DeviceSpec",
        (
            ("device_type", None, None),
            ("backend_name", None, None),
            ("torch_module_name", None, None),
            ("ops_cls", None, None),
            ("is_available", None, None),
            ("get_stream_handle", "0.5.6", None),
            ("is_lmcache_driven_available", "0.5.6", None),
            ("is_handle_transfer_available", None, "0.5.5"),
{%- if cookiecutter.lmcache_driven != 'no' %}
            ("default_mp_transfer_mode", "0.5.6", None),
            ("ipc_wrapper_cls", None, None),
            ("event_ipc_backend", None, None),
            ("pin_memory_backend", None, None),
            ("create_cache_context", None, None),
{%- endif %}
        ),
    ),
    "ops": (
        ".device_ops",
        "{{ cookiecutter.class_prefix }}DeviceOps",
        "DeviceOps",
        (
            ("device_type", None, None),
            ("ensure_native", None, None),
            ("tensor_from_ptr", "0.5.6", None),
            ("lmcache_memcpy_async", None, None),
            ("multi_layer_block_kv_transfer", None, None),
{%- if cookiecutter.lmcache_driven != 'no' %}
            ("record_completion_on_stream", None, None),
            ("record_event_on_stream", None, None),
{%- endif %}
        ),
    ),
{%- if cookiecutter.lmcache_driven != 'no' %}
    "ipc_wrapper": (
        ".ipc_wrapper",
        "{{ cookiecutter.class_prefix }}IPCWrapper",
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
        "{{ cookiecutter.class_prefix }}CacheContext",
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
        "{{ cookiecutter.class_prefix }}EventIPCBackend",
        "DefaultEventIPCBackend",
        (
            ("check_event_support", None, None),
            ("create_event", None, None),
            ("export_event", None, None),
            ("import_event", None, None),
        ),
    ),
    "pin_memory": (
        ".pin_memory",
        "{{ cookiecutter.class_prefix }}PinMemoryBackend",
        "PinMemoryBackend",
        (
            ("pin_memory", None, None),
            ("unpin_memory", None, None),
            ("is_pin_supported", None, None),
        ),
    ),
{%- endif %}
}

#: LMCache callables this backend calls, and how, newest release first: the first
#: shape that binds wins; one that binds on no shape is a call that would fail.
CALLS: dict[str, tuple[Shape, ...]] = {
    "init_logger": always(1),
    "resolve_device_ops": always(1),
    "torch_ops.lmcache_memcpy_async": always(6),
    "torch_ops.multi_layer_block_kv_transfer": always(9),
{%- if cookiecutter.lmcache_driven != 'no' %}
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
{%- endif %}
}

#: Code that serves older releases only (beyond the locations above): what it
#: is, where it lives, and the last release that needs it.
SHIMS: dict[str, tuple[str, str]] = {
    "is_handle_transfer_available, the old spelling": ("PortableDeviceSpec", "0.5.5"),
    "auto is LMCache-driven for CUDA only": ("auto_transfer_mode", "0.5.5"),
{%- if cookiecutter.lmcache_driven != 'no' %}
    "per-layer rebuild of paged caches": (
        "kv_layout.paged_layers_for_baseline",
        "0.5.5",
    ),
    "exported events kept alive by the backend": ("event_ipc", "0.5.4"),
{%- endif %}
}
{%- endif %}
