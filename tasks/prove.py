# SPDX-License-Identifier: Apache-2.0
"""Prove variants end to end on one LMCache release: render, check, build, install, run the whole suite.

A wheel variant is built and installed into the release's environment; an
in-tree variant is overlaid onto its lmcache (package, then wire patch) and
taken off again afterwards. Either way the kit's conformance suite runs from an
empty directory against what is installed, through real ``lmcache server``
processes (a wheel's as its render subclasses it; beside an in-tree contribution,
which carries its own tests in LMCache's style, as the template writes it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import nox

from tasks.checks import context
from tasks.envs import ReleaseEnv
from tasks.kit import kit_structure_problems
from tasks.kit_source import KIT, kit_test_requirements
from tasks.progress import timed
from tasks.project import (
    build_emulator,
    build_wheel,
    check_statically,
    emulator_distribution,
    install_emulator,
    install_kit,
    install_wheel,
    render,
    typechecked_meanwhile,
)
from tasks.readme import run_install_and_server, summary, tests_command
from tasks.suite import (
    Outcome,
    check_runtime_calls,
    run_canary,
    run_contract,
    run_in_tree_suites,
    run_suite,
)
from tasks.variants import (
    EMULATOR_RUNTIMES,
    NEWEST,
    OTHER_HOST_FUNCTION_MODELS,
    PRERELEASES,
    QUICK_CONTRACT_SUITES,
    REPRESENTATIVE,
    VARIANTS,
    is_in_tree,
)


def select(session: nox.Session, names: list[str], default: list[str]) -> list[str]:
    """The variants named in posargs (``all``: every one of ``names``; none: ``default``), refusing unknown names."""
    if not session.posargs:
        return default
    if session.posargs == ["all"]:
        return names
    unknown = sorted(set(session.posargs) - set(names))
    if unknown:
        session.error(f"unknown variant(s) {unknown}; choose 'all' or from {names}")
    return [name for name in names if name in session.posargs]


def prove_release(
    session: nox.Session, release: str, names: list[str], contract: tuple[str, ...] = QUICK_CONTRACT_SUITES,
    *, other_models: bool = False,
) -> None:  # fmt: skip
    """Prove ``names`` one after another in the environment of ``release``, with progress and a timing
    table; the representative variant also runs LMCache's own ``contract`` suites (multiprocess: minutes) and, with
    ``other_models``, its tests marked ``publishes`` under each of OTHER_HOST_FUNCTION_MODELS."""
    env = ReleaseEnv(release)
    work = Path(session.create_tmp()).resolve()
    with timed(session, f"lmcache {release}") as timings:
        with timings.step(f"environment: CPU torch + lmcache {release}") as step:
            step.result = "created" if env.ensure(session) else "reused"
        for number, name in enumerate(names, 1):
            with timings.step(f"variant {number} of {len(names)}: {name}") as step:
                begun = time.monotonic()
                outcome = prove_variant(session, env, name, work / name, contract, other_models)
                before_suite = time.monotonic() - begun - outcome.seconds - outcome.also_seconds
                step.result = f"{outcome}; render, checks, build, install {before_suite:.0f} s"


def prove_variant(
    session: nox.Session, env: ReleaseEnv, name: str, work: Path, contract: tuple[str, ...], other_models: bool = False
) -> Outcome:
    variant = VARIANTS[name]
    project = render(session, env, work / "rendered", variant)
    ctx = context(project)
    emulator = ctx["emulator"] == "yes"
    meanwhile = emulator_built_meanwhile(env, project, ctx) if emulator else nullcontext()
    mypy_cache = env.path / "mypy-cache"
    with meanwhile, typechecked_meanwhile(session, env, project, mypy_cache):
        check_statically(session, env, project, cache=mypy_cache, types=False)
        wheel = None if is_in_tree(variant) else build_wheel(session, env, project)
    env_vars: dict[str, str | None] = {ctx["__emulator_env_var"]: "1" if emulator else None}
    if emulator and name in EMULATOR_RUNTIMES:
        rules = {f"{ctx['__emulator_env_var']}_{rule}": value for rule, value in EMULATOR_RUNTIMES[name].items()}
        session.log(f"{name}: the suite's emulator runs with " + " ".join(f"{k}={v}" for k, v in rules.items()))
        env_vars |= rules
    tests = project / ctx["__tests_dir"]
    env.uninstall_plugins(session, ctx["project_slug"], emulator_distribution(ctx))  # the previous variant's
    if is_in_tree(variant):
        if emulator:
            install_emulator(session, env, project)
        install_kit(session, env)  # the suite's harness, as a wheel's test extra brings it
        with env.overlaid(session, project, ctx["backend_name"]):
            registered = (
                f"import lmcache; from lmcache.v1.platform import _DEVICE_REGISTRY as r; s = r[{ctx['backend_name']!r}]"
            )
            said = env.run_logged(session, work / "import.log", "python", "-c",
                                  f"{registered}; print('in-tree spec under test:', type(s).__module__)",
                                  env=env_vars)  # fmt: skip
            session.log(ours(said))
            return run_in_tree_suites(session, env, project, work, env_vars, device_present=emulator)
    assert wheel is not None
    kit = install_wheel(session, env, wheel, project, build_emulator(session, env, project) if emulator else None)
    readme_ran: dict[str, float] = {}  # the README's blocks run as written, on the newest release (its prose's)
    if env.release == NEWEST:
        run_install_and_server(session, env, project, wheel, kit, work, env_vars, readme_ran)
    package = ctx["__package"]
    installed = (f"import {package}, sysconfig; p = {package}.__file__; "
                 "assert p.startswith(sysconfig.get_paths()['purelib']), p; print('plugin under test:', p)")  # fmt: skip
    if emulator:  # torch loads the emulator (its autoloading); one interpreter for both: each costs seconds
        module = ctx["__torch_module_name"]
        installed += f"; import torch; print('torch.{module} devices:', torch.{module}.device_count())"
    with session.chdir(work):  # nothing may resolve to the source tree
        session.log(ours(env.run_logged(session, work / "import.log", "python", "-c", installed, env=env_vars)))
    if env.release in PRERELEASES:
        begun = time.monotonic()
        outcome = run_canary(session, env, project, work, env_vars, contract if name == REPRESENTATIVE else ())
        outcome.also_seconds = time.monotonic() - begun - outcome.seconds  # doctor --api, LMCache's own tests
        return outcome
    command = tests_command(project, kit, env) if env.release == NEWEST else None
    # who calls what on torch.<device> in the suite, recorded by the emulator (its _record.py), checked against the
    # kit's list below: the representative variant's suite drives LMCache both ways and the native ops (the main
    # job: the newest release, the one the README's list follows)
    record = work / "runtime-calls" if emulator and name == REPRESENTATIVE and env.release == NEWEST else None
    suite_env = env_vars | ({f"{ctx['__emulator_env_var']}_RECORD": str(record)} if record else {})
    if record:
        shutil.rmtree(record, ignore_errors=True)
    begun = time.monotonic()
    outcome = run_suite(session, env, [tests], work, suite_env, device_present=emulator, command=command)
    if record:
        session.log(check_runtime_calls(session, env, record, ctx["__package"]))
    if command:
        readme_ran["tests"] = time.monotonic() - begun
        session.log(summary((project / "README.md").read_text(), readme_ran))
    if name == REPRESENTATIVE:
        begun = time.monotonic()
        outcome.also = run_contract(session, env, project, work, env_vars, contract)
        if emulator and other_models:
            outcome.also += "; " + run_other_models(session, env, tests, work, env_vars, ctx["__emulator_env_var"])
        outcome.also_seconds = time.monotonic() - begun
    return outcome


def run_other_models(
    session: nox.Session, env: ReleaseEnv, tests: Path, work: Path, env_vars: dict[str, str | None], prefix: str
) -> str:
    """The suite's tests marked ``publishes`` under each of OTHER_HOST_FUNCTION_MODELS; what ran, for the table."""
    said = []
    for model, rules in OTHER_HOST_FUNCTION_MODELS.items():
        model_vars = env_vars | {f"{prefix}_{rule}": value for rule, value in rules.items()}
        ran = run_suite(session, env, [tests], work / f"publishes-{model}", model_vars, device_present=True,
                        extra=("-m", "publishes"))  # fmt: skip
        if not ran.passed:
            session.error(f"no test marked publishes ran under the host-function model {model!r}")
        said.append(f"{ran.passed} publishing tests under the host-function model {model!r}")
    return ", ".join(said)


def ours(output: str) -> str:
    """The lines our own import checks print (``... under test: ...``, ``... devices: ...``), not LMCache's log."""
    return "\n".join(line for line in output.splitlines() if " under test: " in line or " devices: " in line)


@contextmanager
def emulator_built_meanwhile(env: ReleaseEnv, project: Path, ctx: dict) -> Iterator[None]:
    """Compile the render's emulator (one core) while the block runs (checks, the native build on the other).

    The emulator keys its build cache by its source and torch, so the installed copy
    later loads this build; loading it from the render's source tree only fills
    that cache.
    """
    source = project / ctx["__emulator_dir"] / "src"
    package = ctx["__emulator_package"]
    code = f"import sys; sys.path.insert(0, {str(source)!r}); import {package}; {package}.load()"
    build = subprocess.Popen([env.python, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield
    finally:
        _, errors = build.communicate()
        if build.returncode:  # the import before the suite reports it again, in full
            print(f"emulator build failed:\n{errors[-3000:]}", file=sys.stderr)


def prove_kit(session: nox.Session, release: str) -> None:
    """The kit on its own, no render: ruff, ruff format, isort, mypy, its import structure, its wheel (built,
    checked, installed into the release's environment) and its own tests, run against that installed wheel."""
    env = ReleaseEnv(release)
    with timed(session, f"kit on lmcache {release}") as timings:
        with timings.step(f"environment: CPU torch + lmcache {release}") as step:
            step.result = "created" if env.ensure(session) else "reused"
        with timings.step("ruff, isort, mypy, structure"), session.chdir(KIT):
            env.run(session, "ruff", "check", "--no-cache", ".")
            env.run(session, "ruff", "format", "--no-cache", "--check", ".")
            env.run(session, "isort", "--check-only", "--diff", "--settings-path", ".", ".")
            env.run(session, "mypy", "--config-file", "pyproject.toml", "--cache-dir", str(env.path / "mypy-cache-kit"))
            problems = kit_structure_problems()
            if problems:
                session.error("kit structure:\n  " + "\n  ".join(problems))
        with timings.step("wheel: build, check, install"):
            install_kit(session, env)
            env.install(session, *kit_test_requirements(extra="cluster"))  # its tests run a real redis-server
        with timings.step("the kit's tests") as step, session.chdir(session.create_tmp()):
            env.run(session, "pytest", "-p", "no:cacheprovider", "-q", "-n", "auto", str(KIT / "tests"), *session.posargs,
                    env={"OMP_NUM_THREADS": "1"})  # fmt: skip
            step.result = "passed"
