# SPDX-License-Identifier: Apache-2.0
"""One option combination outside the heavy subset: render, check, build or patch, and its server-free suite.

The heavy combinations (the variants) are proven whole, end to end, by
``generate_and_test`` and ``in_tree``; every other combination gets the same
static checks and wheel inspection here, is installed into the newest release's
environment (wheel, or in-tree overlay with its patch) and runs the suite files
that need no server.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nox

from tasks.checks import context
from tasks.envs import ReleaseEnv, overlay_in_tree, wire_patches
from tasks.progress import timed
from tasks.project import check_statically, emulator_distribution, install_emulator, install_kit, install_render, render
from tasks.suite import run_in_tree_suites, run_suite
from tasks.variants import BUILTIN_EXTENSION, NEWEST, OPTIONS, combination_id

#: The rendered test file the option matrix leaves out: LMCache's ported per-device tests, which the kit's contract
#: runner runs (its devices suite) in the heavy variants.
NOT_IN_MATRIX = ("test_lmcache_ports.py",)


def check_combination(session: nox.Session, combo: tuple[str, ...]) -> None:
    env = ReleaseEnv(NEWEST)
    work = Path(session.create_tmp()).resolve() / combination_id(combo)
    variant = dict(zip(OPTIONS, combo, strict=True))
    with timed(session, f"matrix {combination_id(combo)}") as timings:
        with timings.step(f"environment: CPU torch + lmcache {NEWEST}") as step:
            step.result = "created" if env.ensure(session) else "reused"
        with timings.step("render; static checks (in-tree: LMCache's pre-commit hooks)"):
            project = render(session, env, work / "rendered", variant)
            check_statically(session, env, project, cache=env.path / "mypy-cache")
        ctx = context(project)
        emulator = ctx["emulator"] == "yes"
        env_vars: dict[str, str | None] = {ctx["__emulator_env_var"]: "1" if emulator else None}
        # every rendered test file (the manifest chose them); classes that start servers are deselected below
        tests = sorted(p for p in (project / ctx["__tests_dir"]).glob("test_*.py") if p.name not in NOT_IN_MATRIX)
        env.uninstall_plugins(session, ctx["project_slug"], emulator_distribution(ctx))
        if ctx["ownership"] == "wheel":
            with timings.step("build, inspect and install the wheel (and the emulator's)"):
                install_render(session, env, project)
            with timings.step("server-free suite") as step:
                step.result = str(run_suite(session, env, tests, work, env_vars, device_present=emulator,
                                            serial=not emulator, server_free=True))  # fmt: skip
            return
        patches = wire_patches(project)
        if (ctx["lmcache_driven"] != "no") != bool(patches):
            session.error(f"expected {'a' if ctx['lmcache_driven'] != 'no' else 'no'} wire patch, found {patches}")
        with timings.step("patch applies; mypy inside an LMCache checkout"):
            typecheck_in_checkout(session, env, project, ctx["backend_name"])
        with timings.step("install the kit (the suite's harness)" + (" and the emulator" if emulator else "")):
            install_kit(session, env)
            if emulator:
                install_emulator(session, env, project)
        with timings.step("overlay onto lmcache; its own tests, the kit's server-free suite") as step:
            with env.overlaid(session, project, ctx["backend_name"]):
                outcome = run_in_tree_suites(session, env, project, work, env_vars, device_present=emulator,
                                             serial=not emulator, server_free=True)  # fmt: skip
            step.result = str(outcome)


def check_builtin_extension(session: nox.Session) -> None:
    """A backend that extends a built-in (``BUILTIN_EXTENSION``: a CUDA look-alike), rendered with only the answers a
    vendor types: its static checks (lint, mypy), its wheel built, inspected and installed, and its whole suite from
    outside its tree on this host without the device: what needs none passes (registries, selection, the doctor, the
    wheel), every other test is skipped with its reason. Uninstalled afterwards: the release's environment is
    shared."""
    env = ReleaseEnv(NEWEST)
    work = Path(session.create_tmp()).resolve() / "extends-builtin"
    with timed(session, f"extends a built-in: {' '.join(f'{k}={v}' for k, v in BUILTIN_EXTENSION.items())}") as timings:
        with timings.step(f"environment: CPU torch + lmcache {NEWEST}") as step:
            step.result = "created" if env.ensure(session) else "reused"
        with timings.step("render (as typed); static checks: lint, mypy"):
            project = render(session, env, work / "rendered", BUILTIN_EXTENSION, complete=False)
            check_statically(session, env, project, cache=env.path / "mypy-cache")
        ctx = context(project)
        if ctx["emulator"] != "no" or not ctx["__extends"]:
            session.error(f"expected a render that extends a built-in, without an emulator: {ctx['__extends']!r}")
        tests = sorted((project / ctx["__tests_dir"]).glob("test_*.py"))
        try:
            with timings.step("build, inspect and install the wheel"):
                install_render(session, env, project)
            with timings.step("its suite, without the device") as step:
                step.result = str(run_suite(session, env, tests, work, {}, device_present=False, serial=True))
        finally:
            env.uninstall_plugins(session, ctx["project_slug"])


def typecheck_in_checkout(session: nox.Session, env: ReleaseEnv, project: Path, backend: str) -> None:
    """mypy on the contribution (its package and its tests) inside LMCache's sources (the installed release's
    Python files) with the contribution and its patch applied, as a reviewer's checkout has them."""
    checkout = env.path / "lmcache-checkout"
    if not checkout.exists():
        shutil.copytree(env.site_packages(session) / "lmcache", checkout / "lmcache", ignore=_all_but_python_sources)
    tests = Path(context(project)["__tests_dir"])
    shutil.rmtree(checkout / "tests", ignore_errors=True)  # an earlier combination's
    (checkout / tests).mkdir(parents=True)
    for test in (project / tests).glob("*.py"):
        shutil.copy2(test, checkout / tests / test.name)
    try:
        with overlay_in_tree(session, project, checkout, backend), session.chdir(checkout):
            # errors in LMCache's own modules are not ours to report
            env.run(session, "mypy", "--ignore-missing-imports", "--explicit-package-bases", "--follow-imports=silent",
                    "--cache-dir", str(env.path / "mypy-cache-in-tree"),
                    f"lmcache/v1/platform/devices/{backend}", str(tests))  # fmt: skip
    finally:
        shutil.rmtree(checkout / "tests")


def _all_but_python_sources(directory: str, names: list[str]) -> list[str]:
    """copytree's ignore: everything but directories and Python sources."""
    keep = (".py", ".pyi")
    return [n for n in names if n == "__pycache__" or not (n.endswith(keep) or Path(directory, n).is_dir())]
