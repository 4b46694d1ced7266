# SPDX-License-Identifier: Apache-2.0
"""LMCache's names, found where the installed release keeps them.

Why a module of its own: the package's ``__getattr__``, the KV layouts, the wire
registration and the ops' helpers all resolve LMCache's names through ``lazy``, and
a plugin's binding module the rest through ``lookup``; kept apart from ``__init__``
(which imports LMCache first), they import it without an import circle. The test
harness resolves its own table (``harness/surface.py``) with the same ``resolve``,
imported when it first wants a name (after ``import lmcache``, as here).

Must not import anything from LMCache at top level: LMCache imports the shims while
it builds its device registry, inside ``import lmcache``, and a name resolved then
would be a circular import. Names resolve on first use, after that import finished.
Imports ``surface`` (data) only.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import importlib
import importlib.util

# Local
from .surface import NAMES, Location

#: 0.5.6+: IPC wrappers travel as msgspec descriptors from a closed allowlist
#: (lmcache/v1/platform/base/ipc_wire.py). Older releases pickle the wrapper.
HAS_WIRE_ALLOWLIST = (
    importlib.util.find_spec("lmcache.v1.platform.base.ipc_wire") is not None
)

_resolved: dict[str, Any] = {}


def installed_lmcache_version() -> str:
    """The installed LMCache release without local suffix, e.g. ``0.5.6``."""
    return metadata.version("lmcache").split("+", 1)[0]


def resolve(
    candidates: tuple[Location, ...],
    declared_in: str = f"NAMES in {__package__}.surface",
) -> Any:
    """The value at the first of ``candidates`` that exists (``None``: the module);
    if none does, an error that says to add its new location to ``declared_in``."""
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
        f"None of {tried} exists in lmcache {installed_lmcache_version()}: add "
        f"where this release keeps it to {declared_in} (doctor --api names it)."
    )


def lookup(name: str) -> Any:
    """A name of the shims' package (``PortableDeviceSpec``, ``host_pieces``, ...) or
    LMCache's (``lazy``): what a plugin's binding module does not define itself. The
    package is looked up when asked (after ``import lmcache``), not imported here:
    it imports this module."""
    return getattr(importlib.import_module(__name__.rpartition(".")[0]), name)


def lazy(name: str) -> Any:
    """LMCache's ``name`` (a key of ``surface.NAMES``), resolved on first use."""
    if name not in _resolved:
        if name not in NAMES:
            raise AttributeError(f"{__package__} declares no LMCache name {name!r}")
        _resolved[name] = resolve(NAMES[name])
    return _resolved[name]
