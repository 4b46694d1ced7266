# SPDX-License-Identifier: Apache-2.0
"""Which plugin the doctor examines: its import package, from its backend name.

Why a module of its own: one command examines any plugin made from the template
(``lmcache-device-doctor [--backend NAME]``), and each plugin's own command
(``lmcache-foo-doctor``) names its package. Either way the doctor ends at a package
whose ``names.py`` the kit reads (``lmcache_device_kit.backend``): everything else
it needs, it derives from there. This finds that package from the entry points
plugins declare in LMCache's ``lmcache.device_plugins`` group, and the distribution
that installed it (for the doctor's advice). It reads installed metadata and
``names.py`` files only: it imports neither LMCache nor any plugin.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from importlib import metadata

# Local
from ..backend import Backend, BackendNotConfigured, distributions_of

#: The entry-point group LMCache loads device plugins from (its built-in backends
#: have no entry point: LMCache finds them in its own tree).
GROUP = "lmcache.device_plugins"


class NoPlugin(RuntimeError):
    """No plugin to examine, or several: the message says what to pass."""


def plugin_entry_points() -> list[metadata.EntryPoint]:
    """The installed plugins' entry points (none from lmcache's own distribution)."""
    return [
        entry_point
        for entry_point in metadata.entry_points(group=GROUP)
        if not (entry_point.dist and entry_point.dist.name == "lmcache")
    ]


def package_of(entry_point: metadata.EntryPoint) -> str | None:
    """The package with a ``names.py`` that holds the entry point's module (the module
    itself, or the nearest parent); None for a plugin not made from the template."""
    parts = entry_point.module.split(".")
    for end in range(len(parts), 0, -1):
        package = ".".join(parts[:end])
        try:
            Backend.of(package)
        except BackendNotConfigured:
            continue
        return package
    return None


def select(
    name: str | None, entry_points: Sequence[metadata.EntryPoint] | None = None
) -> str:
    """The package of the plugin backend ``name``; without a name, of the only
    installed one. Raises NoPlugin, naming the installed backends, when that is not
    exactly one package."""
    entry_points = plugin_entry_points() if entry_points is None else entry_points
    installed = sorted({entry_point.name for entry_point in entry_points})
    listed = ", ".join(installed) or "none"
    if name is None and not installed:
        raise NoPlugin(
            f"no LMCache device plugin is installed (no {GROUP!r} entry point): "
            "install the plugin's wheel, then run the doctor again"
        )
    if name is None and len(installed) > 1:
        raise NoPlugin(
            f"{len(installed)} LMCache device plugins are installed ({listed}): "
            "name one, lmcache-device-doctor --backend NAME"
        )
    name = installed[0] if name is None else name
    candidates = [ep for ep in entry_points if ep.name == name]
    if not candidates:
        raise NoPlugin(
            f"no installed plugin backend is named {name!r} (installed: {listed}): "
            "pass one of them to --backend, or install the plugin's wheel"
        )
    packages = sorted({p for p in map(package_of, candidates) if p is not None})
    if len(packages) != 1:
        values = ", ".join(sorted(ep.value for ep in candidates))
        why = "several packages" if packages else "no package with a names.py"
        raise NoPlugin(
            f"backend {name!r} is declared by {values}: {why} (the doctor checks "
            "plugins made from lmcache-device-template)",
        )
    return packages[0]


def distribution(package: str) -> str:
    """The distribution that installed ``package`` (what ``pip install`` takes), or a
    description of it when no installed distribution holds it (a source tree)."""
    found = distributions_of(package)
    return found[0] if found else f"the wheel that holds {package}"
