# SPDX-License-Identifier: Apache-2.0
"""Run LMCache's device-generic tests against an installed plugin
(``python -m lmcache_device_kit.contract``; a project's ``nox -s lmcache_contract``).

LMCache tests its built-in backends with ``tests/v1/platform/*.py`` and, through its
server, ``tests/v1/multiprocess/``; they ship only in its source distribution. The
multiprocess suite's device-generic files are those that use the active device
(``DEVICE_GENERIC`` below: a rule, not a hand-kept list). This runner fetches the
sdist of the *installed* lmcache release from the index pip is configured with
(``sdist.py``), copies those test files into a scratch tree (run in place, they would
import the uncompiled ``lmcache`` source package instead of the installed one) and
runs them with the plugin selected (``pytest_plugin.py``). ``lmcache_contract.toml``
beside this module, and the project's own ``tests/lmcache_contract.toml`` over it,
list every LMCache test that does not apply as LMCache runs it, each with its reason
(``not_applicable.py``): nothing is skipped or moved silently, and a run that did not
reach the plugin's ops fails.

``devices``: LMCache's per-device tests (``tests/v1/platform/devices/{cuda,npu,musa}``)
that test a backend's behaviour, ported to a plugin as the kit's base classes
(``lmcache_device_kit.conformance.ports``), which the project subclasses in its
``tests/test_lmcache_ports.py`` (``--ports``); the ports' README, shipped with the
kit, lists every departure, printed after the run. They need no sdist, and are
counted apart.

Every suite by default (the multiprocess one takes a few minutes: it starts LMCache
servers; ``devices`` when the project has ports). Exit status 0 only when every pass
ran tests and none failed. The backend is ``lmcache_device_kit.backend.current()``
(``--package`` sets it).
"""

# Future
from __future__ import annotations

# Standard
from importlib.metadata import version
from pathlib import Path
from xml.etree import ElementTree
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance import ports as ported
from lmcache_device_kit.contract import project as projects
from lmcache_device_kit.contract.not_applicable import SKIP_MARK, load
from lmcache_device_kit.contract.pytest_plugin import SETTINGS_ENV_VAR
from lmcache_device_kit.contract.sdist import cache_dir, fetch_sdist

#: LMCache's device-generic test directories (the per-device ones under
#: platform/devices/ test LMCache's own backends). platform: every file directly
#: inside; multiprocess: the test files that use the active device (the rest test
#: server internals that no device backend reaches), with every helper module beside
#: them.
SUITES = {"platform": "tests/v1/platform", "multiprocess": "tests/v1/multiprocess"}
#: The suite of the project's ports of LMCache's per-device tests (no sdist).
DEVICES = "devices"
DEVICE_GENERIC = re.compile(
    rb"torch_dev\b|torch_device_type|device_ops|get_device_spec|resolve_device_ops"
    rb"|ipc_wrapper|LMCACHE_DEVICE_BACKEND"
)
PLUGIN = "lmcache_device_kit.contract.pytest_plugin"


def wanted(name: str, suites: list[str]) -> bool:
    """Whether the sdist's file ``name`` belongs in the scratch tree for ``suites``."""
    if name in ("pytest.ini", "tests/__init__.py", "tests/v1/__init__.py"):
        return True
    platform, multiprocess = SUITES["platform"], SUITES["multiprocess"]
    direct = (
        name.startswith(f"{platform}/") and name.count("/") == platform.count("/") + 1
    )
    return name.endswith(".py") and (
        ("platform" in suites and direct)
        or ("multiprocess" in suites and name.startswith(f"{multiprocess}/"))
    )


def unpack_tests(
    archive: Path, release: str, scratch: Path, suites: list[str]
) -> list[str]:
    """The suites' files, the packages above them and LMCache's pytest.ini (its
    markers); the multiprocess test files that never use the active device, which are
    unpacked (others import them) but not run."""
    shutil.rmtree(scratch, ignore_errors=True)
    prefix = f"lmcache-{release}/"
    others = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix(prefix)
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is None or not wanted(name, suites):
                continue
            data = extracted.read()
            target = scratch / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            multiprocess = name.startswith(SUITES["multiprocess"])
            if multiprocess and target.name.startswith("test_"):
                if DEVICE_GENERIC.search(data) is None:
                    others.append(name)
    return sorted(others)


def run_pass(
    cwd: Path,
    junit: Path,
    env: dict[str, str],
    args: list[str],
    paths: list[str] | None = None,
) -> dict[str, int]:
    """One pytest run over the scratch tree ``cwd``'s suites, with the kit's plugin
    (or over ``paths``, ported tests, in one process); its counts from the JUnit
    report."""
    suites = [path for path in SUITES.values() if (cwd / path).is_dir()]
    plugins = ["-p", "no:cacheprovider", "-p", "no:xdist", "-p", PLUGIN]
    report = ["-rs", "-q", "-o", "log_cli=false", f"--junitxml={junit}"]
    own = [] if paths is None else ["-o", "addopts=", "--durations", "5"]
    command = [sys.executable, "-m", "pytest", *(plugins if paths is None else [])]
    command += [*report, *own, *(suites if paths is None else paths), *args]
    subprocess.run(command, cwd=cwd, env=env, check=False)
    if not junit.exists():
        # pytest stopped before reporting
        return {"tests": 0, "failures": 1, "errors": 0, "skipped": 0, "listed": 0}
    root = ElementTree.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    counts = {
        key: int(suite.get(key, 0))
        for key in ("tests", "failures", "errors", "skipped")
    }
    skips = [case.find("skipped") for case in suite.iter("testcase")]
    counts["listed"] = sum(
        1 for s in skips if s is not None and SKIP_MARK in s.get("message", "")
    )
    return counts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_device_kit.contract",
        description="Run LMCache's device-generic tests against the installed plugin.",
    )
    parser.add_argument(
        "--suite",
        action="append",
        choices=[*SUITES, DEVICES],
        help="repeatable; default: all (devices: when the project has ported tests)",
    )
    parser.add_argument("--work", type=Path, default=Path.cwd() / "lmcache-contract")
    parser.add_argument(
        "--junit", type=Path, help="directory for the passes' JUnit reports"
    )
    parser.add_argument(
        "--project",
        type=Path,
        help="the plugin's project (default: the one around the current directory): "
        "its tests/lmcache_contract.toml, if any, is read over the kit's",
    )
    parser.add_argument(
        "--ports",
        type=Path,
        help="the ported LMCache tests: the test file (or directory) subclassing "
        "the kit's ports (default: the project's tests/test_lmcache_ports.py)",
    )
    kit_backend.add_package_option(parser)
    parser.add_argument("pytest_args", nargs="*")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    backend = kit_backend.chosen(options.package)
    # resolved: the passes run from other directories
    project = options.project or projects.find_project()
    project = project.resolve() if project else None
    ports = options.ports or projects.ported_tests(project)
    ports = ports.resolve() if ports else None
    release = version("lmcache")
    listing = load(release, projects.own_not_applicable(project))
    suites = options.suite or [*SUITES, *([DEVICES] if ports else [])]
    if DEVICES in suites and (ports is None or not ports.exists()):
        sys.exit(f"--suite {DEVICES}: no ported tests at {ports}; pass --ports PATH")
    sdist = [name for name in suites if name in SUITES]
    scratch = options.work / f"lmcache-{release}"
    archive = fetch_sdist(release, cache_dir(backend.package)) if sdist else None
    others = unpack_tests(archive, release, scratch, suites) if archive else []
    junit = (options.junit or options.work).resolve()
    junit.mkdir(parents=True, exist_ok=True)
    # DO_NOT_TRACK would override the usage tests' own opt-in (to a local sink); the
    # rest stays untracked.
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LMCACHE_DEVICE_BACKEND", "DEVICE_TYPE", "DO_NOT_TRACK")
    }
    base.update(LMCACHE_TRACK_USAGE="false", OMP_NUM_THREADS="1")
    if backend.has_emulator:  # the CPU emulator unless set to 0
        base.setdefault(backend.emulator_env_var, "1")
    settings = {
        "skip": listing.skip,
        "device_type_only": listing.device_type_only,
        "not_collected": sorted({*listing.not_collected, *others}),
    }
    for test, reason in listing.listed().items() if sdist else []:
        print(f"listed in {listing.source[test]}: {test}: {reason}")
    for path in listing.not_collected if sdist else []:
        if not (scratch / path).exists():
            print(f"{listing.source[path]} lists {path}, which this release's "
                  "selected suites do not have")  # fmt: skip
    by_name = {"LMCACHE_DEVICE_BACKEND": backend.backend_name}
    by_type = {"DEVICE_TYPE": backend.device_type}
    args, passes = options.pytest_args, {}
    by_type_pass = f"DEVICE_TYPE={backend.device_type}"
    if sdist:
        for name, chosen, which in (
            # The backend chosen by name, as a deployment chooses it.
            (f"LMCACHE_DEVICE_BACKEND={backend.backend_name}", by_name, "backend"),
            # Tests that replace the entry points with fakes and expect no backend
            # chosen by name.
            (by_type_pass, by_type, "device_type"),
        ):
            pass_settings = json.dumps({**settings, "pass": which})
            env = {**base, **chosen, SETTINGS_ENV_VAR: pass_settings}
            report = junit / f"contract-{which.replace('_', '-')}.xml"
            passes[name] = run_pass(scratch, report, env, args)
    if DEVICES in suites and ports is not None:
        # LMCache's per-device tests, ported: run from the project, in one process.
        passes[f"devices (ported, {ports.name})"] = run_pass(
            options.work, junit / "contract-devices.xml", {**base, **by_name}, args,
            paths=[str(ports)],
        )  # fmt: skip
    summarize(release, backend.package, suites, passes, others)
    uncollected = [p for p in listing.not_collected if sdist and (scratch / p).exists()]
    said = f": {', '.join(uncollected)}" if uncollected else ""
    print(f"  not collected ({SKIP_MARK}): {len(uncollected)} file(s){said}")
    if DEVICES in suites:
        print(ported.departures())
    ran_everywhere = all(
        counts["tests"] > counts["skipped"]
        for counts in passes.values()
        if counts["tests"]
    )
    failed = sum(counts["failures"] + counts["errors"] for counts in passes.values())
    # every pass but the device-type one (it may have no tests) ran some
    ran = [n["tests"] for name, n in passes.items() if name != by_type_pass]
    return 0 if failed == 0 and ran_everywhere and all(ran) else 1


def summarize(
    release: str,
    package: str,
    suites: list[str],
    passes: dict[str, dict[str, int]],
    others: list[str],
) -> None:
    tested = ", ".join(SUITES.get(name, "platform/devices, ported") for name in suites)
    print(f"\nLMCache {release}'s tests ({tested}) against {package}:")
    for name, counts in passes.items():
        broken = counts["failures"] + counts["errors"]
        passed = counts["tests"] - counts["skipped"] - broken
        print(
            f"  {name:<32} {counts['tests']:>4} tests: {passed} passed, "
            f"{broken} failed, {counts['skipped']} skipped "
            f"({counts['listed']} listed in {SKIP_MARK}, "
            "the rest by LMCache's own conditions)"
        )
    if others:
        print(
            f"  not run: {len(others)} multiprocess test file(s) "
            "that never use the active device (server internals)"
        )
