# SPDX-License-Identifier: Apache-2.0
"""The porting ladder's proofs that read the plugin's build and project, not its
device: the native module against the torch and torch extension the wheel pins,
and the device numbers the cost projection uses.

Why apart from ``probes``: those drive the device; these read metadata and files
(the wheel's requirements, the project's ``pyproject.toml``).

Imports the standard library and the kit's projection; the kit's shims (which
import LMCache) and the plugin only inside the proofs.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from typing import Any
import importlib
import importlib.metadata

# Local
from ..backend import current
from ..projection import Device, DeviceDescriptionError, load
from .paths import plugin_module
from .probes import Outcome


def native_build(spec: Any) -> Outcome:
    """The native module loads with the torch and the torch extension installed, the
    releases the wheel pins (the ABI it was built for); an extension installed as a
    distribution the wheel does not pin is not ported yet."""
    # Local (the shims' package imports LMCache: not before the doctor has set up)
    # Local
    from ..compat.release import TORCH_PIN, canonical

    compat, package = plugin_module("_lmcache_compat"), current().package
    problem = compat.native_ops_torch_problem(
        importlib.import_module("torch").__version__
    )
    if problem:
        return Outcome(False, problem, "install what the wheel pins, or rebuild it")
    try:
        importlib.import_module(f"{package}._kernels")
    except ImportError as exc:
        return Outcome(False, f"the native module did not load: {exc}", "rebuild it")
    extension = plugin_module("names").TORCH_EXTENSION_MODULE
    owners = importlib.metadata.packages_distributions().get(extension, [])
    requires = importlib.metadata.requires(compat.PROJECT) or []
    exact = {
        canonical(r.split("==")[0]) for r in requires if "==" in r and ";" not in r
    }
    pinned = [d for d in owners if canonical(d) in exact]
    if owners and not pinned:
        return Outcome(
            None,
            f"the wheel does not pin {owners[0]}, whose libraries your kernels link",
            "pin it in pyproject.toml's dependencies and [build-system] requires",
        )
    torch = [m.group(1) for r in requires if (m := TORCH_PIN.fullmatch(r.strip()))]
    said = f"built for torch {torch[0] if torch else '?'}" + "".join(
        f", {d} {importlib.metadata.version(d)}" for d in pinned
    )
    return Outcome(True, f"{said}: the installed releases")


def device_numbers(spec: Any) -> Outcome:
    """The device the cost projection sees: the project's pyproject.toml (the doctor
    run from the project's directory) describes it; the kit's default otherwise."""
    pyproject = Path("pyproject.toml")
    project = getattr(plugin_module("_lmcache_compat"), "PROJECT", None)
    if not pyproject.is_file() or f'name = "{project}"' not in pyproject.read_text():
        return Outcome(None, "run from your project's directory to read its numbers")
    try:
        device = load(pyproject)
    except DeviceDescriptionError as exc:
        return Outcome(False, str(exc), "fix the table (README.md)")
    if device == Device():
        return Outcome(None, f"the kit's default device ({device.name})")
    return Outcome(True, f"{device.name}: the projection uses its numbers")
