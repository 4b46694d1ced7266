# SPDX-License-Identifier: Apache-2.0
"""The plugin's project a contract run or a canary is about: where its tests are.

Why a module of its own: the contract runner and the canary find a project's files
the same way. The kit runs the project's own conformance suite (``tests/``), its
subclasses of the kit's ports of LMCache's per-device tests
(``tests/test_lmcache_ports.py``, the contract's ``devices`` suite) and reads the
LMCache tests the project declares not applicable on top of the kit's
(``tests/lmcache_contract.toml``, optional).

Imports only the standard library.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path

#: A project's conformance suite, under its root.
TESTS_DIR = "tests"
#: LMCache's per-device tests ported to the plugin (the project's subclasses of
#: ``lmcache_device_kit.conformance.ports``), under the suite.
PORTS_FILE = "test_lmcache_ports.py"
#: The project's own not-applicable LMCache tests, under the suite (optional).
NOT_APPLICABLE_FILE = "lmcache_contract.toml"


def find_project(start: Path | None = None) -> Path | None:
    """The project around ``start`` (the current directory): the nearest directory,
    ``start`` included, holding a ``pyproject.toml``; None outside any."""
    here = (start or Path.cwd()).resolve()
    return next(
        (p for p in (here, *here.parents) if (p / "pyproject.toml").is_file()), None
    )


def ported_tests(project: Path | None) -> Path | None:
    """The project's ``tests/test_lmcache_ports.py``, if it has one."""
    ports = project / TESTS_DIR / PORTS_FILE if project else None
    return ports if ports is not None and ports.is_file() else None


def own_not_applicable(project: Path | None) -> Path | None:
    """The project's ``tests/lmcache_contract.toml``, if it has one."""
    found = project / TESTS_DIR / NOT_APPLICABLE_FILE if project else None
    return found if found is not None and found.is_file() else None
