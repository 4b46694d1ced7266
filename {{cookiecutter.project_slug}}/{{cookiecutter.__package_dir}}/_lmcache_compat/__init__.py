# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}{% if cookiecutter.ownership == 'in_tree' -%}
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
names from this package, so supporting a new release means editing it and
re-running the tests, nowhere else.

Supported: ``{{ cookiecutter.__lmcache_requirement }}`` (tested: lmcache {{ cookiecutter._lmcache_tested | join(", ") }}; the
``pyproject.toml`` requirement is the same range). Differences are chosen by
feature detection, never by comparing version numbers:
{%- endif %}

* where names live (``surface.NAMES`` lists each location, newest first);
* the spelling of the LMCache-driven capability (``PortableDeviceSpec``);
* what worker-side ``auto`` means (``auto_transfer_mode``);
* how IPC wrappers travel: pickled as they are up to 0.5.5, through a closed
  msgspec allowlist from 0.5.6 on
  (``HAS_WIRE_ALLOWLIST``{{ "; ``wire.py`` registers this plugin's type there" if cookiecutter.ownership == "wheel" else "" }}){{ ";" if cookiecutter.lmcache_driven != "no" else "." }}
{%- if cookiecutter.lmcache_driven != 'no' %}
* the KV layouts LMCache's baseline understands (``kv_layout.py``).
{%- endif %}

How the tests' harness (workers, scheduler, servers
{%- if cookiecutter.ownership == 'wheel' %}, ``doctor --server``{% endif %}) calls
LMCache is the kit's (``lmcache_device_kit.harness``), declared there.
{%- if cookiecutter.ownership == 'wheel' %}

Importing it changes nothing: the release check (``check_lmcache_version``)
and the wire registration are explicit calls the spec module makes when LMCache
loads it.
{%- endif %}
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

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import TYPE_CHECKING, Any
import importlib
import importlib.util
{%- if cookiecutter.ownership == 'wheel' %}
import logging
import os
{%- endif %}

# First Party
# The one eager import: the base class LMCache's loader checks against.
from lmcache.v1.platform.base.device_spec import DeviceSpec

# Local
{%- if cookiecutter.ownership == 'wheel' %}
from ..names import ALLOW_UNTESTED_ENV_VAR
{%- endif %}
from .surface import NAMES, Location

if TYPE_CHECKING:
    # First Party
    from lmcache.lmcache_native import EngineKVFormat, TransferDirection
    from lmcache.logging import init_logger
{%- if cookiecutter.lmcache_driven != 'no' %}
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector.kv_format.specs.registry import (
        get_spec_class as kv_format_spec,
    )
    from lmcache.v1.gpu_connector.utils import (
        get_group_data_ptrs,
        normalize_and_discover_per_layer_formats,
    )
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
    from lmcache.v1.platform.torch_ops.mp_mem_kernels import (
        _infer_kv_dtype as infer_kv_dtype,
    )
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
    "normalize_and_discover_per_layer_formats",
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
    "lazy",
    "torch_ops",
]
{%- if cookiecutter.ownership == 'wheel' %}

#: The requirement ``pyproject.toml`` declares; keep the two identical.
SUPPORTED_LMCACHE = "{{ cookiecutter.__lmcache_requirement }}"
#: Releases the conformance suite has passed on (oldest first).
TESTED_LMCACHE_VERSIONS = ({% for v in cookiecutter._lmcache_tested %}{{ v | tojson }}{{ ", " if not loop.last else ("," if loop.length == 1 else "") }}{% endfor %})
{%- endif %}

# ---- feature detection (no version numbers) --------------------------------
#: 0.5.6+: IPC wrappers travel as msgspec descriptors from a closed allowlist
#: (lmcache/v1/platform/base/ipc_wire.py). Older releases pickle the wrapper.
HAS_WIRE_ALLOWLIST = (
    importlib.util.find_spec("lmcache.v1.platform.base.ipc_wire") is not None
)
#: 0.5.6+: the spec decides what worker-side ``auto`` means (its
#: ``default_mp_transfer_mode``); before, LMCache-driven for CUDA only.
AUTO_FOLLOWS_SPEC = hasattr(DeviceSpec, "default_mp_transfer_mode")


def _resolve(candidates: tuple[Location, ...]) -> Any:
    """The value at the first of ``candidates`` that exists (``None``: the module)."""
    for module_name, attribute, _, _ in candidates:
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ModuleNotFoundError:  # a parent is a plain module, not a package
            found = False
        if not found:
            continue
        module = importlib.import_module(module_name)
        if attribute is None:
            return module
        if hasattr(module, attribute):
            return getattr(module, attribute)
    tried = ", ".join(f"{m}:{a}" if a else m for m, a, _, _ in candidates)
    raise ImportError(
        f"None of {tried} exists in lmcache {installed_lmcache_version()}; "
{%- if cookiecutter.ownership == 'wheel' %}
        "port _lmcache_compat/ to this release "
        "(see README.md, 'Supporting a new LMCache release')."
{%- else %}
        "update _lmcache_compat/ to where LMCache now keeps it."
{%- endif %}
    )


def __getattr__(name: str) -> Any:
    """Resolve LMCache names on first use, after ``import lmcache`` has finished."""
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _resolve(NAMES[name])
    globals()[name] = value
    return value


def lazy(name: str) -> Any:
    """A lazy name, resolved now (for this package; ``__getattr__`` serves others)."""
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


def auto_transfer_mode(spec: DeviceSpec) -> str:
    """What worker-side ``auto`` resolves to for ``spec`` on the installed LMCache.

    ``"lmcache_driven"`` or ``"engine_driven"``: from 0.5.6 on the spec's
    ``default_mp_transfer_mode()``; before, LMCache-driven only for CUDA.
    """
    if AUTO_FOLLOWS_SPEC:
        return str(spec.default_mp_transfer_mode().value)
    return "lmcache_driven" if spec.device_type == "cuda" else "engine_driven"


def installed_lmcache_version() -> str:
    """The installed LMCache release without local suffix, e.g. ``0.5.6``."""
    return metadata.version("lmcache").split("+", 1)[0]
{%- if cookiecutter.ownership == 'wheel' %}


def check_lmcache_version() -> None:
    """Refuse to load on an LMCache release this plugin was not tested with.

    Failure policy: loud. Raising here makes LMCache log "Failed to load LMCache
    device plugin ... <this message>" and skip the plugin, instead of running
    code written against another interface and failing later mid-transfer.
    ``ALLOW_UNTESTED_ENV_VAR=1`` loads it anyway, with a warning: for the canary
    (``nox -s canary``) and ``doctor --api``, never for serving.
    """
    version = installed_lmcache_version()
    if version in TESTED_LMCACHE_VERSIONS:
        return
    if os.environ.get(ALLOW_UNTESTED_ENV_VAR) == "1":
        logging.getLogger(__name__).warning(
            "lmcache %s is untested with this plugin; loading it because %s=1",
            version,
            ALLOW_UNTESTED_ENV_VAR,
        )
        return
    raise RuntimeError(
        f"{{ cookiecutter.project_slug }} supports {SUPPORTED_LMCACHE} "
        f"(tested: {', '.join(TESTED_LMCACHE_VERSIONS)}), but lmcache {version} "
        "is installed. Install a supported release "
        f"(pip install '{SUPPORTED_LMCACHE}'), or port _lmcache_compat/ to the new "
        "release: doctor --api names what moved, nox -s canary runs the tests on it."
    )
{%- endif %}
