# SPDX-License-Identifier: Apache-2.0
"""Run a rendered conformance suite against what is installed, and count what it did."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

import nox

from tasks.checks import context
from tasks.envs import ReleaseEnv
from tasks.readme import bash

#: For suites run without the rendered pyproject's settings (in-tree, server-free subsets): in
#: parallel, tests of one shared server on one xdist worker, the slowest listed.
PYTEST_ARGS = ("-n", "auto", "--dist", "loadgroup", "--durations", "10")
#: The marker LMCache's per-device tests carry, registered as LMCache's pytest.ini registers it (its
#: tests/conftest.py, which reads it, is not in an installed lmcache).
LMCACHE_MARKERS = ("-o", "markers=no_shared_allocator: Disable the shared-allocator monkeypatch for this test")
#: The kit's conformance classes beside an in-tree contribution, which carries no test that imports the kit
#: (LMCache's tree does not depend on it): a conftest and a test module of their own, written to a directory
#: outside the contribution. The classes come from the kit's one list (``conformance.catalog``), the list a wheel
#: render's tests/test_conformance.py subclasses by hand.
KIT_CONFTEST = '''"""Written by lmcache-device-template (tasks/suite.py): the kit's suite against {package}."""

import os

from lmcache_device_kit import backend as kit_backend

BACKEND = kit_backend.use({package!r})
if BACKEND.device_present():  # imports torch, which loads the emulator when it is chosen
    os.environ.setdefault("LMCACHE_DEVICE_BACKEND", BACKEND.backend_name)

from lmcache_device_kit.harness.spawn import QUIET_ENV  # noqa: E402

for _key, _value in QUIET_ENV.items():
    os.environ.setdefault(_key, _value)

from lmcache_device_kit.conformance.plugin import *  # noqa: E402, F403
'''
KIT_TESTS = '''"""Written by lmcache-device-template (tasks/suite.py): every conformance class of the kit, subclassed."""

from lmcache_device_kit.conformance.catalog import subclasses

globals().update(subclasses(__name__))
'''


@dataclass
class Outcome:
    passed: int
    skipped: int
    seconds: float
    #: What else ran after the suite (LMCache's own tests) and how long it took, for the timing table.
    also: str = ""
    also_seconds: float = 0.0
    #: Of ``skipped``: the expected failures (JUnit reports an xfail as skipped), named apart.
    xfailed: int = 0

    def __str__(self) -> str:
        also = f"; {self.also} in {self.also_seconds:.0f} s" if self.also else ""
        skipped = f"{self.skipped - self.xfailed} skipped" + (f", {self.xfailed} xfailed" if self.xfailed else "")
        return f"{self.passed} passed, {skipped} in {self.seconds:.0f} s{also}"


def run_suite(
    session: nox.Session, env: ReleaseEnv, tests: list[Path], work: Path, env_vars: dict[str, str | None],
    *, device_present: bool, own_settings: bool = True, serial: bool = False, server_free: bool = False,
    extra: tuple[str, ...] = (), command: str | None = None,
) -> Outcome:  # fmt: skip
    """Run the suite from an empty directory (nothing may resolve to the source tree) and count it.

    ``command``: the README's test block, run as written (it changes to a directory of its own) instead of
    pytest on ``tests``, its options (the report, ``extra``) given through ``PYTEST_ADDOPTS``.

    ``own_settings``: the suite's own pytest settings apply (a wheel's pyproject);
    otherwise PYTEST_ARGS are passed. ``serial``: one process (a few device-free
    tests cost less than starting xdist's workers). Without a device, the device-free
    tests must have run and the rest been skipped. ``server_free``: only the tests that start no
    ``lmcache server`` (``-m "not servers"``: the kit's plugin marks a class that does).
    """
    run_dir = work / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    junit = work / "junit.xml"
    extra += (() if own_settings else PYTEST_ARGS) + (("-n", "0") if serial else ())
    extra += ("-m", "not servers") if server_free else ()
    options = ("-p", "no:cacheprovider", "-ra", f"--junitxml={junit}", *extra)
    with session.chdir(run_dir):
        if command:
            env.run_logged(session, work / "suite.log", bash(), "-euo", "pipefail", "-c", command,
                           env={"OMP_NUM_THREADS": "1", "PYTEST_ADDOPTS": shlex.join(options), **env_vars})  # fmt: skip
        else:
            env.run_logged(session, work / "suite.log", "python", "-m", "pytest", *options, *map(str, tests),
                           env={"OMP_NUM_THREADS": "1", **env_vars})  # fmt: skip
    outcome = count(session, junit, device_present=device_present)
    session.log(f"suite time per test file:\n{per_file(junit)}")
    return outcome


def run_in_tree_suites(
    session: nox.Session, env: ReleaseEnv, project: Path, work: Path, env_vars: dict[str, str | None],
    *, device_present: bool, serial: bool = False, server_free: bool = False,
) -> Outcome:  # fmt: skip
    """An in-tree contribution overlaid onto lmcache, proven twice, each from an empty directory: its own tests
    (LMCache's per-device style: plain pytest, as LMCache runs them, no kit) and the kit's conformance classes
    (``kit_suite``). The outcome is the kit's; the contribution's own tests are its ``also``."""
    ctx = context(project)
    begun = time.monotonic()
    own = run_suite(session, env, [project / ctx["__tests_dir"]], work / "own", env_vars,
                    device_present=device_present, own_settings=False, serial=True, extra=LMCACHE_MARKERS)  # fmt: skip
    own_seconds = time.monotonic() - begun
    outcome = run_suite(session, env, [kit_suite(work / "kit-suite", ctx["__package"])], work / "kit", env_vars,
                        device_present=device_present, own_settings=False, serial=serial, server_free=server_free)  # fmt: skip
    outcome.also = f"the contribution's own tests: {own.passed} passed, {own.skipped} skipped"
    outcome.also_seconds = own_seconds
    return outcome


def kit_suite(directory: Path, package: str) -> Path:
    """Write the kit's suite against the in-tree backend ``package`` to ``directory`` (KIT_CONFTEST, KIT_TESTS)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conftest.py").write_text(KIT_CONFTEST.format(package=package))
    (directory / "test_conformance.py").write_text(KIT_TESTS)
    return directory


def count(session: nox.Session, junit: Path, *, device_present: bool) -> Outcome:
    """Passed and skipped tests of a suite's JUnit report; without a device, both must be above zero."""
    root = ElementTree.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, f"no test suite in {junit}"
    marks = [mark for case in suite.iter("testcase") if (mark := case.find("skipped")) is not None]
    xfailed = sum(1 for mark in marks if mark.get("type") == "pytest.xfail")
    outcome = Outcome(int(suite.get("tests", 0)) - len(marks), len(marks), float(suite.get("time", 0)), xfailed=xfailed)
    session.log(f"suite: {outcome}")
    if not device_present and (outcome.passed == 0 or outcome.skipped == 0):
        session.error(f"without a device the suite must run its device-free tests and skip the rest: {outcome}")
    return outcome


def per_file(junit: Path) -> str:
    """Where a suite's time went, per test file: tests and the seconds they took (setup, call and teardown
    summed over the file's tests, across parallel workers), the slowest first."""
    seconds: dict[str, float] = {}
    tests: dict[str, int] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = case.get("classname", "?").rsplit(".", 1)[-1]
        seconds[name] = seconds.get(name, 0.0) + float(case.get("time", 0))
        tests[name] = tests.get(name, 0) + 1
    lines = [f"{seconds[name]:7.1f} s  {tests[name]:4d}  {name}" for name in sorted(seconds, key=lambda n: -seconds[n])]
    return "\n".join([f"{'time':>9}  {'tests':>4}  file (summed over workers)", *lines])


def kit_options(project: Path) -> list[str]:
    """What the kit's contract runner and canary are told about a render, as its noxfile tells them: its backend
    and the project (its tests, its ports of LMCache's per-device tests)."""
    return ["--package", context(project)["__package"], "--project", str(project)]


def run_contract(
    session: nox.Session,
    env: ReleaseEnv,
    project: Path,
    work: Path,
    env_vars: dict[str, str | None],
    suites: tuple[str, ...],
) -> str:
    """LMCache's own device-generic ``suites`` from its sdist against the installed plugin (the kit's contract
    runner, as the render's ``nox -s lmcache_contract`` runs it; ``devices``: the render's ports, counted apart);
    a summary for the timing table."""
    out = work / "lmcache-contract"
    chosen = [argument for suite in suites for argument in ("--suite", suite)]
    with session.chdir(work):
        env.run_logged(session, out / "contract.log", "python", "-m", "lmcache_device_kit.contract",
                       *kit_options(project), "--work", str(out), *chosen,
                       env={"OMP_NUM_THREADS": "1", **env_vars})  # fmt: skip
    outcomes = [count(session, junit, device_present=True) for junit in sorted(out.glob("contract-*.xml"))]
    passed, skipped = sum(o.passed for o in outcomes), sum(o.skipped for o in outcomes)
    return f"LMCache's own tests ({' + '.join(suites)}): {passed} passed, {skipped} skipped"


def run_canary(
    session: nox.Session, env: ReleaseEnv, project: Path, work: Path, env_vars: dict[str, str | None],
    suites: tuple[str, ...],
) -> Outcome:  # fmt: skip
    """A pre-release: the kit's canary on the render (as its ``nox -s canary`` runs it): ``doctor --api``, the
    render's suite and LMCache's own ``suites`` (the platform one when none), its expected differences reported
    apart; it fails on anything else. Its report is printed and kept beside the suite's JUnit report, its output in
    canary.log."""
    canary = work / "canary"
    chosen = [argument for suite in suites for argument in ("--contract-suite", suite)]
    with session.chdir(work):
        env.run_logged(session, work / "canary.log", "python", "-m", "lmcache_device_kit.canary",
                       *kit_options(project), "--report", str(work / "canary-report.md"), "--work", str(canary),
                       *chosen, env={"OMP_NUM_THREADS": "1", **env_vars})  # fmt: skip
        session.log(f"canary report ({work / 'canary-report.md'}):\n{(work / 'canary-report.md').read_text()}")
    outcome = count(session, canary / "suite.xml", device_present=True)
    contract = [count(session, junit, device_present=True) for junit in sorted(canary.glob("contract/contract-*.xml"))]
    outcome.also = (f"canary: doctor --api ✓, LMCache's own tests ({' + '.join(suites or ('platform',))}): "
                    f"{sum(o.passed for o in contract)} passed, {sum(o.skipped for o in contract)} skipped")  # fmt: skip
    return outcome


def check_runtime_calls(session: nox.Session, env: ReleaseEnv, record: Path, package: str) -> str:
    """The calls LMCache and the plugin ``package`` made on ``torch.<device>`` in a run the emulator recorded into
    ``record``: each must be on the kit's list (``lmcache_device_kit/runtime_calls.py``, the README's), else the
    session fails naming it. Returns the summary line (and the listed calls the run did not make)."""
    said = env.run_logged(session, record.parent / "runtime-calls.log", "python", "-m",
                          "lmcache_device_kit.runtime_calls", str(record), package)  # fmt: skip
    return said.strip()
