# SPDX-License-Identifier: Apache-2.0
"""``doctor --api``: what a plugin takes from LMCache, against the installed one.

Every LMCache name, base-class member and call the plugin depends on is declared
once, with the release shims it runs on: where names live in the kit's
``lmcache_device_kit/compat/surface.py``, the plugin's classes (named after its
binding's ``CLASS_PREFIX``), calls and shims in ``compat/declared.py``; what the
harness takes (the tests' worker, scheduler and servers, ``doctor --server``) in
``lmcache_device_kit/harness/surface.py``. This checks each entry: the name exists
where it is taken from, the members the plugin overrides still exist with
parameters the overrides accept, every abstract member is implemented, every call
still binds with the parameter names it passes (a field or parameter that moved is
named, with what replaced it), and every server flag and adapter setting the
harness passes still exists. One line per entry (``harness ...`` for the
harness's), the fix for a ✗.

Why a module of its own: it must run on an LMCache this plugin does not support
(that is its point), so it loads the plugin with the release check relaxed, in
its own process only. It imports LMCache, the shims' tables and the plugin's
binding and classes inside the functions, after ``import lmcache``, and nothing at
module level beyond the standard library, the kit's ``backend``, ``report`` and
``calls``.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import importlib
import importlib.util
import inspect
import os

# Local
from ..backend import current
from .calls import applies, check_call, check_flags, defined_in, release
from .report import Report

#: The shims' tables (imported after ``import lmcache``: their package imports it).
COMPAT_MODULE = "lmcache_device_kit.compat"
SURFACE = "lmcache_device_kit/compat/surface.py"
DECLARED = "lmcache_device_kit/compat/declared.py"
#: The harness table and its resolver, in this kit (imported after ``import lmcache``).
HARNESS_SURFACE = "lmcache_device_kit/harness/surface.py"
HARNESS_MODULE = "lmcache_device_kit.harness"


def lookup(module: str, attribute: str | None) -> Any:
    """The value at ``module``.``attribute`` (the module if None); raises if missing."""
    value = importlib.import_module(module)
    for part in filter(None, (attribute or "").split(".")):
        value = getattr(value, part)
    return value


def plugin_surface(package: str) -> tuple[Any, Any, dict, dict]:
    """What ``package`` takes from LMCache (after ``import lmcache``): its binding
    module (``_lmcache_compat``), the shims' names table, and its classes and calls,
    with LMCache-driven transfer's when it has that part (an ``ipc_wrapper``)."""
    binding = importlib.import_module(f"{package}._lmcache_compat")
    surface = importlib.import_module(f"{COMPAT_MODULE}.surface")
    declared = importlib.import_module(f"{COMPAT_MODULE}.declared")
    driven = importlib.util.find_spec(f"{package}.ipc_wrapper") is not None
    if getattr(importlib.import_module(f"{package}.names"), "EXTENDS", ""):
        # a spec that extends a built-in: the only class of its own
        classes = declared.extension_classes(binding.CLASS_PREFIX)
    else:
        classes = declared.classes(binding.CLASS_PREFIX, driven)
    return binding, surface, classes, declared.calls(driven)


def check_api(report: Report) -> None:
    """The whole declared surface, the plugin's and the harness's, against the
    installed LMCache."""
    backend = current()
    # LMCache loads this plugin inside ``import lmcache``: relax its release check first
    if backend.allow_untested_env_var:
        os.environ[backend.allow_untested_env_var] = "1"
    version = metadata.version("lmcache")
    installed = release(version)
    package = backend.package
    try:
        importlib.import_module("lmcache")
        compat, surface, classes, calls = plugin_surface(package)
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        report.add("lmcache", False, f"lmcache {version}: {exc}", "see the error")
        return
    harness = importlib.import_module(f"{HARNESS_MODULE}.surface")
    harness_lazy = importlib.import_module(f"{HARNESS_MODULE}.lmcache_calls").lazy
    report.add(
        "lmcache",
        True,
        f"lmcache {version}, {len(surface.NAMES)} names (the harness: "
        f"{len(harness.HARNESS_NAMES)})",
    )
    for prefix, names, where in (
        ("", surface.NAMES, SURFACE),
        ("harness ", harness.HARNESS_NAMES, HARNESS_SURFACE),
    ):
        for name, locations in names.items():
            check_name(report, (prefix, name, where), locations, installed, version)
    for module, cls, base, members in classes.values():
        check_class(report, (module, cls, base), members, compat.lazy, installed)
    for prefix, table, where, lazy in (
        ("", calls, DECLARED, compat.lazy),
        ("harness ", harness.HARNESS_CALLS, HARNESS_SURFACE, harness_lazy),
    ):
        for call, shapes in table.items():
            check_call(report, (prefix, call, where), shapes, lazy, version)
    check_flags(report, harness, harness_lazy, version)


def check_name(
    report: Report,
    entry: tuple[str, str, str],
    locations: Any,
    installed: Any,
    version: str,
) -> None:
    prefix, name, table = entry
    label = f"{prefix}name {name}"
    for module, attribute, _, last in locations:
        try:
            lookup(module, attribute)
        except Exception:  # noqa: BLE001,S112 - the next location may hold it
            continue
        where = f"{module}.{attribute}" if attribute else module
        old = f" (for lmcache <= {last})" if last else ""
        report.add(label, True, where + old)
        return
    if not any(applies(first, last, installed) for _, _, first, last in locations):
        bounds = ", ".join(
            f"{first or '...'} to {last or '...'}" for _, _, first, last in locations
        )
        report.add(label, True, f"not used with lmcache {version} (only {bounds})")
        return
    tried = ", ".join(f"{m}.{a}" if a else m for m, a, _, _ in locations)
    moved = defined_in(locations[0][1]) if locations[0][1] else []
    detail = f"none of {tried} exists in lmcache {version}"
    if name == "plugin_group":
        detail = f"lmcache {version} has no device-plugin API: it loads no plugins"
        fix = "this plugin needs lmcache>=0.5.4"
    elif moved:
        detail += f"; lmcache {version} defines {locations[0][1]} in {', '.join(moved)}"
        fix = f"add ({moved[0]!r}, {locations[0][1]!r}, ...) to NAMES[{name!r}]"
        fix += f" in {table}"
    else:
        fix = f"find what replaced it in lmcache {version} and port its users"
    report.add(label, False, detail, fix)


def check_class(
    report: Report, where: tuple[str, str, str], members: Any, lazy: Any, installed: Any
) -> None:
    module, cls_name, base_name = where
    package = current().package
    try:
        base = lazy(base_name)
        cls = getattr(importlib.import_module(module, package), cls_name)
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        fix = f"see the {base_name} name check, and import {package}{module}"
        report.add(f"class {cls_name}", False, f"{type(exc).__name__}: {exc}", fix)
        return
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    report.add(
        f"class {cls_name}",
        not missing,
        f"extends {base_name}"
        + (f"; abstract, not implemented: {', '.join(missing)}" if missing else ""),
        f"implement {', '.join(missing)} in {package}{module}",
    )
    for member, first, last in members:
        check_member(report, (base, base_name), (cls, member), (first, last), installed)


def check_member(
    report: Report,
    base: Any,
    plugin: Any,
    bounds: tuple[str | None, str | None],
    installed: tuple[int, ...],
) -> None:
    (base_cls, base_name), (cls, member) = base, plugin
    label = f"member {base_name}.{member}"
    if not hasattr(base_cls, member):
        if applies(bounds[0], bounds[1], installed):
            report.add(
                label,
                False,
                f"LMCache's {base_name} has no {member}: "
                f"{cls.__name__}.{member} is never called",
                f"find what LMCache calls instead, then update the override and "
                f"its members in {DECLARED}",
            )
        else:
            report.add(label, True, "not asked by this release")
        return
    problem = incompatible(
        inspect.getattr_static(base_cls, member), inspect.getattr_static(cls, member)
    )
    fix = f"give {cls.__name__}.{member} the parameters of {base_name}.{member}"
    report.add(label, problem is None, problem or "overridden, compatible", fix)


def incompatible(base: Any, override: Any) -> str | None:
    """Why LMCache's calls of ``base`` would not bind to ``override`` (None: they
    do)."""
    if isinstance(base, property) != isinstance(override, property):
        return "one is a property, the other a method"
    if isinstance(base, property):
        return None
    try:
        theirs = inspect.signature(getattr(base, "__func__", base))
        ours = inspect.signature(getattr(override, "__func__", override))
    except (TypeError, ValueError):
        return None  # compiled: nothing to compare
    args = [p for p in theirs.parameters.values() if p.kind <= p.POSITIONAL_OR_KEYWORD]
    keywords = [p.name for p in theirs.parameters.values() if p.kind == p.KEYWORD_ONLY]
    if len(args) <= 1 and not keywords:
        return None  # LMCache declares (self, *args, **kwargs): nothing to compare
    try:
        ours.bind(*args, **{name: None for name in keywords})
    except TypeError as exc:
        return f"LMCache's {theirs} does not bind to the override's {ours}: {exc}"
    return None
