# SPDX-License-Identifier: Apache-2.0
"""A plugin wheel's release checks: it loads only on the LMCache releases it was
tested with, and its native ops only with the torch (and the vendor's torch
extension) they were built against.

Why a module of its own: only a wheel needs it (an in-tree backend ships with its
LMCache, and its copy of the shims leaves this out); the plugin's binding module
calls it with the plugin's own facts, from the spec module, when LMCache loads the
plugin.

Must not import LMCache at top level (it runs inside ``import lmcache``).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
import importlib.metadata
import logging
import os
import re

# Local
from .resolve import installed_lmcache_version


def check_release(
    project: str, tested: Sequence[str], supported: str, allow_env_var: str
) -> None:
    """Refuse to load ``project`` on an LMCache release it was not ``tested`` with.

    Failure policy: loud. Raising here (the plugin's spec module calls it when
    LMCache loads the plugin) makes LMCache log "Failed to load LMCache device
    plugin ... <this message>" and skip the plugin, instead of running code written
    against another interface and failing later mid-transfer. ``allow_env_var=1``
    loads it anyway, with a warning: for the canary (``nox -s canary``) and
    ``doctor --api``, never for serving.
    """
    version = installed_lmcache_version()
    if version in tested:
        return
    if os.environ.get(allow_env_var) == "1":
        logging.getLogger(__name__).warning(
            "lmcache %s is untested with %s; loading it because %s=1",
            version,
            project,
            allow_env_var,
        )
        return
    raise RuntimeError(
        f"{project} supports {supported} (tested: {', '.join(tested)}), but lmcache "
        f"{version} is installed. Install a supported release (pip install "
        f"'{supported}'), or try the new release: doctor --api names what moved in "
        "LMCache, nox -s canary runs the tests on it (README.md, 'Supporting a new "
        "LMCache release')."
    )


#: A wheel's pin of the torch its native module is built for, as METADATA spells it.
TORCH_PIN = re.compile(r"torch\s*==\s*([\w.]+)")


def torch_pin(project: str) -> str | None:
    """The torch version the installed ``project`` pins in its requirements
    (``torch==X``: a wheel with native ops), None if it pins none or is not
    installed as a distribution (a source checkout)."""
    try:
        requires = importlib.metadata.requires(project) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    pins = [m.group(1) for r in requires if (m := TORCH_PIN.fullmatch(r.strip()))]
    return pins[0] if pins else None


def native_torch_problem(project: str, installed_torch: str) -> str:
    """Why ``project``'s native ops must not load with torch ``installed_torch``
    (``torch.__version__``), or "" when they may: its wheel pins the torch its module
    was compiled against, whose C++ ABI another torch does not keep (the module
    would fail to load, or crash). Failure policy: the caller keeps LMCache's
    baseline ops and reports this message, which says which torch to install."""
    pinned = torch_pin(project)
    running = installed_torch.split("+")[0]  # a local build tag (+cpu) keeps the ABI
    if pinned is None or running == pinned:
        return ""
    return (
        f"{project}'s native ops are built against torch {pinned}, but torch "
        f"{installed_torch} is installed. Install the torch this wheel requires "
        f"(pip install 'torch=={pinned}'), or a build of {project} for torch "
        f"{running} (README.md, 'Releasing')."
    )


def canonical(name: str) -> str:
    """A distribution's name as requirements compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def native_extension_problem(project: str, module: str) -> str:
    """Why ``project``'s native ops must not load beside the installed torch
    extension ``module`` (``torch_npu``), or "" when they may: a wheel whose native
    ops link the extension's C++ libraries pins its distribution exactly
    (``torch-npu==X``, pyproject.toml), and another release of it keeps no ABI.
    Nothing to check for a wheel that pins no distribution of ``module``."""
    try:
        requires = importlib.metadata.requires(project) or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    pins = {}
    for line in requires:
        found = re.fullmatch(r"([\w.-]+)\s*==\s*([\w.]+)", line.strip())
        if found:
            pins[canonical(found.group(1))] = found.group(2)
    owners = (
        importlib.metadata.packages_distributions().get(module, []) if module else []
    )
    for distribution in owners:
        pinned = pins.get(canonical(distribution))
        if pinned is None:
            continue
        installed = importlib.metadata.version(distribution)
        if installed.split("+")[0] != pinned:
            return (
                f"{project}'s native ops are built against {distribution} {pinned}, "
                f"but {distribution} {installed} is installed. Install the release "
                f"this wheel requires (pip install '{distribution}=={pinned}'), or a "
                f"build of {project} for {distribution} {installed} (README.md, "
                "'Releasing')."
            )
    return ""
