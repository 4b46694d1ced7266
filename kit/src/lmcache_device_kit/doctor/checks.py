# SPDX-License-Identifier: Apache-2.0
"""The doctor's checks of LMCache, torch and the ops: a report line each, a fix for a ✗.

Why a module of its own: the doctor must ``import lmcache`` before any module of
the plugin (LMCache skips a plugin that was imported before it), so these checks
import LMCache and the plugin's parts inside the functions, in the order
``cli.run_checks`` calls them. Nothing here imports at module level beyond the
standard library, the kit's ``backend`` (the plugin's names, read from its
``names.py``) and ``report``; LMCache's private names come through the plugin's
binding to the shims, ``_lmcache_compat``. The discovery checks (entry point,
registry) are in ``discovery``.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import importlib
import os

# Local
from ..backend import current
from .report import Report

BACKEND_ENV_VAR = "LMCACHE_DEVICE_BACKEND"


def check_import_lmcache(report: Report) -> bool:
    backend = current()
    try:
        importlib.import_module("lmcache")
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        chosen = os.environ.get(BACKEND_ENV_VAR)
        if "Multiple LMCache backends are available" in str(exc):
            fix = (
                f"another plugin claims device type {backend.device_type!r} too: "
                f"export {BACKEND_ENV_VAR}={backend.backend_name}"
            )
        elif chosen:
            fix = (
                f"{BACKEND_ENV_VAR}={chosen!r} is set: unset it, "
                f"or set it to {backend.backend_name!r} once this passes"
            )
        else:
            fix = "read LMCache's log (--verbose) for the cause"
        return report.add("import lmcache", False, f"{type(exc).__name__}: {exc}", fix)
    return report.add("import lmcache", True, f"lmcache {metadata.version('lmcache')}")


def check_lmcache_version(report: Report) -> Any:
    """The plugin's compat module, if it accepts the installed release (as loading the
    plugin checks); else None."""
    compat = importlib.import_module(f"{current().package}._lmcache_compat")
    try:
        compat.check_lmcache_version()
    except RuntimeError as exc:
        report.add(
            "lmcache version",
            False,
            str(exc).split(". ", 1)[0],
            str(exc).split(". ", 1)[-1],
        )
        return None
    installed = compat.installed_lmcache_version()
    report.add(
        "lmcache version",
        True,
        f"{installed} is supported ({compat.SUPPORTED_LMCACHE}; "
        f"tested: {', '.join(compat.TESTED_LMCACHE_VERSIONS)})",
    )
    return compat


def check_torch_device(report: Report) -> bool:
    # Third Party
    import torch

    backend = current()
    name, extension = backend.torch_module_name, backend.torch_extension_module
    autoloaded = getattr(torch, name, None)
    try:
        backend.torch_module()
    except Exception as exc:  # noqa: BLE001
        emulator = backend.emulator_env_var
        return report.add(
            "torch extension",
            False,
            f"import {extension} failed: {type(exc).__name__}: {exc}",
            f"install the PyTorch extension that provides torch.{name} "
            f"(module {extension!r})"
            + (f"; without the device, tests use {emulator}=1" if emulator else ""),
        )
    if getattr(autoloaded, "is_emulator", False):
        report.add(
            "torch extension",
            True,
            "the CPU emulator, loaded by import torch (tests only)",
        )
    elif not extension:
        report.add(
            "torch extension", True, f"none needed: torch has torch.{name} built in"
        )
    elif autoloaded is not None:
        report.add(
            "torch extension",
            True,
            f"torch.{name} registered by import torch (its autoloading)",
        )
    else:
        report.add("torch extension", True, f"{extension} imported")
    module = getattr(torch, name, None)
    if module is None:
        return report.add(
            f"torch.{name}",
            False,
            f"torch has no module {name!r}",
            "the extension must register it "
            f"(torch._register_device_module({name!r}, module))",
        )
    try:
        available, count = bool(module.is_available()), int(module.device_count())
    except Exception as exc:  # noqa: BLE001
        available, count = False, 0
        detail = f"is_available() raised {type(exc).__name__}: {exc}"
    else:
        detail = f"is_available() is {available}, {count} device(s)"
    return report.add(
        f"torch.{name}",
        available and count > 0,
        detail,
        "check the driver, and that the device is visible to this process "
        "(container, *_VISIBLE_DEVICES)",
    )


def check_selection(report: Report, spec: Any, compat: Any) -> bool:
    # First Party
    import lmcache

    backend = current()
    ours, device = backend.backend_name, backend.device_type
    explicit = (os.environ.get(BACKEND_ENV_VAR) or "").strip().lower()
    rivals = sorted(
        name
        for name, other in compat.device_registry.items()
        if other.device_type == device and name != ours and _available(other)
    )
    if rivals and explicit != ours:
        report.add(
            "device type",
            False,
            f"backends {', '.join(rivals)} are also available "
            f"for device type {device!r}",
            f"export {BACKEND_ENV_VAR}={ours}",
        )
    else:
        without = f" without {BACKEND_ENV_VAR}" if rivals else ""
        report.add(
            "device type",
            True,
            f"no other available backend claims {device!r}{without}",
        )
    selected = getattr(lmcache, "torch_device_type", None)
    chosen = compat.detect_device()[2]  # (torch module, device type, backend name)
    if explicit:
        why = f"{BACKEND_ENV_VAR}={explicit}"
    elif os.environ.get("DEVICE_TYPE"):
        why = f"DEVICE_TYPE={os.environ['DEVICE_TYPE']}"
    else:
        order = ", ".join(compat.device_registry)
        why = f"auto-detection (first available in registry order: {order})"
    return report.add(
        "selection",
        selected == device and chosen == ours,
        f"LMCache uses backend {chosen!r}, device type {selected!r}, by {why}",
        f"export {BACKEND_ENV_VAR}={ours} "
        f"(or make torch.{backend.torch_module_name} available, see above)",
    )


def check_ops(report: Report, spec: Any, compat: Any) -> bool:
    """LMCache resolves the spec's ops class, with its native ops bound; a plugin
    with native ops (its ops module's ``NATIVE_ENV_VAR``) that runs the torch
    baseline although not asked to is a slow path."""
    device = current().device_type
    ops = compat.resolve_device_ops(device)
    if not isinstance(ops, spec.ops_cls):
        return report.add(
            "ops",
            False,
            f"LMCache resolved {type(ops).__name__} for {device!r}",
            "see the selection check",
        )
    native = sorted(
        name
        for name, value in vars(ops).items()
        if callable(value) and not name.startswith("_")
    )
    if native:
        return report.add(
            "ops", True, f"{type(ops).__name__}, native: {', '.join(native)}"
        )
    native_env_var = getattr(
        importlib.import_module(type(ops).__module__), "NATIVE_ENV_VAR", ""
    )
    if native_env_var and os.environ.get(native_env_var) != "0":
        return report.add(
            "ops",
            False,
            f"{type(ops).__name__} runs on LMCache's torch baseline: "
            "the native module did not load",
            "rebuild the wheel with a C++ compiler and the torch you deploy: "
            "python -m build --wheel --no-isolation",
        )
    return report.add(
        "ops",
        True,
        f"{type(ops).__name__} on LMCache's torch baseline (no native ops bound)",
    )


def check_transfer_modes(report: Report, spec: Any, compat: Any) -> bool:
    new_name, old_name = (
        spec.is_lmcache_driven_available(),
        spec.is_handle_transfer_available(),
    )
    if new_name != old_name:
        return report.add(
            "transfer modes",
            False,
            f"is_lmcache_driven_available() is {new_name} "
            f"but is_handle_transfer_available() is {old_name}",
            "subclass PortableDeviceSpec and override "
            "is_lmcache_driven_available() only",
        )
    modes = ["engine_driven"] + (["lmcache_driven"] if new_name else [])
    said = f"{', '.join(modes)}; auto means {compat.auto_transfer_mode(spec)}"
    # A plugin with LMCache-driven parts whose probe fails on this runtime (its IPC
    # memory or events not ported yet) offers engine-driven only: not ported, yet.
    unproven = getattr(spec, "lmcache_driven_unproven", lambda: "")()
    if unproven and not new_name:
        return report.pending(
            "transfer modes",
            f"{said}: LMCache-driven transfer is not offered here ({unproven})",
            "port IPC memory and interprocess events (doctor --port: their steps); "
            "the spec offers LMCache-driven transfer once its probe passes",
        )
    return report.add("transfer modes", True, said)


def _available(spec: Any) -> bool:
    try:
        return bool(spec.is_available())
    except Exception:  # noqa: BLE001
        return False


def check_runtime_calls(report: Report, spec: Any) -> bool:
    """Each call LMCache and the plugin make on ``torch.<device>`` (the kit's
    ``runtime_calls``, the README's list) present on the device, and working where
    it takes no argument."""
    # Local
    from ..runtime_calls import for_plugin
    from ..runtime_probe import problems

    backend = current()
    calls = for_plugin(bool(spec.is_lmcache_driven_available()), native_ops=False)
    required = sum(call.kind == "backend" and not call.optional for call in calls)
    wrong = problems(backend.torch_module(), calls)
    module = f"torch.{backend.torch_module_name}"
    if wrong:
        return report.add(
            "runtime calls",
            False,
            f"{len(wrong)} of {required} calls on {module} fail: " + " | ".join(wrong),
            f"give each in the PyTorch backend of {module} (README: the list of "
            "calls LMCache and this plugin make)",
        )
    return report.add(
        "runtime calls",
        True,
        f"the {required} calls LMCache and the plugin make on {module} work",
    )
