# SPDX-License-Identifier: Apache-2.0
"""Fakes for the kit's tests: a plugin package made from the template, as files;
and a process of its own for code that imports LMCache.

The kit's tests need no real plugin: a package with the template's ``names.py``
(and whatever modules a test gives it) on ``sys.path`` stands for one. Importing
LMCache builds its device registry and loads every installed plugin, so tests that
need it run their code in a new interpreter (``in_lmcache``).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
import json
import os
import subprocess
import sys
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.plugin import MARKERS


def pytest_configure(config: pytest.Config) -> None:
    """The conformance suite's markers, which the kit's tests meet importing its
    classes (a project's run registers them through the suite's plugin)."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


#: A template plugin's names.py; ``__NAME__`` is replaced by the package's name.
NAMES = """
DEVICE_TYPE = "cpu"
BACKEND_NAME = "__NAME__"
TORCH_MODULE_NAME = "cpu"
TORCH_EXTENSION_MODULE = ""
SLOW_PATH_MARK = "__NAME__ slow path:"
"""


@pytest.fixture
def fake_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., str]]:
    """``fake_plugin(name, {relative path: source})``: a package ``name`` with a
    names.py (backend name ``name``, device ``cpu``) and those modules, importable;
    the package name. Its modules are forgotten afterwards."""
    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(name: str, modules: dict[str, str] | None = None) -> str:
        files = {"__init__.py": "", "names.py": NAMES.replace("__NAME__", name)}
        for relative, source in {**files, **(modules or {})}.items():
            path = tmp_path / name / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        made.append(name)
        return name

    yield make
    kit_backend.current.cache_clear()
    for module in [m for m in sys.modules if m.split(".")[0] in made]:
        del sys.modules[module]


def in_lmcache(code: str, path: Path | None = None) -> Any:
    """The JSON ``code`` prints last, run in a new interpreter (``path`` first on its
    sys.path) that imports LMCache plainly: no backend chosen, no emulator."""
    env = {k: v for k, v in os.environ.items() if k not in ("LMCACHE_DEVICE_BACKEND",)}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(path or "")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=path or Path(__file__).parent.parent.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
