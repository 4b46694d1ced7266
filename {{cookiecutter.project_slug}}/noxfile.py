# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Automation for {{ cookiecutter.project_slug }}: the sessions its template runs on it, for you and CI.

Sessions:
  lint       ruff check (settings in pyproject.toml).
  typecheck  mypy on src/ (settings in pyproject.toml).
  build      build the wheel with a PEP 517 frontend and check its metadata: entry
             point, console script, lmcache range, licence, py.typed.
  tests      build and install the wheel (never editable) with torch and one tested
             lmcache release, then run the conformance suite from outside the source
             tree; on the CPU emulator unless {{ cookiecutter.__emulator_env_var }}=0.
             One session per release: nox -s "tests({{ cookiecutter._lmcache_tested[-1] }})".
  soak       (not default) 1,000 store/lookup/retrieve cycles per transfer path
             through a real server; prints mismatches, RSS growth, leaked files.

Configuration (environment variables):
  TORCH_REQUIREMENT  pip arguments for the torch installed before lmcache (default
                     ``torch``; your vendor build, or on CI without the device
                     ``torch --index-url https://download.pytorch.org/whl/cpu``).
                     lmcache depends on an unpinned torch, so without this pip
                     pulls a multi-GB CUDA build.
"""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path

import nox
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["lint", "typecheck", "build", "tests"]

ROOT = Path(__file__).resolve().parent
PACKAGE = "{{ cookiecutter.import_package }}"
#: pip arguments that install torch, e.g. "torch==2.5.1" or "torch --index-url https://download.pytorch.org/whl/cpu".
TORCH = os.environ.get("TORCH_REQUIREMENT", "torch").split()
NATIVE = (ROOT / "setup.py").exists()  # native ops compile against the installed torch


def tested_lmcache_releases() -> list[str]:
    """TESTED_LMCACHE_VERSIONS from _lmcache_compat.py: the one place that lists them."""
    tree = ast.parse((ROOT / "src" / PACKAGE / "_lmcache_compat.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TESTED_LMCACHE_VERSIONS":
            return list(ast.literal_eval(node.value))
    raise RuntimeError("_lmcache_compat.py has no TESTED_LMCACHE_VERSIONS")


RELEASES = tested_lmcache_releases()
#: Undeclared dependencies of a release's ``lmcache`` command line (the E2E tests start ``lmcache server``).
CLI_EXTRAS = {"0.5.4": ["openai"], "0.5.5": ["openai"]}


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, with pyproject.toml's settings."""
    session.install("ruff")
    session.run("ruff", "check", str(ROOT))


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on src/, with pyproject.toml's settings."""
    session.install("mypy")
    session.run("mypy", "--config-file", str(ROOT / "pyproject.toml"), str(ROOT / "src"))


def build_wheel(session: nox.Session) -> Path:
    """Build the wheel into a fresh directory; native builds use this session's torch (no isolation)."""
    out = Path(session.create_tmp()) / "dist"
    for old in out.glob("*.whl"):
        old.unlink()
    if NATIVE:
        session.install(*TORCH)
        session.install("build", "setuptools>=77", "wheel", "ninja")
    else:
        session.install("build")
    isolation = ["--no-isolation"] if NATIVE else []
    session.run("python", "-m", "build", "--wheel", *isolation, "--outdir", str(out), str(ROOT))
    (wheel,) = out.glob("*.whl")
    return wheel


def check_wheel(session: nox.Session, wheel: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode().splitlines()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    problems = []
    for group, entries in {**project["entry-points"], "console_scripts": project["scripts"]}.items():
        for name, value in entries.items():
            if f"{name} = {value}" not in entry_points or f"[{group}]" not in entry_points:
                problems.append(f"entry point [{group}] {name} = {value} missing")
    requires = {str(Requirement(m.split(":", 1)[1])) for m in metadata if m.startswith("Requires-Dist:")}
    for req in project["dependencies"]:
        if str(Requirement(req)) not in requires:
            problems.append(f"METADATA lacks Requires-Dist {req!r} (has {sorted(requires)})")
    if f"License-Expression: {project['license']}" not in metadata:
        problems.append(f"METADATA lacks License-Expression {project['license']!r}")
    if f"{PACKAGE}/py.typed" not in names:
        problems.append("py.typed missing")
    if problems:
        session.error("wheel check failed: " + "; ".join(problems))
    session.log(f"wheel OK: {wheel.name}")


@nox.session
def build(session: nox.Session) -> None:
    """Build the wheel (PEP 517) and check its entry points, requirements, licence and py.typed."""
    check_wheel(session, build_wheel(session))


@nox.session
@nox.parametrize("lmcache", RELEASES, ids=RELEASES)
def tests(session: nox.Session, lmcache: str) -> None:
    """The conformance suite against the installed wheel and one tested lmcache release."""
    session.install(*TORCH)  # first: lmcache's own torch requirement is unpinned
    session.install(f"lmcache=={lmcache}", *CLI_EXTRAS.get(lmcache, []))
    wheel = build_wheel(session)
    session.install(f"{wheel}[test]")
    session.install("--force-reinstall", "--no-deps", str(wheel))
    with session.chdir(session.create_tmp()):  # nothing may resolve to the source tree
        session.run("pytest", "-p", "no:cacheprovider", "-ra", str(ROOT / "tests"), *session.posargs,
                    env={"OMP_NUM_THREADS": "1"})  # fmt: skip


@nox.session(default=False)
def soak(session: nox.Session) -> None:
    """Many cycles through a real server per transfer path; posargs go to tests/soak.py (e.g. --cycles 200)."""
    session.install(*TORCH)
    session.install(f"lmcache=={RELEASES[-1]}", *CLI_EXTRAS.get(RELEASES[-1], []))
    wheel = build_wheel(session)
    session.install(f"{wheel}[test]")
    session.install("--force-reinstall", "--no-deps", str(wheel))
    with session.chdir(session.create_tmp()):
        session.run("python", str(ROOT / "tests" / "soak.py"), *session.posargs, env={"OMP_NUM_THREADS": "1"})
