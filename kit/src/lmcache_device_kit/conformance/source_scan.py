# SPDX-License-Identifier: Apache-2.0
"""The project's Python read as text: every import from LMCache and every setting it
names, for ``lmcache_surface``'s check that the kit's tables declare them.

Why a module of its own: the scan is plain text work, apart from the tests that
compare it with the tables. Imports neither lmcache, the shims nor the plugin at
import time (``project_sources`` imports the plugin's package to find its files).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import importlib
import re

# First Party
from lmcache_device_kit import backend as kit_backend

#: Imports from LMCache (single, parenthesized, of modules), in code and in the
#: Python the tests run in subprocesses.
IMPORT = re.compile(r"from (lmcache(?:\.\w+)*) import (?:\(([^)]*)\)|([\w ,]+))")
MODULE = re.compile(r"^\s*import (lmcache(?:\.\w+)+)", re.M)
SETTING = re.compile(r"[\"'](lmcache\.mp\.\w+)[\"']")


def lmcache_imports(text: str) -> set[tuple[str, str | None]]:
    """(module, name) of every import from LMCache in ``text`` (name None: a module)."""
    found: set[tuple[str, str | None]] = {(m, None) for m in MODULE.findall(text)}
    for module, grouped, single in IMPORT.findall(text):
        lines = (line.split("#")[0] for line in (grouped or single).splitlines())
        for part in ",".join(lines).split(","):
            if part.split():
                found.add((module, part.split()[0]))  # ``name as alias``: name
    return found


def project_sources(tests: Path) -> dict[str, str]:
    """This project's Python, by path: the installed package, its tests (in
    ``tests``), and the kit they run (its harness, doctor, contract runner and
    conformance tests all drive LMCache)."""
    roots = [
        Path(importlib.import_module(name).__file__ or "").parent
        for name in (kit_backend.current().package, "lmcache_device_kit")
    ]
    files = [
        *(path for root in roots for path in root.rglob("*.py")),
        *tests.glob("*.py"),
    ]
    return {str(path): path.read_text() for path in files}


def builtin_spec_locations(extends: str) -> set[tuple[str, str | None]]:
    """Where each release keeps the built-in spec a plugin subclasses (none if it
    extends no built-in): declared by ``compat.surface.BUILTIN_PACKAGES``."""
    if not extends:
        return set()
    # First Party
    # (here, not at the top: importing the shims' package imports lmcache, which the
    # test process must not do before its conftest chose the backend)
    from lmcache_device_kit.compat.builtin import builtin_spec_class_name
    from lmcache_device_kit.compat.surface import BUILTIN_PACKAGES

    name = builtin_spec_class_name(extends)
    return {(f"{where}.{extends}", name) for where, _, _, _ in BUILTIN_PACKAGES}
