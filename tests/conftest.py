# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the template's own tests: render the template into a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
# The checks the nox sessions run on renders (tasks/checks.py) are the ones these tests assert.
sys.path.insert(0, str(TEMPLATE))


@pytest.fixture
def render(tmp_path: Path) -> Callable[..., Path]:
    """Render with ``--no-input`` and the given answers; return the project directory."""

    renders = iter(range(1_000))

    def _render(**answers: str) -> Path:
        out = tmp_path / f"out{next(renders)}"
        return Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context=answers, output_dir=str(out)))

    return _render


@pytest.fixture
def render_cli(tmp_path: Path) -> Callable[..., tuple[subprocess.CompletedProcess[str], Path]]:
    """Render through the ``cookiecutter`` command line, as a vendor does; return (process, output dir)."""

    def _render(*answers: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        out = tmp_path / "cli-out"
        out.mkdir(exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(out), str(TEMPLATE), *answers],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        return done, out

    return _render


def run_render_sessions(project: Path, *sessions: str) -> subprocess.CompletedProcess[str]:
    """A wheel render's own nox ``sessions`` as it ships them, with this environment's tools (ruff, isort, mypy)."""
    from tasks.checks import RENDER_SESSION_ENV, render_sessions

    tools = str(Path(sys.executable).parent)
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # the main job's too
    env = {**inherited, **RENDER_SESSION_ENV, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    command = render_sessions(project, *sessions, nox=str(Path(tools) / "nox"))
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
