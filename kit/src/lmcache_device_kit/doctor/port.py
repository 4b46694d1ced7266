# SPDX-License-Identifier: Apache-2.0
"""``doctor --port``: the porting ladder (``ladder.STEPS``) with each step's state
on the installed plugin.

A step is ✓ when its proof passes on this device (``probes``, or the checklist's
own check for the device, pinning and the transfer modes), ✗ with the fix when it
fails, and "not ported yet" when it cannot pass while the plugin still holds the
sample's code there. The sample is told from the plugin's own code, never from the
template's answers: the sample's code at a step's sites calls ``torch.<device>``
functions only the CPU emulator has (``Step.sample``); while the installed source
of such a site still names that call, the step holds the sample (``holds_sample``).
The proof decides first, so a sample the runtime can run (the emulator) reads ✓,
and a ported step that fails reads ✗; only a failing step that still holds the
sample, or whose proof answers with the sample's undecided value (no pinning
declared, no launcher, no kernels), reads "not ported yet". The exit status is 0
only when every step applies and is ✓.

Reads the plugin's sources by path (``ast``), without importing them; imports
LMCache and the plugin only through the checklist and the probes, after
``import lmcache`` (``cli.run_checks``).
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import ast
import importlib.util
import re
import sys

# Local
from ..backend import current
from . import probes, project_probes
from .ladder import STEPS, Step
from .probes import Outcome
from .report import Report

#: The proofs ``probes`` makes; the other steps' proofs are the checklist's.
PROOFS = {
    "thread context": probes.thread_context,
    "stream handle": probes.stream_handle,
    "stream sync": probes.stream_sync,
    "ipc memory": probes.ipc_memory,
    "interprocess events": probes.events,
    "tensor from ptr": probes.zero_copy,
    "native build": project_probes.native_build,
    "native ops": probes.native_ops,
    "native copy": probes.native_copy,
    "host access": probes.host_access,
    "device numbers": project_probes.device_numbers,
}


#: The proofs that need no device: they read the project, not the runtime.
DEVICE_FREE = {"device numbers"}


def site_file(site: str) -> str:
    """The file of a ladder site, relative to the package (``tests/...``: the
    render's)."""
    return site.partition(":")[0]


def site_name(site: str, prefix: str = "") -> str:
    """The name within the file of a site ('' for the module or file itself)."""
    return site.partition(":")[2].replace("{prefix}", prefix)


def package_file(relative: str) -> str | None:
    """The installed source of the plugin's file ``relative`` (None: not there)."""
    spec = importlib.util.find_spec(current().package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(f"{location}/{relative}", encoding="utf-8") as file:
                return file.read()
        except OSError:
            continue
    return None


def class_prefix() -> str:
    """The plugin's class prefix, from its binding module's ``CLASS_PREFIX``."""
    source = package_file("_lmcache_compat.py") or ""
    found = re.search(r'^CLASS_PREFIX = "(\w*)"', source, re.MULTILINE)
    return found.group(1) if found else ""


def site_source(site: str) -> str | None:
    """The installed source of a Python site (a function, class, property or
    constant), None where the plugin has no such site."""
    source = package_file(site_file(site)) if site_file(site).endswith(".py") else None
    if source is None:
        return None
    nodes: list[ast.stmt] = ast.parse(source).body
    found: ast.stmt | None = None
    for part in site_name(site, class_prefix()).split("."):
        found = next((n for n in nodes if part in _names(n)), None)
        if found is None:
            return None
        nodes = getattr(found, "body", [])
    return ast.get_source_segment(source, found) if found else source


def _names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def holds_sample(step: Step) -> list[str]:
    """Where the installed plugin still makes the sample's emulator-only calls of
    ``step``: ``"runtime.py:after_stream_work calls torch.foo.X"`` each."""
    module = current().torch_module_name
    return [
        f"{site_name(site, class_prefix()) or site} calls torch.{module}.{call}"
        for site, call in step.sample
        if re.search(rf"\b{call}\b", site_source(site) or "")
    ]


def applies(step: Step) -> bool:
    return not step.needs or probes.has_module(step.needs)


def prove(step: Step, spec: Any, report: Report) -> Outcome | None:
    """The step's proof on this device; None when it could not run (an earlier
    check failed: the device is not there, the plugin not registered)."""
    if step.check in PROOFS or step.check == "host functions":
        if spec is None and step.check not in DEVICE_FREE:
            return None
        try:
            if step.check == "host functions":
                return probes.host_functions(spec, bool(holds_sample(step)))
            return PROOFS[step.check](spec)
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            return Outcome(False, f"{type(exc).__name__}: {exc}", step.call)
    check = next((c for c in report.checks if c.name == step.check), None)
    if check is None:
        failed = next((c for c in report.checks if not c.ok), None)
        if failed is None:
            return None
        return Outcome(False, f"{failed.name}: {failed.detail}", failed.fix)
    return Outcome(None if check.pending else check.ok, check.detail, check.fix)


def climb(spec: Any, checks: Report) -> Report:
    """Each step that applies to this plugin, in ladder order, with its state."""
    ladder = Report()
    module = f"torch.{current().torch_module_name}"
    for number, step in enumerate((s for s in STEPS if applies(s)), 1):
        name = f"{number:>2}. {step.title}"
        call = step.call.replace("{torch}", module)
        outcome = prove(step, spec, checks)
        sample = holds_sample(step)
        if outcome is not None and outcome.ok:
            ladder.add(name, True, _on_emulator(step) + outcome.detail)
        elif outcome is not None and outcome.ok is None:
            ladder.pending(name, outcome.detail, f"{call}; proven by {step.tests}")
        elif sample:
            why = "; ".join(sample) + ", which only the CPU emulator has"
            ladder.pending(name, why, f"{call}; proven by {step.tests}")
        elif outcome is None:
            fix = _first_fix(checks)
            ladder.add(name, False, "not proven: an earlier check failed", fix)
        else:
            ladder.add(name, False, outcome.detail, outcome.fix or call)
    return ladder


def _on_emulator(step: Step) -> str:
    """Says so on the first step when the device is the CPU emulator: it proves the
    sample's calls, which are its own, not a device's."""
    torch = sys.modules.get("torch")
    runtime = getattr(torch, current().torch_module_name, None)
    if step is not STEPS[0] or not getattr(runtime, "is_emulator", False):
        return ""
    return "on the CPU emulator (tests only: it proves the sample, not your device): "


def _first_fix(checks: Report) -> str:
    failed = [c for c in checks.checks if not c.ok]
    return f"{failed[0].name}: {failed[0].fix}" if failed else "rerun with --verbose"
