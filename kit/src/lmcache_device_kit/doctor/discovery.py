# SPDX-License-Identifier: Apache-2.0
"""The doctor's discovery checks: the plugin's entry point, and LMCache's registry.

Why a module of its own: these checks are about how LMCache finds the plugin (the
installed wheel's metadata, then what discovery registered), apart from the checks
of LMCache, torch and the ops in ``checks``. The plugin's entry point is any in
LMCache's group that points into its package (``backend.current().package``). It
imports only the standard library, the kit's ``backend``, ``plugin`` and
``report``; never LMCache (the registry comes in as ``compat``, after ``import
lmcache``) and never ``cli`` or ``live``, which import it.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import io
import re

# Local
from ..backend import current
from .plugin import GROUP, distribution, plugin_entry_points
from .report import Report


def in_package(value: str, package: str) -> bool:
    """Whether an entry point's value (``module:attribute``) lies in ``package``."""
    module = value.partition(":")[0].strip()
    return module == package or module.startswith(f"{package}.")


def check_entry_point(report: Report) -> bool:
    backend = current()
    package, name = backend.package, backend.backend_name
    group = plugin_entry_points()
    ours = [ep for ep in group if in_package(ep.value, package)]
    same_name = [ep for ep in group if ep.name == name and ep not in ours]
    wheel = distribution(package)
    if not ours:
        return report.add(
            "entry point",
            False,
            f"no {GROUP!r} entry point points into {package}",
            f"install the wheel (pip install {wheel}): the entry point "
            "comes from its metadata, not from the source tree on PYTHONPATH",
        )
    if len(ours) > 1:
        values = ", ".join(sorted(f"{ep.name} = {ep.value}" for ep in ours))
        return report.add(
            "entry point",
            False,
            f"{len(ours)} installed entry points point into {package}: {values}",
            f"uninstall stale copies (pip uninstall {wheel}; "
            "look for old .dist-info directories)",
        )
    (entry_point,) = ours
    if entry_point.name != name:
        return report.add(
            "entry point",
            False,
            f"named {entry_point.name!r}, but the spec's backend_name is "
            f"{name!r} (LMCache refuses it)",
            f"name it {name!r} under [project.entry-points.{GROUP!r}] in "
            "pyproject.toml, reinstall",
        )
    if same_name:
        others = ", ".join(f"{ep.value} ({_dist(ep)})" for ep in same_name)
        return report.add(
            "entry point",
            False,
            f"backend name {name!r} is also claimed by {others}; "
            "LMCache keeps only one",
            "uninstall the other plugin, or give this backend another backend_name",
        )
    return report.add(
        "entry point", True, f"{GROUP}: {entry_point.name} = {entry_point.value}"
    )


def check_registered(report: Report, log: io.StringIO, compat: Any) -> Any:
    """The plugin's spec as LMCache registered it, or None."""
    backend = current()
    name = backend.backend_name
    spec = compat.device_registry.get(name)
    if spec is not None and in_package(type(spec).__module__, backend.package):
        report.add(
            "registered",
            True,
            f"LMCache registered backend {name!r} ({type(spec).__name__})",
        )
        return spec
    failure = re.search(
        rf"Failed to load LMCache device plugin '{re.escape(name)}'[^\n]*",
        log.getvalue(),
    )
    if failure:
        report.add(
            "registered",
            False,
            failure.group(0).strip(),
            "fix the error above; device.py and _lmcache_compat may import nothing "
            "from LMCache at top level but DeviceSpec and ipc_wire",
        )
    elif spec is not None:
        report.add(
            "registered",
            False,
            f"backend {name!r} is "
            f"{type(spec).__module__}.{type(spec).__name__}, not this plugin",
            "choose another backend_name: this one is taken",
        )
    else:
        report.add(
            "registered",
            False,
            f"LMCache has no backend {name!r}",
            "see the entry point check",
        )
    return None


def _dist(entry_point: metadata.EntryPoint) -> str:
    return entry_point.dist.name if entry_point.dist else "?"
