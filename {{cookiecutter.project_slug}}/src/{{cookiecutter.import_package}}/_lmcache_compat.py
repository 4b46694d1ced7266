# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Everything this plugin knows about a particular LMCache release, in one place.

Why it exists: LMCache's plugin interface still moves between releases (module
paths, capability names, wire formats). Every other module imports LMCache
names from here, so supporting a new release means editing this file and
re-running the tests, nowhere else.

Tested with: lmcache {{ cookiecutter._lmcache_tested }} (``pyproject.toml`` pins
``{{ cookiecutter._lmcache_requirement }}``).

Must not import, at top level, anything from LMCache except ``DeviceSpec``:
LMCache imports this module (through ``device.py``) while it is still building
its device registry inside ``import lmcache``. Any other LMCache import here is
a circular import, and LMCache then drops the plugin with only a warning. The
other names are resolved on first use through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any

# The one eager import: the base class LMCache's loader checks against.
from lmcache.v1.platform.base.device_spec import DeviceSpec

if TYPE_CHECKING:
    from lmcache.lmcache_native import EngineKVFormat, TransferDirection
    from lmcache.logging import init_logger
{%- if cookiecutter.lmcache_driven != 'no' %}
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector.kv_format.specs.registry import get_spec_class as kv_format_spec
    from lmcache.v1.gpu_connector.utils import get_group_data_ptrs, normalize_and_discover_per_layer_formats
    from lmcache.v1.kv_layer_groups import KVLayerGroupsManager
    from lmcache.v1.multiprocess.group_view import engine_group_layer_indices
{%- endif %}
    from lmcache.v1.multiprocess.transfer_mode import MPTransferMode
    from lmcache.v1.platform import torch_ops
{%- if cookiecutter.lmcache_driven != 'no' %}
    from lmcache.v1.platform.base.cache_context import BaseCacheContext
{%- endif %}
    from lmcache.v1.platform.base.device_ops import DeviceOps
{%- if cookiecutter.lmcache_driven != 'no' %}
    from lmcache.v1.platform.base.event_ipc import DefaultEventIPCBackend
    from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
    from lmcache.v1.platform.base.pin_memory import PinMemoryBackend
{%- endif %}
    from lmcache.v1.platform.ops_types import PageBufferShapeDesc
{%- if cookiecutter.lmcache_driven != 'no' %}
    from lmcache.v1.platform.torch_ops.mp_mem_kernels import _infer_kv_dtype as infer_kv_dtype
{%- endif %}

__all__ = [
{%- if cookiecutter.lmcache_driven != 'no' %}
    "BaseCacheContext",
    "DefaultEventIPCBackend",
    "DeviceIPCWrapper",
    "EngineType",
    "KVLayerGroupsManager",
    "PinMemoryBackend",
    "WIRE_MODULE",
    "{{ cookiecutter.class_prefix }}IPCData",
    "engine_group_layer_indices",
    "get_group_data_ptrs",
    "infer_kv_dtype",
    "kv_format_spec",
    "normalize_and_discover_per_layer_formats",
{%- endif %}
    "DeviceOps",
    "DeviceSpec",
    "EngineKVFormat",
    "MPTransferMode",
    "PageBufferShapeDesc",
    "SUPPORTED_LMCACHE",
    "TESTED_LMCACHE_VERSIONS",
    "TransferDirection",
    "init_logger",
    "torch_ops",
]

#: The requirement ``pyproject.toml`` declares; keep the two identical.
SUPPORTED_LMCACHE = "{{ cookiecutter._lmcache_requirement }}"
#: Releases the conformance suite has passed on.
TESTED_LMCACHE_VERSIONS = ("{{ cookiecutter._lmcache_tested }}",)

# Where each name lives in lmcache {{ cookiecutter._lmcache_tested }}. The guide ("Adding a New
# Device Backend") names some of these differently; the code is the truth:
#   * the torch baseline is the package lmcache/v1/platform/torch_ops/ (the
#     guide says torch_ops.py);
#   * TransferDirection / EngineKVFormat come from the compiled
#     lmcache.lmcache_native (DeviceOps only annotates them);
#   * built-in backends live in lmcache/v1/platform/devices/<name>/.
_LAZY_NAMES = {
    "DeviceOps": ("lmcache.v1.platform.base.device_ops", "DeviceOps"),
    "torch_ops": ("lmcache.v1.platform.torch_ops", None),
    "TransferDirection": ("lmcache.lmcache_native", "TransferDirection"),
    "EngineKVFormat": ("lmcache.lmcache_native", "EngineKVFormat"),
    "PageBufferShapeDesc": ("lmcache.v1.platform.ops_types", "PageBufferShapeDesc"),
    "MPTransferMode": ("lmcache.v1.multiprocess.transfer_mode", "MPTransferMode"),
    "init_logger": ("lmcache.logging", "init_logger"),
{%- if cookiecutter.lmcache_driven != 'no' %}
    # LMCache-driven transfer (IPC wrapper, cache context, event IPC, pinning):
    "DeviceIPCWrapper": ("lmcache.v1.platform.base.ipc_wrapper", "DeviceIPCWrapper"),
    "BaseCacheContext": ("lmcache.v1.platform.base.cache_context", "BaseCacheContext"),
    "DefaultEventIPCBackend": ("lmcache.v1.platform.base.event_ipc", "DefaultEventIPCBackend"),
    "PinMemoryBackend": ("lmcache.v1.platform.base.pin_memory", "PinMemoryBackend"),
    "EngineType": ("lmcache.utils", "EngineType"),
    "KVLayerGroupsManager": ("lmcache.v1.kv_layer_groups", "KVLayerGroupsManager"),
    "engine_group_layer_indices": ("lmcache.v1.multiprocess.group_view", "engine_group_layer_indices"),
    "get_group_data_ptrs": ("lmcache.v1.gpu_connector.utils", "get_group_data_ptrs"),
    "normalize_and_discover_per_layer_formats": (
        "lmcache.v1.gpu_connector.utils",
        "normalize_and_discover_per_layer_formats",
    ),
    "kv_format_spec": ("lmcache.v1.gpu_connector.kv_format.specs.registry", "get_spec_class"),
    # Private baseline helper: KV dtype from a PageBufferShapeDesc (fp16 vs bf16 safe).
    "infer_kv_dtype": ("lmcache.v1.platform.torch_ops.mp_mem_kernels", "_infer_kv_dtype"),
{%- endif %}
}


def __getattr__(name: str) -> Any:
    """Resolve LMCache names on first use, after ``import lmcache`` has finished."""
    try:
        module_name, attribute = _LAZY_NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def baseline_loaded_cuda_runtime() -> bool:
    """Whether LMCache's pointer-mode ``lmcache_memcpy_async`` baseline has loaded libcudart.

    The baseline loads the CUDA (or HIP) runtime on first pointer-mode use,
    which cannot address non-CUDA device memory; the conformance tests assert
    that this plugin's overrides never get there.
    """
    module = importlib.import_module("lmcache.v1.platform.torch_ops._tensor_from_ptr")
    return module._copy_lib is not module._copy_lib_NOT_LOADED


def installed_lmcache_version() -> str:
    """The installed LMCache release without local suffix, e.g. ``0.5.6``."""
    return metadata.version("lmcache").split("+", 1)[0]


def check_lmcache_version() -> None:
    """Refuse to load on an LMCache release this plugin was not tested with.

    Failure policy: loud. Raising here makes LMCache log "Failed to load LMCache
    device plugin ... <this message>" and skip the plugin, instead of running
    code written against another interface and failing later mid-transfer.
    """
    version = installed_lmcache_version()
    if version not in TESTED_LMCACHE_VERSIONS:
        raise RuntimeError(
            f"{{ cookiecutter.project_slug }} supports {SUPPORTED_LMCACHE} "
            f"(tested: {', '.join(TESTED_LMCACHE_VERSIONS)}), but lmcache {version} is "
            f"installed. Install a supported release (pip install '{SUPPORTED_LMCACHE}'), "
            "or port _lmcache_compat.py to the new release and run the conformance tests."
        )


check_lmcache_version()
{%- if cookiecutter.lmcache_driven != 'no' %}


# ---------------------------------------------------------------------------
# LMCache-driven transfer: make this plugin's IPC wire type known to LMCache.
#
# lmcache {{ cookiecutter._lmcache_tested }} encodes IPC wrappers through a closed allowlist in
# lmcache/v1/platform/base/ipc_wire.py (the tagged union ``WireIPCData`` and the
# dict ``WRAPPER_TYPES``), and accepts only wrapper classes whose module is
# ``lmcache.v1.platform.devices.<name>``. A wrapper from an external wheel fails
# with KeyError / ValueError there. So, at plugin load, this module:
#   1. defines the plugin's descriptor struct with a namespaced tag;
#   2. adds it to ``WireIPCData`` (validated by building a msgspec Decoder first);
#   3. maps it to the wrapper class in ``WRAPPER_TYPES``;
#   4. installs a lazy alias module ``lmcache.v1.platform.devices.<WIRE_MODULE>``
#      that resolves to ``ipc_wrapper.py`` on first use (the wrapper itself
#      cannot be imported during discovery).
# It must run at plugin load, in the worker *and* the server: the server decodes
# a descriptor before it reads any DeviceSpec property. It touches LMCache
# internals, so it is pinned to the tested releases and fails loudly (the plugin
# is then skipped with the reason in LMCache's log). The upstream-ready
# alternative, an in-tree wire type, is in README.md ("Upstream alternative").
# ---------------------------------------------------------------------------

import sys  # noqa: E402
import types  # noqa: E402

import msgspec  # noqa: E402
from lmcache.v1.platform.base import ipc_wire  # noqa: E402 - msgspec and torch only: safe during discovery

WIRE_TAG = "ext_{{ cookiecutter.import_package }}"
WIRE_MODULE = "_ext_{{ cookiecutter.import_package }}"
WIRE_MODULE_PATH = "lmcache.v1.platform.devices." + WIRE_MODULE
WRAPPER_NAME = "{{ cookiecutter.class_prefix }}IPCWrapper"


class {{ cookiecutter.class_prefix }}IPCData(ipc_wire.IPCData, tag=WIRE_TAG):  # type: ignore[call-arg]
    """Wire descriptor of a {{ cookiecutter.class_prefix }}IPCWrapper: an opaque runtime memory handle and byte range."""

    handle: bytes
    alloc_offset: ipc_wire.NonNegative
    nbytes: ipc_wire.NonNegative

    def __post_init__(self) -> None:
        if self.alloc_offset + self.metadata.byte_span() > self.nbytes:
            raise ValueError("IPC view exceeds the exported {{ cookiecutter.device_name }} allocation")


def _wrapper_alias_getattr(name: str) -> Any:
    if name != WRAPPER_NAME:
        raise AttributeError(f"module {WIRE_MODULE_PATH!r} has no attribute {name!r}")
    from .ipc_wrapper import {{ cookiecutter.class_prefix }}IPCWrapper

    return {{ cookiecutter.class_prefix }}IPCWrapper


def register_wire_type() -> None:
    """Register the descriptor with LMCache's IPC codec (idempotent; raises on conflicts)."""
    data_cls = {{ cookiecutter.class_prefix }}IPCData
    if ipc_wire.WRAPPER_TYPES.get(data_cls) == (WIRE_MODULE, WRAPPER_NAME):
        return
    taken = {getattr(t, "__struct_config__").tag for t in ipc_wire.WRAPPER_TYPES}
    if WIRE_TAG in taken:
        raise RuntimeError(f"IPC wire tag {WIRE_TAG!r} is already registered by another plugin")
    existing = sys.modules.get(WIRE_MODULE_PATH)
    if existing is not None and getattr(existing, "__getattr__", None) is not _wrapper_alias_getattr:
        raise RuntimeError(f"{WIRE_MODULE_PATH} already exists and is not this plugin's alias")
    union = ipc_wire.WireIPCData | data_cls
    msgspec.msgpack.Decoder(union)  # raises on a tag clash before anything is changed
    ipc_wire.WireIPCData = union  # type: ignore[misc]
    wrapper_module = sys.modules.get("lmcache.v1.platform.base.ipc_wrapper")
    if wrapper_module is not None:  # already imported: it reads the union from its own globals
        wrapper_module.WireIPCData = union  # type: ignore[attr-defined]
    ipc_wire.WRAPPER_TYPES[data_cls] = (WIRE_MODULE, WRAPPER_NAME)
    alias = types.ModuleType(WIRE_MODULE_PATH, "Alias of {{ cookiecutter.import_package }}.ipc_wrapper for LMCache's wire allowlist.")
    alias.__getattr__ = _wrapper_alias_getattr  # type: ignore[method-assign]
    sys.modules[WIRE_MODULE_PATH] = alias


register_wire_type()
{%- endif %}
