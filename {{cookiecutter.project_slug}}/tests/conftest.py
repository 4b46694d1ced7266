# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Conformance-test setup: opt this process into the emulator and select the backend.

LMCache reads these variables once, at ``import lmcache``, so they are set here,
before any test module imports LMCache. Values already in the environment win:
on real {{ cookiecutter.device_name }} hardware run ``{{ cookiecutter.__emulator_env_var }}=0 pytest``.
"""

from __future__ import annotations

import os

os.environ.setdefault("{{ cookiecutter.__emulator_env_var }}", "1")
os.environ.setdefault("LMCACHE_DEVICE_BACKEND", "{{ cookiecutter.backend_name }}")
for _key, _value in {
    "OMP_NUM_THREADS": "1",
    "LMCACHE_TRACK_USAGE": "false",
    "DO_NOT_TRACK": "1",
    "LMCACHE_DISABLE_BANNER": "1",
}.items():
    os.environ.setdefault(_key, _value)

from importlib import metadata  # noqa: E402
from importlib.util import find_spec  # noqa: E402


def pytest_report_header() -> list[str]:
    """Say which plugin and LMCache are under test, and from where."""
    spec = find_spec("{{ cookiecutter.import_package }}")
    origin = spec.origin if spec else "NOT INSTALLED"
    return [
        f"{{ cookiecutter.import_package }} {metadata.version('{{ cookiecutter.project_slug }}')} from {origin}",
        f"lmcache {metadata.version('lmcache')}, torch {metadata.version('torch')}",
        f"{{ cookiecutter.__emulator_env_var }}={os.environ['{{ cookiecutter.__emulator_env_var }}']} "
        f"LMCACHE_DEVICE_BACKEND={os.environ.get('LMCACHE_DEVICE_BACKEND')}",
    ]
