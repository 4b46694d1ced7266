# SPDX-License-Identifier: Apache-2.0
"""Try a plugin on an LMCache it was not tested with, and say what broke
(``python -m lmcache_device_kit.canary``; a project's ``nox -s canary``).

The project's ``nox -s canary`` installs the lmcache under test (the newest
release, a version, or a VCS reference), the plugin's wheel without its lmcache pin,
its test requirements and the emulator, then runs this. In order: ``doctor --api``
(what moved in LMCache's interface), the project's conformance suite, and LMCache's
own device-generic tests (``python -m lmcache_device_kit.contract``), each with the
plugin's release check relaxed in these processes only (its
``ALLOW_UNTESTED_ENV_VAR=1``). Writes a markdown report. Each failing test is
attributed: to the harness (the tests' worker, scheduler and servers) or to the
plugin, when its failure names an entry of ``doctor --api`` that moved; else to the
plugin itself. Tests that must fail on any untested release are declared below
(``EXPECTED``), with the reason, and reported apart. Exit status 0 only when
everything else passed.

Generic over ``lmcache_device_kit.backend.current()`` (``--package`` sets it).
Imports neither LMCache nor the plugin: it runs them in processes of their own.
"""

# Future
from __future__ import annotations

# Standard
from datetime import datetime, timezone
from importlib.metadata import requires, version
from pathlib import Path
from xml.etree import ElementTree
import argparse
import json
import os
import subprocess
import sys
import tempfile

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.contract import project as projects

#: Failing tests listed in the report, at most.
MAX_LISTED = 40
#: Tests of a project's suite (as the template renders it) that fail on every
#: release the plugin was not tested with, by design: file::test -> why. They are
#: reported, and do not fail the canary.
EXPECTED = {
    "test_conformance.py::TestWheelDiscovery::"
    "test_declared_lmcache_range_is_exactly_the_tested_releases": (
        "the installed lmcache is outside the tested range by definition; it joins "
        "when the release is added to the tested ones"
    ),
}


def untested_env(backend: kit_backend.Backend) -> dict[str, str]:
    """The environment of the canary's runs: the plugin's release check relaxed."""
    if not backend.allow_untested_env_var:
        sys.exit(
            f"{backend.package}'s names.py has no ALLOW_UNTESTED_ENV_VAR: the canary "
            "tries a wheel past its lmcache range, which the wheel must allow"
        )
    return {
        **os.environ,
        backend.allow_untested_env_var: "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


def supported_range(package: str) -> str:
    """The lmcache requirement the plugin's distribution declares: the releases it was
    tested with."""
    # Third Party
    from packaging.requirements import Requirement

    (distribution, *_) = kit_backend.distributions_of(package)
    declared = [Requirement(text) for text in requires(distribution) or []]
    return str(next(r for r in declared if r.name == "lmcache").specifier)


def is_untested(installed: str, supported: str) -> bool:
    """Whether ``installed`` is outside the declared range (pre-releases included)."""
    # Third Party
    from packaging.specifiers import SpecifierSet

    return not SpecifierSet(supported).contains(installed, prereleases=True)


def api_checks(package: str, env: dict[str, str]) -> list[dict]:
    """``doctor --api --json``: one dict per entry (name, ok, detail, fix)."""
    done = subprocess.run(
        [sys.executable, "-m", f"{package}.doctor", "--api", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    try:
        return list(json.loads(done.stdout)["checks"])
    except (ValueError, KeyError):
        detail = f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
        return [{"name": "doctor --api", "ok": False, "detail": detail, "fix": ""}]


def test_id(case: ElementTree.Element) -> str:
    """``test_file.py::test_name[params]`` of a JUnit case, with its class where it has
    one (``test_file.py::TestClass::test_name``; its xdist group dropped)."""
    parts = str(case.get("classname")).split(".")
    modules = [at for at, part in enumerate(parts) if part.startswith("test_")]
    at = modules[-1] if modules else len(parts) - 1
    path = "::".join([f"{parts[at]}.py", *parts[at + 1 :]])
    return f"{path}::{str(case.get('name')).split('@')[0]}"


def junit_outcome(paths: list[Path], untested: bool = True) -> dict:
    """Counts, failing tests (id -> failure text) and, on an ``untested`` release,
    expected failures of JUnit reports (none: the run did not start)."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failing: dict[str, str] = {}
    expected: dict[str, bool] = {}
    for path in paths:
        if not path.exists():
            failing[f"{path.name}: no report (the run did not start)"] = ""
            continue
        for case in ElementTree.parse(path).getroot().iter("testcase"):
            counts["tests"] += 1
            failed = [case.find(kind) for kind in ("failure", "error")]
            problem = next((found for found in failed if found is not None), None)
            name = test_id(case)
            if name.split("[")[0] in EXPECTED and untested:
                expected[name] = problem is not None
                continue
            if problem is not None:
                counts["failures" if failed[0] is not None else "errors"] += 1
                texts = [problem.get("message") or "", problem.text or ""]
                texts += [out.text or "" for out in case.iter("system-out")]
                texts += [out.text or "" for out in case.iter("system-err")]
                failing[name] = "\n".join(texts)
            if case.find("skipped") is not None:
                counts["skipped"] += 1
    return {**counts, "failing": failing, "expected": expected}


def attribution(text: str, moved: list[dict]) -> str:
    """Who depends on what moved, by the entries of ``doctor --api`` the failure
    names: the harness, the plugin, or neither (then it is the plugin's code)."""
    named = [c for c in moved if c["name"].split()[-1].rsplit(".", 1)[-1] in text]
    if not named:
        return "the plugin: its failure names nothing that moved in LMCache"
    harness = [c["name"] for c in named if c["name"].startswith("harness ")]
    plugin = [c["name"] for c in named if not c["name"].startswith("harness ")]
    said = [f"the plugin depends on what moved ({', '.join(plugin)})"] * bool(plugin)
    if harness:
        said.append(f"the harness depends on what moved ({', '.join(harness)})")
    return "; ".join(said)


def run_suite(tests: Path, junit: Path, env: dict[str, str], untested: bool) -> dict:
    """The project's conformance suite, from outside its source tree."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tests)]
            + [f"--junitxml={junit}"],
            cwd=scratch,
            env=env,
        )
    return junit_outcome([junit], untested)


def run_contract(
    project: Path, junit_dir: Path, suites: list[str], env: dict, untested: bool
) -> dict:
    """LMCache's own device-generic tests from the installed release's sdist."""
    options = [arg for suite in suites for arg in ("--suite", suite)]
    subprocess.run(
        [sys.executable, "-m", "lmcache_device_kit.contract", *options]
        + ["--project", str(project), "--junit", str(junit_dir)]
        + ["--work", str(junit_dir / "work")],
        env=env,
    )
    reports = sorted(junit_dir.glob("contract-*.xml")) or [junit_dir / "-"]
    return junit_outcome(reports, untested)


def outcome_lines(title: str, outcome: dict | None, moved: list[dict]) -> list[str]:
    if outcome is None:
        return [f"## {title}", "", "Not run: this LMCache cannot load the plugin.", ""]
    failed = outcome["failures"] + outcome["errors"]
    passed = outcome["tests"] - failed - outcome["skipped"] - len(outcome["expected"])
    lines = [f"## {title}", ""]
    lines.append(f"{passed} passed, {failed} failed, {outcome['skipped']} skipped")
    failing = list(outcome["failing"].items())
    lines += [""] + [
        f"- ✗ `{test}`: {attribution(text, moved)}"
        for test, text in failing[:MAX_LISTED]
    ]
    if len(failing) > MAX_LISTED:
        lines.append(f"- … and {len(failing) - MAX_LISTED} more")
    for test, did_fail in outcome["expected"].items():
        why = EXPECTED[test.split("[")[0]]
        said = "failed, as expected" if did_fail else "passed, though expected to fail"
        lines.append(f"- expected on an untested release: `{test}` {said} ({why})")
    return [*lines, ""]


def report(
    package: str, checks: list[dict], suite: dict | None, contract: dict | None
) -> str:
    installed, supported = version("lmcache"), supported_range(package)
    broken = [check for check in checks if not check["ok"]]
    tested = (
        "outside the wheel's tested range, so its release check was relaxed for this "
        "run only"
        if is_untested(installed, supported)
        else "a release the wheel was tested with: nothing is expected to fail"
    )
    lines = [
        f"# Canary: {package} on lmcache {installed}",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. lmcache {installed} is "
        f"{tested} (lmcache{supported}).",
        "",
    ]
    plugin_api = next((c for c in checks if c["name"] == "name plugin_group"), None)
    if plugin_api is not None and not plugin_api["ok"]:
        lines += [f"**{plugin_api['detail']}**: {plugin_api['fix']}.", ""]
    lines += ["## LMCache interface (`doctor --api`)", ""]
    lines.append(f"{len(checks) - len(broken)} of {len(checks)} entries unchanged.")
    lines += [""] + [f"- ✗ {c['name']}: {c['detail']} ({c['fix']})" for c in broken]
    lines += ["", *outcome_lines("Conformance suite", suite, broken)]
    lines += outcome_lines("LMCache's device-generic tests", contract, broken)
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_device_kit.canary",
        description="Try the installed plugin on an LMCache it was not tested with.",
    )
    parser.add_argument("--report", type=Path, default=Path("canary-report.md"))
    parser.add_argument("--contract-suite", action="append", default=[])
    parser.add_argument("--work", type=Path, help="for the JUnit reports (a new temp)")
    parser.add_argument(
        "--project",
        type=Path,
        help="the plugin's project, whose tests/ run (default: the one around the "
        "current directory)",
    )
    kit_backend.add_package_option(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    backend = kit_backend.chosen(options.package)
    project = options.project or projects.find_project()
    if project is None:
        sys.exit("no project around the current directory: pass --project DIR")
    project = project.resolve()  # the suite runs from a temporary directory
    env = untested_env(backend)
    work = options.work or Path(tempfile.mkdtemp(prefix="canary-"))
    work.mkdir(parents=True, exist_ok=True)
    checks = api_checks(backend.package, env)
    loads = not any(c["name"] == "name plugin_group" and not c["ok"] for c in checks)
    untested = is_untested(version("lmcache"), supported_range(backend.package))
    tests = project / projects.TESTS_DIR
    suite = run_suite(tests, work / "suite.xml", env, untested) if loads else None
    suites = options.contract_suite or ["platform"]
    contract = (
        run_contract(project, work / "contract", suites, env, untested)
        if loads
        else None
    )
    options.report.write_text(report(backend.package, checks, suite, contract))
    print(options.report.read_text())
    outcomes = [o for o in (suite, contract) if o is not None]
    failed = [o for o in outcomes if o["failures"] or o["errors"] or not o["tests"]]
    return 1 if failed or not loads or not all(c["ok"] for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
