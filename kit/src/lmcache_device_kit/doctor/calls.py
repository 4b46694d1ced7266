# SPDX-License-Identifier: Apache-2.0
"""``doctor --api``'s checks of how LMCache is called: calls, server flags, settings.

A call is declared as the shapes it takes (``surface.Shape``), newest release
first; the first that binds wins. When none binds, the report names what moved:
the parameters or fields that are gone, the ones that are new with their types,
and the function of the installed LMCache that makes a new one from a gone one
(``pack_token_ids`` makes lmcache 0.5.7's ``token_bytes`` from ``token_ids``).
Server flags are checked against the installed ``lmcache server``'s own argument
parser, adapter settings against ``ExtraConfigDefault``.

Why a module of its own: ``api`` would pass 300 lines with it. It imports only
the standard library and ``report``; LMCache's names come in through the
``lazy`` resolver the caller passes (the shims', through the plugin's binding).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from typing import Any
import argparse
import difflib
import functools
import importlib
import inspect
import re

# Local
from .report import Report

Kind = inspect.Parameter
POSITIONAL = (Kind.POSITIONAL_ONLY, Kind.POSITIONAL_OR_KEYWORD)
VARIADIC = (Kind.VAR_POSITIONAL, Kind.VAR_KEYWORD)


def release(version: str) -> tuple[int, ...]:
    """``0.5.7.dev3+g1a2b`` or ``0.5.7rc2`` -> (0, 5, 7): the numeric release."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def applies(first: str | None, last: str | None, installed: tuple[int, ...]) -> bool:
    """Whether an entry bounded by ``first``..``last`` is expected on ``installed``."""
    return (first is None or installed >= release(first)) and (
        last is None or installed <= release(last)
    )


@functools.cache
def lmcache_sources() -> list[tuple[str, str]]:
    """(module, source) of every module of the installed LMCache (read once)."""
    root = Path(importlib.import_module("lmcache").__file__ or "").parent
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((module, path.read_text(errors="replace")))
    return found


def defined_in(attribute: str) -> list[str]:
    """Modules of the installed LMCache that define ``attribute`` (where it moved)."""
    pattern = re.compile(rf"^(class |def |){re.escape(attribute)}\b\s*[:=(]", re.M)
    return [module for module, text in lmcache_sources() if pattern.search(text)]


def makers(gone: str, annotation: str) -> list[str]:
    """Functions of the installed LMCache that make an ``annotation`` from a ``gone``
    parameter (named after it), e.g. ``token_codec.pack_token_ids`` -> bytes."""
    pattern = re.compile(
        rf"^def (\w*{re.escape(gone)}\w*)\([^)]*\)\s*->\s*{re.escape(annotation)}\s*:",
        re.M,
    )
    return [
        f"{module}.{name}"
        for module, text in lmcache_sources()
        for name in pattern.findall(text)
    ]


def binds(signature: inspect.Signature, positional: Any, keywords: Any) -> str | None:
    """Why a call of this shape would not bind to ``signature`` (None: it does)."""
    count = positional if isinstance(positional, int) else len(positional)
    try:
        signature.bind(*range(count), **{key: None for key in keywords})
    except TypeError as exc:
        return str(exc)
    if isinstance(positional, tuple):
        names = [p.name for p in signature.parameters.values() if p.kind in POSITIONAL]
        if tuple(names[:count]) != positional:
            theirs = ", ".join(names[:count])
            return f"its positional parameters are ({theirs}), not {positional}"
    return None


def what_moved(signature: inspect.Signature, shape: Any) -> str:
    """The parameters ``shape`` passes that are gone, and the required ones that are
    new (with their types and what makes them from a gone one)."""
    positional, keywords = shape[0], shape[1]
    ours = (() if isinstance(positional, int) else positional) + tuple(keywords)
    params = signature.parameters
    gone = [name for name in ours if name not in params]
    new = [
        p
        for p in params.values()
        if p.name not in ours and p.default is p.empty and p.kind not in VARIADIC
    ]
    said = [f"{', '.join(gone)} {'is' if len(gone) == 1 else 'are'} gone"] * bool(gone)
    for param in new:
        annotation = param.annotation
        if not isinstance(annotation, str):
            annotation = getattr(annotation, "__name__", str(annotation))
        made = [m for name in gone for m in makers(name, annotation)]
        how = f"; {', '.join(made)} makes one from {gone[0]}" if made else ""
        said.append(f"{param.name} ({annotation}) is new{how}")
    return "; ".join(said) or "the parameters differ"


def check_call(
    report: Report, entry: tuple[str, str, str], shapes: Any, lazy: Any, version: str
) -> None:
    """One declared call: the first of its shapes that binds. Shapes are tried whatever
    their last release (a call the harness makes on every release must bind on every
    one); a call whose shapes all start after the installed release is not made."""
    prefix, call, table = entry
    label = f"{prefix}call {call}"
    installed = release(version)
    asked = [shape for shape in shapes if applies(shape[2], None, installed)]
    if not asked:
        report.add(label, True, f"not called with lmcache {version}")
        return
    name, _, attribute = call.partition(".")
    try:
        target = lazy(name)
        target = getattr(target, attribute) if attribute else target
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        report.add(label, False, f"{exc}", f"see the {prefix}name {name} check")
        return
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        report.add(label, True, "compiled: its parameters are not visible")
        return
    for positional, keywords, _, last in asked:
        if binds(signature, positional, keywords) is None:
            old = f" (for lmcache <= {last})" if last else ""
            report.add(label, True, f"{call}{signature}{old}")
            return
    problem = binds(signature, *asked[0][:2])
    moved = what_moved(signature, asked[0])
    detail = f"{moved} ({problem}; lmcache {version} has {call}{signature})"
    fix = (
        f"add the shape lmcache {version} takes to CALLS[{call!r}] in {table}, "
        "first, from this release on (the current one's last release is the one "
        "before), and pass the new arguments where it is called (a shim in "
        "lmcache_device_kit.compat chooses by feature detection)"
    )
    report.add(label, False, detail, fix)


def check_flags(report: Report, harness: Any, lazy: Any, version: str) -> None:
    """The ``lmcache server`` flags and adapter settings the harness passes."""
    installed = release(version)
    parser = argparse.ArgumentParser()
    try:
        lazy("ServerCommand")().add_arguments(parser)
        settings = set(lazy("ExtraConfigDefault").__members__)
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        report.add("harness server", False, f"{exc}", "see the harness name checks")
        return
    flags = set(parser._option_string_actions)
    for flag, bounds in harness.SERVER_FLAGS.items():
        label = f"harness server flag {flag}"
        if not applies(bounds[0], bounds[1], installed):
            report.add(label, True, f"not passed to lmcache {version}")
        elif flag in flags:
            report.add(label, True, f"lmcache server {version} takes it")
        else:
            close = difflib.get_close_matches(flag, flags, n=3)
            report.add(
                label,
                False,
                f"lmcache server {version} has no {flag}"
                + (f" (it has {', '.join(close)})" if close else ""),
                "find what replaced it (lmcache server --help), then update "
                "lmcache_device_kit/harness/servers.py and SERVER_FLAGS in "
                "lmcache_device_kit/harness/surface.py",
            )
    for key, bounds in harness.CONFIG_KEYS.items():
        label = f"harness setting {key}"
        if not applies(bounds[0], bounds[1], installed):
            report.add(label, True, f"not set with lmcache {version}")
            continue
        known = key.removeprefix("lmcache.mp.") in settings
        report.add(
            label,
            known,
            "read by the adapters (ExtraConfigDefault)"
            if known
            else f"lmcache {version}'s adapters ignore it (not in ExtraConfigDefault)",
            "find the setting that replaced it and update CONFIG_KEYS in "
            "lmcache_device_kit/harness/surface.py and its users",
        )
