# SPDX-License-Identifier: Apache-2.0
"""LMCache's plugin interface as each supported release has it: the run-time shims
every device plugin made from the template shares.

Why it exists: LMCache's plugin interface still moves between releases (module
paths, the LMCache-driven capability's name, what worker-side ``auto`` means, the
IPC wire, KV layouts). The shims that follow it are written once, here; a plugin
imports LMCache's names through its binding module (``<package>/_lmcache_compat.py``),
which adds its own facts (its names, the releases it was tested with). A plugin's
wheel requires the kit in a compatible range, so a shim for a new release reaches
every plugin as a kit release. Differences are chosen by feature detection, never
by comparing version numbers:

* where names live (``surface.NAMES``, each location newest first; ``lazy``);
* the LMCache-driven capability's two spellings (``PortableDeviceSpec``);
* what worker-side ``auto`` means (``auto_transfer_mode``);
* how IPC wrappers travel (``HAS_WIRE_ALLOWLIST``; ``wire`` registers a plugin's
  type on releases with the allowlist);
* the KV layouts LMCache's baseline understands (``kv_layout``) and the ops'
  device-independent helpers with a plugin's slow-path report (``ops_support``);
* a wheel's release check (``release``).

An in-tree backend carries a copy of the run-time modules (LMCache's tree cannot
depend on the kit; the template copies them), so these modules import one another
only relatively and nothing else of the kit. ``declared`` (what ``doctor --api``
checks), ``release`` and ``wire`` (what only a wheel does at load) are not copied.

Why it imports ``lmcache`` first, before anything of its own: ``import lmcache``
builds LMCache's device registry and loads every plugin, whose binding module
imports these shims. A process whose first import is this package would start that
from inside one of its modules, half-imported, and lose the plugin; importing LMCache
first (a no-op when LMCache is loading the plugin) finds none half-imported. A
binding therefore takes what its spec module needs at load from the modules
(``spec``, ``ops_support``, ``release``, ``wire``), never from this package, which
may still be at that first line.

Must not import, at top level, anything from LMCache but ``DeviceSpec`` (``spec``):
LMCache imports the shims while it is still building its device registry inside
``import lmcache``; any other LMCache import then is a circular import, and LMCache
drops the plugin with only a warning. LMCache's other names resolve on first use,
through the module ``__getattr__``. Nor torch. Importing it changes nothing.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

try:
    # First Party
    import lmcache  # noqa: F401
except Exception:  # noqa: BLE001, S110
    # Raised again, with its cause, by the importer's own ``import lmcache``.
    pass

# Local
from .ops_support import (
    OpsSupport,
    as_baseline_bytes,
    check_one_layer_layout,
    contiguous_strides,
    host_pieces,
)
from .resolve import HAS_WIRE_ALLOWLIST, installed_lmcache_version, lazy
from .spec import (
    AUTO_FOLLOWS_SPEC,
    DeviceSpec,
    PortableDeviceSpec,
    auto_transfer_mode,
)
from .surface import NAMES

__all__ = [
    "AUTO_FOLLOWS_SPEC",
    "HAS_WIRE_ALLOWLIST",
    "DeviceSpec",
    "OpsSupport",
    "PortableDeviceSpec",
    "as_baseline_bytes",
    "auto_transfer_mode",
    "check_one_layer_layout",
    "contiguous_strides",
    "host_pieces",
    "installed_lmcache_version",
    "lazy",
]


def __getattr__(name: str) -> Any:
    """LMCache's names (``surface.NAMES``), resolved on first use, after ``import
    lmcache`` has finished."""
    if name not in NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lazy(name)
