# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Automation for this project: the sessions its template runs on it, for you and CI.

Sessions:
  lint       ruff check, ruff format and isort (LMCache's style, set in
             pyproject.toml).
  typecheck  mypy on src/{{ " and emulator/src/" if cookiecutter.emulator == "yes" else "" }} (settings in pyproject.toml).
  build      build the wheel with a PEP 517 frontend and check its metadata: entry
             point, console script, its requirements (the lmcache range and the
             kit's compatible range{{ ";\n             the torch the native ops are built against" if cookiecutter.native_ops == "yes" else "" }}), the test extra, licence,
             py.typed, no C++ sources (the kit's wheel check).
  check_wheels  (not default) the kit's wheel check on wheels built elsewhere:
             -- dist/*.whl (the release workflow's{{ " cibuildwheel" if cookiecutter.native_ops == "yes" else "" }} wheels).
  tests      build and install the wheel (never editable) with torch and one tested
             lmcache release, then run the conformance suite from outside the source
{% if cookiecutter.emulator == 'yes' %}             tree; on the CPU emulator (emulator/, installed beside the wheel)
             unless {{ cookiecutter.__emulator_env_var }}=0.
{% else %}             tree; without a device it skips what needs one.
{% endif %}             One session per release: nox -s "tests({{ (cookiecutter | tested_releases)[-1] }})".
  cluster    (not default) tests/test_cluster.py (pytest -m cluster): two servers
             sharing one L2 (fs; resp on a real Redis, the cluster extra) or P2P
             through a coordinator (nixl, the p2p extra).
  lmcache_contract  LMCache's own device-generic tests (tests/v1/platform and the
             tests/v1/multiprocess files that use the device, from the release's sdist)
{%- if cookiecutter.lmcache_driven != 'no' %}
             and its per-device tests ported (tests/test_lmcache_ports.py)
{%- endif %}
             against the installed wheel, run by the kit
             (python -m lmcache_device_kit.contract: its lmcache_contract.toml lists
             each LMCache test that does not apply, with its reason; yours, if any, go
             in tests/lmcache_contract.toml). -- --suite platform: the fast one.
  soak       (not default) 1,000 store/lookup/retrieve cycles per transfer path
             through a real server (the kit's python -m lmcache_device_kit.soak);
             prints mismatches, RSS growth, leaked files.
  canary     (not default) an lmcache this plugin was not tested with: the newest
             release, -- pre (the newest pre-release), -- VERSION or
             -- "lmcache @ git+https://...": doctor --api, the suite and LMCache's
             tests, then canary-report.md (the kit's python -m
             lmcache_device_kit.canary).

Configuration (environment variables):
  TORCH_REQUIREMENT  pip arguments for the torch installed before lmcache (default
                     ``torch``; your vendor build, or on CI without the device
                     ``torch --index-url https://download.pytorch.org/whl/cpu``).
                     lmcache depends on an unpinned torch, so without this pip
                     pulls a multi-GB CUDA build.{% if cookiecutter.native_ops == "yes" %} A bare ``torch`` is the
                     version pyproject.toml pins: the native ops are built
                     against it.{% endif %}
  LMCACHE_DEVICE_KIT pip arguments for the kit, the shims the wheel requires and
                     the tests' harness, e.g. a template checkout's ``kit/``
                     directory. Without it the kit comes from the package index
                     (the version the test extra pins), else from the template
                     this project was rendered from (.cruft.json, .template.json):
                     kit_source.py, README.md "Where the kit comes from".
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import ast
import json
import os
import runpy

# Third Party
{%- if cookiecutter.native_ops == 'yes' %}
from packaging.requirements import Requirement
{%- endif %}
import nox

try:
    # Standard
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    # Third Party
    import tomli as tomllib

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["lint", "typecheck", "build", "tests", "lmcache_contract"]

ROOT = Path(__file__).resolve().parent
PACKAGE = "{{ cookiecutter.import_package }}"
#: pip arguments that install torch, e.g. "torch==2.5.1" or "torch --index-url
#: https://download.pytorch.org/whl/cpu".
TORCH = os.environ.get("TORCH_REQUIREMENT", "torch").split()
{%- if cookiecutter.native_ops == 'yes' %}
#: ... a bare ``torch`` being the one pyproject.toml's dependencies pin (the native ops
#: are built against it, and setup.py refuses another).
PINNED_TORCH = [
    r
    for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    if Requirement(r).name == "torch"
]
TORCH = [PINNED_TORCH[0] if arg == "torch" else arg for arg in TORCH]
{%- endif %}
NATIVE = (ROOT / "setup.py").exists()  # native ops compile against the installed torch


def tested_lmcache_releases() -> list[str]:
    """TESTED_LMCACHE_VERSIONS from _lmcache_compat.py: the one place that lists
    them."""
    tree = ast.parse((ROOT / "src" / PACKAGE / "_lmcache_compat.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and getattr(node.targets[0], "id", "") == "TESTED_LMCACHE_VERSIONS"
        ):
            return list(ast.literal_eval(node.value))
    raise RuntimeError("_lmcache_compat.py has no TESTED_LMCACHE_VERSIONS")


def kit(tool: str) -> list[str]:
    """``python -m lmcache_device_kit.<tool>`` (the contract runner, the canary), told
    this backend and this project: its tests, ported LMCache tests and own list of
    LMCache tests that do not apply (tests/lmcache_contract.toml), if any."""
    module = f"lmcache_device_kit.{tool}"
    return ["python", "-m", module, "--package", PACKAGE, "--project", str(ROOT)]


RELEASES = tested_lmcache_releases()
#: kit_source.py, beside this file: the kit's own module that says where the kit comes
#: from (a copy: it runs before the kit is installed).
KIT_SOURCE = runpy.run_path(str(ROOT / "kit_source.py"), run_name="kit_source")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format and isort, with pyproject.toml's settings (LMCache's
    style)."""
    session.install("ruff", "isort>=6")
    # Wherever the project sits: under a directory git ignores (a nox envdir, another
    # checkout's ignored build area) ruff would find no file and pass. Its own default
    # exclusions (.nox, build, dist, .venv, ...) still apply.
    everywhere = ["--no-respect-gitignore", str(ROOT)]
    session.run("ruff", "check", *everywhere)
    session.run("ruff", "format", "--check", *everywhere)
    session.run("isort", "--check-only", "--diff", "--settings-path", str(ROOT), ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy on the package{{ " and the emulator" if cookiecutter.emulator == "yes" else "" }}, with
    pyproject.toml's settings (the kit too: the package imports its shims)."""
    session.install("mypy")
    install_kit(session)
{%- if cookiecutter.emulator == 'yes' %}
    sources = [ROOT / "src", ROOT / "emulator" / "src"]
{%- else %}
    sources = [ROOT / "src"]
{%- endif %}
    session.run(
        "mypy", "--config-file", str(ROOT / "pyproject.toml"), *map(str, sources)
    )


def build_wheel(session: nox.Session) -> Path:
    """Build the wheel into a fresh directory; native builds use this session's torch
    (no isolation)."""
    out = Path(session.create_tmp()) / "dist"
    for old in out.glob("*.whl"):
        old.unlink()
    if NATIVE:
        session.install(*TORCH)
        session.install("build", "setuptools>=77", "wheel", "ninja")
    else:
        session.install("build")
    isolation = ["--no-isolation"] if NATIVE else []
    session.run(
        "python", "-m", "build", "--wheel", *isolation, "--outdir", str(out), str(ROOT)
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@nox.session
def build(session: nox.Session) -> None:
    """Build the wheel (PEP 517) and check it with the kit's wheel check: entry points,
    requirements and extras, licence, py.typed, no C++ sources or emulator files."""
    check_wheel(session, build_wheel(session))


@nox.session(default=False)
def check_wheels(session: nox.Session) -> None:
    """The kit's wheel check on wheels built elsewhere: ``-- dist/*.whl``; with
    ``-- --index URL dist/*.whl`` also that the index can install all they require
    (the release workflow's check before it publishes: none may strand its users)."""
    given = list(session.posargs)
    index = given[:2] if given[:1] == ["--index"] else []
    wheels = given[len(index) :]
    if not wheels or len(index) == 1:
        session.error("name the wheels: nox -s check_wheels -- [--index URL] *.whl")
    for wheel in wheels:
        check_wheel(session, Path(wheel))
    if index:
        session.run("python", "-m", "lmcache_device_kit.index_check", *index, *wheels)


def check_wheel(session: nox.Session, wheel: Path) -> None:
    """The kit's wheel check (python -m lmcache_device_kit.wheel_check) against this
    project's pyproject.toml."""
    install_kit(session)
    check = ["python", "-m", "lmcache_device_kit.wheel_check", str(wheel)]
    session.run(*check, "--project", str(ROOT))


def install_kit(session: nox.Session) -> None:
    """lmcache-device-kit, from the first source that gives it (kit_source.py;
    README.md, "Where the kit comes from"); none: the session fails at once, saying
    what it tried and the command that fixes it."""
    KIT_SOURCE["install_in"](session, ROOT)


def install_plugin(session: nox.Session, lmcache: str, past_pin: bool = False) -> None:
    """This wheel (never editable) and what its tests need, in the kit's order
    (python -m lmcache_device_kit.install): torch, then ``lmcache`` (a release such as
    0.5.6, ``pre``: the newest release or pre-release, or any pip requirement) with its
    command line's undeclared dependencies, then the wheel with its test extra, then
    the CPU emulator if the project has one. ``past_pin`` keeps that lmcache even
    outside the wheel's own lmcache range (the canary)."""
    install_kit(session)  # first: it says the order (needs packaging)
    wheel = build_wheel(session)
    order = ["python", "-m", "lmcache_device_kit.install", "--lmcache", lmcache]
    order += [f"--torch={' '.join(TORCH)}", "--project", str(ROOT)]
    order += ["--wheel", str(wheel)]
{%- if cookiecutter.emulator == 'yes' %}
    # The CPU emulator: a distribution of its own, never in the wheel; torch loads it
    # when {{ cookiecutter.__emulator_env_var }}=1,
    # which the tests set unless it is 0.
    order += ["--emulator", str(ROOT / "emulator")]
{%- endif %}
    order += ["--past-pin"] if past_pin else []
    steps = session.run(*order, silent=True)
    for _, arguments in json.loads(str(steps).splitlines()[-1]):
        session.install(*arguments)


@nox.session
@nox.parametrize("lmcache", RELEASES, ids=RELEASES)
def tests(session: nox.Session, lmcache: str) -> None:
    """The conformance suite against the installed wheel and one tested lmcache
    release."""
    install_plugin(session, lmcache)
    run_pytest(session, str(ROOT / "tests"))


def run_pytest(session: nox.Session, *args: str) -> None:
    """pytest on ``args`` and the posargs, from an empty directory (nothing may resolve
    to the source tree)."""
    options = ["-p", "no:cacheprovider", "-ra", *args, *session.posargs]
    with session.chdir(session.create_tmp()):
        session.run("pytest", *options, env={"OMP_NUM_THREADS": "1"})


@nox.session(default=False)
def cluster(session: nox.Session) -> None:
    """Two nodes sharing one L2 or P2P, on the newest tested lmcache: the cluster and
    p2p extras (a real Redis, a transfer engine) beside the test extra, then
    ``pytest -m cluster`` (posargs go to pytest)."""
    install_plugin(session, RELEASES[-1])
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    session.install(*extras["cluster"], *extras["p2p"])
    run_pytest(session, "-m", "cluster", str(ROOT / "tests" / "test_cluster.py"))


@nox.session
@nox.parametrize("lmcache", RELEASES, ids=RELEASES)
def lmcache_contract(session: nox.Session, lmcache: str) -> None:
    """LMCache's own device-generic tests, from the release's sdist, against the
    installed wheel (needs the index)."""
    install_plugin(session, lmcache)
    with session.chdir(session.create_tmp()):
        session.run(*kit("contract"), *session.posargs)


@nox.session(default=False)
def soak(session: nox.Session) -> None:
    """Many cycles through a real server per transfer path; posargs go to the kit's
    soak (python -m lmcache_device_kit.soak, e.g. --cycles 200)."""
    install_plugin(session, RELEASES[-1])
    with session.chdir(session.create_tmp()):
        session.run(
            "python",
            "-m",
            "lmcache_device_kit.soak",
            "--package",
            PACKAGE,
            *session.posargs,
            env={"OMP_NUM_THREADS": "1"},
        )


@nox.session(default=False)
def canary(session: nox.Session) -> None:
    """This plugin on an untested lmcache: ``-- [VERSION | pre | REQUIREMENT]
    [options of python -m lmcache_device_kit.canary]``; the newest release by default.
    Writes canary-report.md."""
    options = list(session.posargs)
    target = options.pop(0) if options and not options[0].startswith("-") else "lmcache"
    install_plugin(session, target, past_pin=True)
    report = ["--report", str(ROOT / "canary-report.md")]
    session.run(*kit("canary"), *report, *options, env={"OMP_NUM_THREADS": "1"})
