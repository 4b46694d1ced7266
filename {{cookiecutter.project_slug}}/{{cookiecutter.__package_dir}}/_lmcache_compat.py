# SPDX-License-Identifier: {{ cookiecutter.license }}
{% if cookiecutter.ownership == 'in_tree' -%}
"""Every LMCache name this backend uses, in one place.

Why it exists: the backend's other modules import LMCache names from here, so an
interface change inside LMCache is one edit in one file. The names resolve on
first use, by feature detection (the same module serves the backend's external
wheel on lmcache {{ cookiecutter._lmcache_tested | join(", ") }}, so it still knows where older releases
keep them):
{%- else -%}
"""Everything this plugin knows about particular LMCache releases, in one place.

Why it exists: LMCache's plugin interface still moves between releases (module
paths, capability names, wire formats). Every other module imports LMCache
names from here, so supporting a new release means editing this file and
re-running the tests, nowhere else.

Supported: ``{{ cookiecutter._lmcache_requirement }}`` (tested: lmcache {{ cookiecutter._lmcache_tested | join(", ") }}; the
``pyproject.toml`` requirement is the same range). Differences are chosen by
feature detection, never by comparing version numbers:
{%- endif %}

* where names live (``_LAZY_NAMES`` lists each location, newest first);
* the spelling of the LMCache-driven capability (``PortableDeviceSpec``);
* what worker-side ``auto`` means (``auto_transfer_mode``);
* how IPC wrappers travel: pickled as they are up to 0.5.5, through a closed
  msgspec allowlist from 0.5.6 on (``HAS_WIRE_ALLOWLIST``; the registration at
  the end of this file runs only there).

{%- if cookiecutter.ownership == 'in_tree' %}

In LMCache's tree the release check and the wire registration an external wheel
needs are not rendered: the IPC wire type is part of ``ipc_wire.py``.
{%- endif %}

Must not import, at top level, anything from LMCache except ``DeviceSpec``
(and, on releases that have it, the msgspec-only ``ipc_wire``): LMCache imports
this module (through ``device.py``) while it is still building its device
registry inside ``import lmcache``. Any other LMCache import here is a circular
import, and LMCache then drops the plugin with only a warning. The other names
are resolved on first use through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

# The one eager import: the base class LMCache's loader checks against.
from lmcache.v1.platform.base.device_spec import DeviceSpec

if TYPE_CHECKING:
{%- if cookiecutter.lmcache_driven != 'no' %}
    from collections.abc import Callable
{% endif %}
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
    "engine_group_layer_indices",
    "get_group_data_ptrs",
    "infer_kv_dtype",
    "kv_format_spec",
    "chunk_object_shape",
    "normalize_and_discover_per_layer_formats",
    "paged_layers_for_baseline",
{%- if cookiecutter.ownership == 'wheel' %}
    "publish_wrapper_class",
{%- endif %}
{%- endif %}
    "HAS_WIRE_ALLOWLIST",
    "DeviceOps",
    "DeviceSpec",
    "EngineKVFormat",
    "MPTransferMode",
    "PageBufferShapeDesc",
    "PortableDeviceSpec",
{%- if cookiecutter.ownership == 'wheel' %}
    "SUPPORTED_LMCACHE",
    "TESTED_LMCACHE_VERSIONS",
{%- endif %}
    "TransferDirection",
    "auto_transfer_mode",
    "init_logger",
    "recorded_event",
    "register_kv_caches",
    "torch_ops",
]
{%- if cookiecutter.ownership == 'wheel' %}

#: The requirement ``pyproject.toml`` declares; keep the two identical.
SUPPORTED_LMCACHE = "{{ cookiecutter._lmcache_requirement }}"
#: Releases the conformance suite has passed on (oldest first).
TESTED_LMCACHE_VERSIONS = ({% for v in cookiecutter._lmcache_tested %}{{ v | tojson }}{{ ", " if not loop.last else ("," if loop.length == 1 else "") }}{% endfor %})
{%- endif %}

# ---- feature detection (no version numbers) --------------------------------
#: 0.5.6+: IPC wrappers travel as msgspec descriptors from a closed allowlist
#: (lmcache/v1/platform/base/ipc_wire.py). Older releases pickle the wrapper.
HAS_WIRE_ALLOWLIST = importlib.util.find_spec("lmcache.v1.platform.base.ipc_wire") is not None
#: 0.5.6+: the spec decides what worker-side ``auto`` means
#: (``default_mp_transfer_mode``). Older releases: ``auto`` is LMCache-driven
#: for CUDA only, engine-driven for every other device.
AUTO_FOLLOWS_SPEC = hasattr(DeviceSpec, "default_mp_transfer_mode")

# Where each name lives, newest release first; the first location that exists
# wins. The guide ("Adding a New Device Backend") names some of these
# differently; the code is the truth:
#   * the torch baseline is a module (torch_ops.py) up to 0.5.5 and a package
#     (torch_ops/) from 0.5.6 on;
#   * MPTransferMode moved from worker_transfer to transfer_mode in 0.5.6;
#   * TransferDirection / EngineKVFormat come from the compiled
#     lmcache.lmcache_native (DeviceOps only annotates them);
#   * built-in backends live in lmcache/v1/platform/<name>/ up to 0.5.5 and in
#     lmcache/v1/platform/devices/<name>/ from 0.5.6 on.
_LAZY_NAMES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "DeviceOps": (("lmcache.v1.platform.base.device_ops", "DeviceOps"),),
    "torch_ops": (("lmcache.v1.platform.torch_ops", None),),
    "TransferDirection": (("lmcache.lmcache_native", "TransferDirection"),),
    "EngineKVFormat": (("lmcache.lmcache_native", "EngineKVFormat"),),
    "PageBufferShapeDesc": (("lmcache.v1.platform.ops_types", "PageBufferShapeDesc"),),
    "MPTransferMode": (
        ("lmcache.v1.multiprocess.transfer_mode", "MPTransferMode"),  # 0.5.6
        ("lmcache.v1.multiprocess.transfer_context.worker_transfer", "MPTransferMode"),  # 0.5.4, 0.5.5
    ),
    "init_logger": (("lmcache.logging", "init_logger"),),
{%- if cookiecutter.lmcache_driven != 'no' %}
    # LMCache-driven transfer (IPC wrapper, cache context, event IPC, pinning):
    "DeviceIPCWrapper": (("lmcache.v1.platform.base.ipc_wrapper", "DeviceIPCWrapper"),),
    "BaseCacheContext": (("lmcache.v1.platform.base.cache_context", "BaseCacheContext"),),
    "DefaultEventIPCBackend": (("lmcache.v1.platform.base.event_ipc", "DefaultEventIPCBackend"),),
    "PinMemoryBackend": (("lmcache.v1.platform.base.pin_memory", "PinMemoryBackend"),),
    "EngineType": (("lmcache.utils", "EngineType"),),
    "KVLayerGroupsManager": (("lmcache.v1.kv_layer_groups", "KVLayerGroupsManager"),),
    "engine_group_layer_indices": (("lmcache.v1.multiprocess.group_view", "engine_group_layer_indices"),),
    "get_group_data_ptrs": (("lmcache.v1.gpu_connector.utils", "get_group_data_ptrs"),),
    "normalize_and_discover_per_layer_formats": (
        ("lmcache.v1.gpu_connector.utils", "normalize_and_discover_per_layer_formats"),
    ),
    "kv_format_spec": (("lmcache.v1.gpu_connector.kv_format.specs.registry", "get_spec_class"),),
    # Private baseline helper: KV dtype from a PageBufferShapeDesc (fp16 vs bf16 safe).
    "infer_kv_dtype": (
        ("lmcache.v1.platform.torch_ops.mp_mem_kernels", "_infer_kv_dtype"),  # 0.5.6
        ("lmcache.v1.platform.torch_ops", "_infer_kv_dtype"),  # 0.5.4, 0.5.5
    ),
    # Private baseline helper, asked for on 0.5.4/0.5.5 only (paged_layers_for_baseline).
    "per_layer_paged_shape": (("lmcache.v1.platform.torch_ops", "_per_layer_paged_shape"),),
{%- endif %}
}


def _resolve(candidates: tuple[tuple[str, str | None], ...], needs: str = "") -> Any:
    """The value at the first location in ``candidates`` that exists.

    A candidate ``(module, None)`` is the module itself; with ``needs``, only a
    module that defines that attribute counts.
    """
    for module_name, attribute in candidates:
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ModuleNotFoundError:  # a parent is a plain module, not a package
            found = False
        if not found:
            continue
        module = importlib.import_module(module_name)
        if attribute is None and (not needs or hasattr(module, needs)):
            return module
        if attribute is not None and hasattr(module, attribute):
            return getattr(module, attribute)
    tried = ", ".join(f"{m}:{a}" if a else m for m, a in candidates)
    raise ImportError(
        f"None of {tried} exists in lmcache {installed_lmcache_version()}; "
{%- if cookiecutter.ownership == 'wheel' %}
        "port _lmcache_compat.py to this release (see README.md, 'Supporting a new LMCache release')."
{%- else %}
        "update _lmcache_compat.py to where LMCache now keeps it."
{%- endif %}
    )


def __getattr__(name: str) -> Any:
    """Resolve LMCache names on first use, after ``import lmcache`` has finished."""
    try:
        candidates = _LAZY_NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = _resolve(candidates)
    globals()[name] = value
    return value


def _lazy(name: str) -> Any:
    """A lazy name from inside this module (module ``__getattr__`` serves only outside access)."""
    return globals()[name] if name in globals() else __getattr__(name)


class PortableDeviceSpec(DeviceSpec):
    """``DeviceSpec`` that answers the LMCache-driven question under both spellings.

    lmcache 0.5.4 and 0.5.5 ask ``is_handle_transfer_available()`` (default:
    True, which would route a device without IPC support into LMCache-driven
    mode); 0.5.6 asks ``is_lmcache_driven_available()`` (default: False).
    Subclasses override ``is_lmcache_driven_available`` only.
    """

    def is_lmcache_driven_available(self) -> bool:
        """Whether the server can map this device's KV caches (LMCache-driven mode)."""
        return False

    def is_handle_transfer_available(self) -> bool:
        """The 0.5.4/0.5.5 spelling of :meth:`is_lmcache_driven_available`."""
        return self.is_lmcache_driven_available()


{% if cookiecutter.lmcache_driven != 'no' -%}
def chunk_object_shape(
    engine_kv_format: EngineKVFormat, shape_desc: PageBufferShapeDesc, chunk_tokens: int
) -> tuple[int, ...]:
    """The shape LMCache gives one chunk object (one kernel group's part) of this KV format.

    MLA: ``(layers, tokens, head_size)``; fused-packed and single-K/V formats:
    ``(layers, tokens, heads * head_size)``; the rest ``(2, layers, tokens,
    heads * head_size)``. ``is_single_kv`` exists from 0.5.6 on (older
    releases have no such format).
    """
    spec = _lazy("kv_format_spec")(engine_kv_format)
    nl, nh, hs = int(shape_desc.nl), int(shape_desc.nh), int(shape_desc.hs)
    if spec.is_mla:
        return (nl, chunk_tokens, hs)
    if spec.is_fused_packed or getattr(spec, "is_single_kv", False):
        return (nl, chunk_tokens, nh * hs)
    return (2, nl, chunk_tokens, nh * hs)


def paged_layers_for_baseline(
    paged_buffer_ptrs: Any,
    engine_kv_format: EngineKVFormat,
    shape_desc: PageBufferShapeDesc,
    device: Any,
    tensor_from_ptr: Callable[..., Any],
) -> Any:
    """The paged-KV argument in a form the installed torch baseline can use.

    From 0.5.6 on the baseline rebuilds device tensors from a pointer table
    through ``DeviceOps.tensor_from_ptr`` (this plugin's), so the table passes
    through unchanged. The 0.5.4/0.5.5 baseline rebuilds them only for cpu, cuda
    and musa, so for per-layer KV formats this rebuilds them with the plugin's
    ``tensor_from_ptr`` instead.
    """
    import torch

    is_pointer_table = isinstance(paged_buffer_ptrs, torch.Tensor) and paged_buffer_ptrs.dtype in (
        torch.int64,
        torch.uint64,
    )
    if not is_pointer_table or hasattr(_lazy("DeviceOps"), "tensor_from_ptr"):
        return paged_buffer_ptrs
    spec = _lazy("kv_format_spec")(engine_kv_format)
    nb, bs, nh, hs = (int(shape_desc.nb), int(shape_desc.bs), int(shape_desc.nh), int(shape_desc.hs))
    stride = int(getattr(shape_desc, "block_stride_elems", 0) or 0)
    if not spec.is_layer_list or getattr(spec, "is_kv_second_tuple", False) or (stride and stride != bs * nh * hs):
        raise NotImplementedError(
            f"LMCache-driven transfer of {engine_kv_format!r} KV caches with padded blocks or "
            f"without one tensor per layer needs lmcache 0.5.6 or later (installed: "
            f"{installed_lmcache_version()}); upgrade LMCache or use engine_driven mode."
        )
    shape = _lazy("per_layer_paged_shape")(engine_kv_format, nb, bs, nh, hs)
    dtype = _lazy("infer_kv_dtype")(None, None, shape_desc)
    return [tensor_from_ptr(int(ptr), shape, dtype, device) for ptr in paged_buffer_ptrs.tolist()]


{% endif -%}
def register_kv_caches(adapter: Any, kv_caches: dict[str, Any], engine_group_infos: Sequence[Any] = ()) -> None:
    """Register a worker's (NHD) KV caches with LMCache's ``LMCacheMPWorkerAdapter``.

    ``engine_group_infos``: LMCache's ``EngineGroupInfo`` per engine group of a
    hybrid model (none: one group). lmcache 0.5.5+ take layout hints; 0.5.4 has
    no such argument and assumes NHD.
    """
    if "layout_hints" in inspect.signature(adapter.register_kv_caches).parameters:
        adapter.register_kv_caches(kv_caches, engine_group_infos, layout_hints={"kv_layout": "NHD"})
    else:
        adapter.register_kv_caches(kv_caches, engine_group_infos)


def recorded_event(adapter: Any, device_type: str) -> Any:
    """The ordering event a vLLM worker hands to a store or retrieve request.

    lmcache 0.5.5+ create it (``create_recorded_event``); with 0.5.4 the vLLM
    connector records an interprocess event on the device's current stream.
    """
    if hasattr(adapter, "create_recorded_event"):
        return adapter.create_recorded_event()
    import torch

    event = getattr(torch, device_type).Event(interprocess=True)
    event.record()
    return event


def auto_transfer_mode(spec: DeviceSpec) -> str:
    """What worker-side ``auto`` resolves to for ``spec`` on the installed LMCache.

    ``"lmcache_driven"`` or ``"engine_driven"``: from 0.5.6 on the spec's
    ``default_mp_transfer_mode()``; before, LMCache-driven only for CUDA.
    """
    if AUTO_FOLLOWS_SPEC:
        return str(spec.default_mp_transfer_mode().value)
    return "lmcache_driven" if spec.device_type == "cuda" else "engine_driven"


def baseline_loaded_cuda_runtime() -> bool:
    """Whether LMCache's pointer-mode ``lmcache_memcpy_async`` baseline has loaded libcudart.

    The baseline loads the CUDA (or HIP) runtime on first pointer-mode use,
    which cannot address non-CUDA device memory; the conformance tests assert
    that this plugin's overrides never get there.
    """
    module = _resolve(
        (
            ("lmcache.v1.platform.torch_ops._tensor_from_ptr", None),  # 0.5.6
            ("lmcache.v1.platform.torch_ops", None),  # 0.5.4, 0.5.5
        ),
        needs="_copy_lib_NOT_LOADED",
    )
    return module._copy_lib is not module._copy_lib_NOT_LOADED


def installed_lmcache_version() -> str:
    """The installed LMCache release without local suffix, e.g. ``0.5.6``."""
    return metadata.version("lmcache").split("+", 1)[0]
{%- if cookiecutter.ownership == 'wheel' %}


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
{%- endif %}
{%- if cookiecutter.lmcache_driven != 'no' and cookiecutter.ownership == 'wheel' %}


# ---------------------------------------------------------------------------
# LMCache-driven transfer: make this plugin's IPC wrapper travel to the server.
#
# lmcache 0.5.4 and 0.5.5 pickle IPC wrappers: the wrapper class travels as it
# is and nothing needs registering (``publish_wrapper_class`` leaves it alone).
#
# lmcache 0.5.6 encodes IPC wrappers through a closed allowlist in
# lmcache/v1/platform/base/ipc_wire.py (the tagged union ``WireIPCData`` and the
# dict ``WRAPPER_TYPES``), and accepts only wrapper classes whose module is
# ``lmcache.v1.platform.devices.<name>``. A wrapper from an external wheel fails
# with KeyError / ValueError there. So, at plugin load, and only where that
# allowlist exists, this module:
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

WIRE_TAG = "ext_{{ cookiecutter.import_package }}"
WIRE_MODULE = "_ext_{{ cookiecutter.import_package }}"
WIRE_MODULE_PATH = "lmcache.v1.platform.devices." + WIRE_MODULE
WRAPPER_NAME = "{{ cookiecutter.class_prefix }}IPCWrapper"


def publish_wrapper_class(wrapper_cls: type) -> None:
    """Give the wrapper class the module name LMCache's wire accepts (0.5.6+ only)."""
    if HAS_WIRE_ALLOWLIST:
        wrapper_cls.__module__ = WIRE_MODULE_PATH


def _wrapper_alias_getattr(name: str) -> Any:
    if name != WRAPPER_NAME:
        raise AttributeError(f"module {WIRE_MODULE_PATH!r} has no attribute {name!r}")
    from .ipc_wrapper import {{ cookiecutter.class_prefix }}IPCWrapper

    return {{ cookiecutter.class_prefix }}IPCWrapper


if HAS_WIRE_ALLOWLIST:
    import msgspec
    from lmcache.v1.platform.base import ipc_wire  # msgspec and torch only: safe during discovery

    class {{ cookiecutter.class_prefix }}IPCData(ipc_wire.IPCData, tag=WIRE_TAG):  # type: ignore[call-arg]
        """Wire descriptor of a {{ cookiecutter.class_prefix }}IPCWrapper: an opaque runtime memory handle and byte range."""

        handle: bytes
        alloc_offset: ipc_wire.NonNegative
        nbytes: ipc_wire.NonNegative

        def __post_init__(self) -> None:
            if self.alloc_offset + self.metadata.byte_span() > self.nbytes:
                raise ValueError("IPC view exceeds the exported {{ cookiecutter.device_name }} allocation")

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
        alias = types.ModuleType(WIRE_MODULE_PATH, f"Alias of {__package__}.ipc_wrapper for LMCache's wire allowlist.")
        alias.__getattr__ = _wrapper_alias_getattr  # type: ignore[method-assign]
        sys.modules[WIRE_MODULE_PATH] = alias

    register_wire_type()
{%- endif %}
