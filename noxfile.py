# /// script
# dependencies = ["nox>=2024.4.15"]
# ///
# SPDX-License-Identifier: Apache-2.0
"""Automation for lmcache-device-template.

Sessions:
  tests              the template's own tests (render, refuse, input safety, updates); fast.
  generate_and_test  render the sample ``foo`` backend in each variant (engine-driven
                     only; LMCache-driven as the default; LMCache-driven opt-in;
                     native ops with LMCache-driven; no emulator),
                     build its wheel, install it into a fresh environment with real
                     torch (CPU) and the newest supported lmcache, and run the rendered
                     conformance suite, end to end against a real ``lmcache server``
                     on 127.0.0.1.
  in_tree            render the in-tree contribution (ownership=in_tree), overlay it
                     onto the newest installed lmcache, apply its wire patch, and run
                     the same suite.
  matrix             one session per option combination (ownership x transfer x native
                     ops x emulator): render, syntax, compile, ruff, mypy, wheel or patch.
  lmcache_releases   (not default) the same for every supported lmcache release
                     (cookiecutter.json ``_lmcache_tested``), one environment each;
                     ``nox -s "lmcache_releases(0.5.4)"`` runs one release.
  soak               (not default) 1,000 store/lookup/retrieve cycles per transfer
                     path through real servers: mismatches, RSS growth, leaks.
  bench              (not default) op-level and end-to-end transfer figures for
                     native foo ops, the torch baseline on foo and LMCache's CPU
                     path; table, JSON and PNG in bench-results/.

Configuration (environment variables):
  LMCACHE_TEMPLATE_TORCH  the torch requirement installed before anything else
                          (default ``torch==2.13.0``, a CPU build here). lmcache
                          depends on an unpinned torch, so without this pip pulls a
                          multi-GB CUDA build; vendors point it at their torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import nox
from packaging.requirements import Requirement

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["tests", "generate_and_test", "in_tree", "matrix"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).resolve().parent
TORCH = os.environ.get("LMCACHE_TEMPLATE_TORCH", "torch==2.13.0")
TEMPLATE_DEPS = ["cookiecutter>=2.6", "pytest>=8", "ruff", "nox>=2024.4.15", "build", "cruft"]
_CONTEXT = json.loads((ROOT / "cookiecutter.json").read_text())
#: The LMCache releases the rendered package supports, oldest first (cookiecutter.json).
LMCACHE_RELEASES: list[str] = _CONTEXT["_lmcache_tested"]
LMCACHE_REQUIREMENT: str = _CONTEXT["_lmcache_requirement"]
NEWEST = LMCACHE_RELEASES[-1]
#: Undeclared dependencies a release's ``lmcache`` command line needs (0.5.4's and 0.5.5's import openai).
RELEASE_EXTRAS: dict[str, list[str]] = {"0.5.4": ["openai"], "0.5.5": ["openai"]}
#: The sample backends generate_and_test proves, one after another in one environment. With the
#: in-tree variants below they are the heavy (end-to-end) subset of the option matrix: every value of
#: every option is proven end to end at least once.
VARIANTS: dict[str, dict[str, str]] = {
    "engine-driven": {"device_name": "foo", "lmcache_driven": "no", "native_ops": "no"},
    "lmcache-driven-default": {"device_name": "foo", "lmcache_driven": "default", "native_ops": "no"},
    "lmcache-driven-opt-in": {"device_name": "foo", "lmcache_driven": "opt_in", "native_ops": "no"},
    "native-lmcache-driven": {"device_name": "foo", "lmcache_driven": "default", "native_ops": "yes"},
    # No emulator on a host without the device: the suite must skip what needs one, run the rest.
    "no-emulator": {"device_name": "foo", "lmcache_driven": "default", "native_ops": "no", "emulator": "no"},
}
#: The in-tree contributions the in_tree session overlays onto an installed lmcache.
IN_TREE_VARIANTS: dict[str, dict[str, str]] = {
    "in-tree-lmcache-driven-default": {"device_name": "foo", "ownership": "in_tree", "lmcache_driven": "default", "native_ops": "no"},
    "in-tree-engine-driven": {"device_name": "foo", "ownership": "in_tree", "lmcache_driven": "no", "native_ops": "no"},
}
#: An in-tree contribution's imports are regrouped by LMCache's own isort settings (lmcache is first-party
#: there); every other rule applies as to the wheel.
IN_TREE_RUFF = ("--line-length", "120", "--select", "E,F,W,I,B,UP", "--ignore", "B009,I001")
LMCACHE_DRIVEN_MODULES = ("ipc_wrapper.py", "cache_context.py", "event_ipc.py", "pin_memory.py")


def render(session: nox.Session, out: Path, answers: dict[str, str]) -> Path:
    """Render the template with --no-input and ``answers``; return the project directory."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    session.run(
        "cookiecutter", "--no-input", "-o", str(out), str(ROOT),
        *(f"{key}={value}" for key, value in answers.items()),
    )  # fmt: skip
    (project,) = out.iterdir()
    return project


def inspect_wheel(session: nox.Session, wheel: Path, answers: dict[str, str]) -> None:
    """Check the built wheel's entry point and metadata before installing it."""
    device = answers["device_name"]
    prefix = "".join(part.capitalize() for part in device.split("_"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    expected_ep = f"[lmcache.device_plugins]\n{device} = lmcache_{device}.device:{prefix}DeviceSpec"
    problems = []
    if expected_ep not in entry_points:
        problems.append(f"entry_points.txt lacks {expected_ep!r}:\n{entry_points}")
    for line in ("License-Expression: Apache-2.0", "License-File: LICENSE"):
        if line not in metadata.splitlines():
            problems.append(f"METADATA lacks {line!r}")
    requires = [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    lmcache_req = [r for r in requires if r.name == "lmcache"]
    if [r.specifier for r in lmcache_req] != [Requirement(LMCACHE_REQUIREMENT).specifier]:
        problems.append(f"Requires-Dist for lmcache is {[str(r) for r in lmcache_req]}, expected {LMCACHE_REQUIREMENT!r}")
    allowed = [v for v in LMCACHE_RELEASES if Requirement(LMCACHE_REQUIREMENT).specifier.contains(v)]
    if allowed != LMCACHE_RELEASES:
        problems.append(f"{LMCACHE_REQUIREMENT!r} excludes tested releases {sorted(set(LMCACHE_RELEASES) - set(allowed))}")
    for required in (f"lmcache_{device}/py.typed", f"{info}/licenses/LICENSE"):
        if required not in names:
            problems.append(f"wheel lacks {required}")
    emulator = answers.get("emulator", "yes") == "yes"
    if (f"lmcache_{device}/emulator/csrc/host_device.cpp" in names) != emulator:
        problems.append(f"emulator {'missing' if emulator else 'should not be shipped'}")
    lmcache_driven = answers.get("lmcache_driven", "no") != "no"
    for module in LMCACHE_DRIVEN_MODULES:
        if (f"lmcache_{device}/{module}" in names) != lmcache_driven:
            problems.append(f"{module} {'missing' if lmcache_driven else 'should not be rendered'}")
    native = answers.get("native_ops", "no") == "yes"
    has_kernels = any(n.startswith(f"lmcache_{device}/_kernels") and n.endswith(".so") for n in names)
    if has_kernels != native or (f"lmcache_{device}/native_ops.py" in names) != native:
        problems.append(f"native ops {'missing' if native else 'should not be built'}")
    if problems:
        session.error("wheel check failed:\n  " + "\n  ".join(problems))
    session.log(f"wheel OK: {wheel.name} ({len(names)} files), entry point {device} -> {prefix}DeviceSpec")


@nox.session
def tests(session: nox.Session) -> None:
    """The template's own tests: renders, refusals, no leftover syntax, compilable output."""
    session.install(*TEMPLATE_DEPS)
    session.run("pytest", "-p", "no:cacheprovider", str(ROOT / "tests"), *session.posargs)


def install_lmcache(session: nox.Session, release: str, *extra: str) -> None:
    """CPU torch first and pinned (lmcache's own dependency on torch is unpinned), then lmcache ``release``."""
    session.install(TORCH)
    # setuptools and wheel: native variants build without isolation, against this torch.
    session.install(f"lmcache=={release}", *RELEASE_EXTRAS.get(release, []), "build", "mypy", "setuptools>=77", "wheel",
                    *TEMPLATE_DEPS, *extra)  # fmt: skip
    session.run("python", "-c", "from importlib.metadata import version; print('lmcache under test:', version('lmcache'))")
    # Fail here, not in every E2E test, if the release's command line lacks an undeclared dependency.
    session.run("lmcache", "server", "--help", silent=True)


def select(session: nox.Session, variants: dict[str, dict[str, str]]) -> list[str]:
    """The variants named in posargs (all when none are), refusing unknown names."""
    unknown = set(session.posargs) - set(variants)
    if unknown:
        session.error(f"unknown variant(s) {sorted(unknown)}; choose from {sorted(variants)}")
    return [name for name in variants if not session.posargs or name in session.posargs]


class Laps:
    """Wall-clock time per step, printed side by side at the end of a session."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self.clock = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self.clock, 1)
        self.clock = now

    def report(self, session: nox.Session, title: str) -> None:
        session.log(f"{title} timings (s): " + json.dumps(self.timings) + f", total {sum(self.timings.values()):.1f}")


def prove_release(session: nox.Session, release: str) -> None:
    """Install CPU torch and lmcache ``release``, then prove the selected variants one after another."""
    selected = select(session, VARIANTS)
    lap = Laps()
    install_lmcache(session, release)
    lap(f"install torch + lmcache {release}")
    work = Path(session.create_tmp()).resolve()
    for name in selected:
        # The first variant on the newest release runs its suite through the vendor's own noxfile,
        # as its CI workflow calls it: every rendered session must work as shipped.
        vendor_nox = name == next(iter(VARIANTS)) and release == NEWEST
        project = prove_variant(session, work / name, VARIANTS[name], run_suite=not vendor_nox)
        if vendor_nox:
            with session.chdir(project):
                session.run("nox", "--envdir", str(work / "vendor-nox"), "-s", "lint", "typecheck", "build",
                            f"tests({release})", env={"TORCH_REQUIREMENT": TORCH})  # fmt: skip
        lap(name + (f" (its own nox -s lint typecheck build tests({release}))" if vendor_nox else ""))
    lap.report(session, f"lmcache {release}")


@nox.session(reuse_venv=True)
def generate_and_test(session: nox.Session) -> None:
    """Render each foo variant, build its wheel, install it with CPU torch and the newest lmcache, run its suite.

    Posargs select variants by name (default: all): nox -s generate_and_test -- engine-driven
    """
    prove_release(session, NEWEST)


@nox.session(reuse_venv=True)
@nox.parametrize("lmcache", LMCACHE_RELEASES, ids=LMCACHE_RELEASES)
def lmcache_releases(session: nox.Session, lmcache: str) -> None:
    """generate_and_test against each supported lmcache release, each in its own environment.

    nox -s lmcache_releases runs them all; nox -s "lmcache_releases(0.5.4)" one.
    Posargs select variants, as for generate_and_test.
    """
    prove_release(session, lmcache)


def install_variant(session: nox.Session, work: Path, answers: dict[str, str], *, lint: bool = True) -> Path:
    """Render, (lint,) build, inspect and install (never editable) one variant; return the rendered project."""
    session.log(f"=== variant {answers}")
    project = render(session, work / "rendered", answers)
    if lint:
        # The render lives under .nox/, which .gitignore lists: tell ruff to lint it anyway.
        session.run("ruff", "check", "--no-cache", "--no-respect-gitignore", "--show-files", str(project))
        session.run("ruff", "check", "--no-cache", "--no-respect-gitignore", str(project))
        session.run("mypy", "--ignore-missing-imports", "--cache-dir", str(work / "mypy-cache"), str(project / "src"))
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    isolation = ["--no-isolation"] if answers.get("native_ops") == "yes" else []
    session.run("python", "-m", "build", "--wheel", *isolation, "--outdir", str(dist), str(project), silent=True)
    (wheel,) = dist.glob("*.whl")
    inspect_wheel(session, wheel, answers)
    # Resolve the wheel's dependencies honestly, then force this build's files in
    # (every variant has the same name and version). Never editable.
    session.install(f"{wheel}[test]")
    session.install("--force-reinstall", "--no-deps", str(wheel))
    session.run("python", "-m", "pip", "check")
    return project


def prove_variant(session: nox.Session, work: Path, answers: dict[str, str], *, run_suite: bool = True) -> Path:
    """Install one variant and run its conformance suite from an empty directory; return the rendered project."""
    project = install_variant(session, work, answers)
    run_dir = work / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    emulator = answers.get("emulator", "yes") == "yes"
    env = {"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1" if emulator else None}
    with session.chdir(run_dir):  # nothing may resolve to the source tree
        session.run(
            "python", "-c",
            "import lmcache_foo, sysconfig; p = lmcache_foo.__file__; "
            "assert p.startswith(sysconfig.get_paths()['purelib']), p; print('plugin under test:', p)",
            env=env,
        )  # fmt: skip
        if emulator:
            session.run("python", "-c", "import lmcache_foo.emulator, torch; print('torch.foo devices:', torch.foo.device_count())", env=env)
        if run_suite:
            run_suite_counted(session, project / "tests", work / "junit.xml", env, device_present=emulator)
    return project


def run_suite_counted(
    session: nox.Session, tests: Path | list[Path], junit: Path, env: dict[str, str | None], *, device_present: bool,
    pytest: str = "pytest",
) -> None:  # fmt: skip
    """Run a rendered suite; without a device, also require that the device-free tests ran and the rest skipped."""
    paths = [str(path) for path in (tests if isinstance(tests, list) else [tests])]
    session.run(pytest, "-p", "no:cacheprovider", "-ra", "-v", f"--junitxml={junit}", *paths, env=env, external=pytest != "pytest")
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    outcome = {"passed": 0, "skipped": 0}
    for case in cases:
        outcome["skipped" if case.find("skipped") is not None else "passed"] += 1
    session.log(f"{', '.join(paths)}: {outcome['passed']} passed, {outcome['skipped']} skipped")
    if not device_present and (outcome["passed"] == 0 or outcome["skipped"] == 0):
        session.error(f"without a device the suite must run its device-free tests and skip the rest: {outcome}")


def wire_patches(project: Path) -> list[Path]:
    """The rendered in-tree contribution's patches to LMCache's own files (none when engine-driven)."""
    return sorted((project / "patches").glob("*.patch")) if (project / "patches").is_dir() else []


def overlay_in_tree(session: nox.Session, project: Path, root: Path, backend: str) -> None:
    """Apply a rendered in-tree contribution to the LMCache tree under ``root``: its package, then its patches."""
    target = root / "lmcache" / "v1" / "platform" / "devices" / backend
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(project / "lmcache" / "v1" / "platform" / "devices" / backend, target)
    for patch in wire_patches(project):
        session.run("patch", "-p1", "--forward", "--dry-run", "-d", str(root), "-i", str(patch), external=True)
        session.run("patch", "-p1", "--forward", "--quiet", "-d", str(root), "-i", str(patch), external=True)


@nox.session(reuse_venv=True)
def in_tree(session: nox.Session) -> None:
    """Overlay each in-tree rendering onto the newest installed lmcache, apply its wire patch, run its suite.

    Each variant starts from a reinstalled, unpatched lmcache. Posargs select variants by name.
    """
    selected = select(session, IN_TREE_VARIANTS)
    lap = Laps()
    install_lmcache(session, NEWEST, "ninja", "packaging")
    lap(f"install torch + lmcache {NEWEST}")
    work = Path(session.create_tmp()).resolve()
    for name in selected:
        answers = IN_TREE_VARIANTS[name]
        project = render(session, work / name / "rendered", answers)
        backend = answers["device_name"]
        # (ruff and mypy run on every in-tree combination in the matrix session)
        # A pristine lmcache: undo the previous variant's overlay and patch.
        session.install("--force-reinstall", "--no-deps", f"lmcache=={NEWEST}")
        site = Path(session.run("python", "-c", "import lmcache, os; print(os.path.dirname(os.path.dirname(lmcache.__file__)))",
                                silent=True, env={"LMCACHE_DEVICE_BACKEND": None}).strip().splitlines()[-1])  # fmt: skip
        overlay_in_tree(session, project, site, backend)
        run_dir = work / name / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        env = {"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1"}
        with session.chdir(run_dir):
            session.run("python", "-c", f"import lmcache; from lmcache.v1.platform import _DEVICE_REGISTRY as r; "
                        f"s = r[{backend!r}]; print('in-tree spec under test:', type(s).__module__, type(s).__name__)",
                        env=env)  # fmt: skip
            run_suite_counted(session, project / "tests" / "v1" / "platform" / "devices" / backend, work / name / "junit.xml",
                              env, device_present=True)  # fmt: skip
        lap(name)
    # Leave the environment's lmcache as installed.
    session.install("--force-reinstall", "--no-deps", f"lmcache=={NEWEST}")
    lap.report(session, "in-tree")


# ---- option matrix: cheap checks on every combination -----------------------------------------
TRANSFER_IDS = {"no": "engine_driven", "opt_in": "lmcache_driven_opt_in", "default": "lmcache_driven_default"}
#: Combinations the pre-generation hook refuses (tests/test_hooks.py proves each refusal).
REFUSED = {("in_tree", "yes"): "in-tree native ops belong in LMCache's own csrc/ build"}


def matrix_params() -> list[nox.param]:
    """ownership x transfer support x native ops x emulator, minus the refused combinations."""
    params = []
    for ownership in ("wheel", "in_tree"):
        for transfer, transfer_id in TRANSFER_IDS.items():
            for native in ("no", "yes"):
                for emulator in ("yes", "no"):
                    if (ownership, native) in REFUSED:
                        continue
                    name = "-".join((ownership, transfer_id, "native_ops" if native == "yes" else "torch_ops",
                                     "emulator" if emulator == "yes" else "no_emulator"))  # fmt: skip
                    params.append(nox.param(ownership, transfer, native, emulator, id=name))
    return params


#: One environment shared by every matrix session (a venv each would cost more than the checks):
#: the template tools, CPU torch (native builds) and the newest lmcache (the unit suites).
MATRIX_TOOLS = ["cookiecutter>=2.6", "ruff", "mypy", "build", "setuptools>=77", "wheel", "packaging", "pytest>=8", "ninja"]
#: The rendered suite's files that need no server: what the matrix runs for combinations outside the heavy subset.
UNIT_SUITE = ("test_discovery.py", "test_ops_parity.py", "test_lmcache_driven.py", "test_native_ops.py")


def combination(answers: dict[str, str]) -> tuple[str, str, str, str]:
    """(ownership, lmcache_driven, native_ops, emulator) of a variant, with the template's defaults."""
    return (answers.get("ownership", "wheel"), answers.get("lmcache_driven", "no"), answers.get("native_ops", "no"),
            answers.get("emulator", "yes"))  # fmt: skip


#: The heavy subset: combinations whose whole suite, end to end, runs in generate_and_test or in_tree.
HEAVY = {combination(answers): f"generate_and_test -- {name}" for name, answers in VARIANTS.items()} | {
    combination(answers): f"in_tree -- {name}" for name, answers in IN_TREE_VARIANTS.items()
}


def matrix_tools(session: nox.Session) -> Path:
    """Create (once) the shared matrix venv; return its bin directory."""
    venv = ROOT / ".nox" / "_matrix_tools"
    stamp = venv / "installed.json"
    wanted = json.dumps([TORCH, NEWEST, *MATRIX_TOOLS, sys.version])
    if not stamp.exists() or stamp.read_text() != wanted:
        shutil.rmtree(venv, ignore_errors=True)
        session.run(sys.executable, "-m", "venv", str(venv), external=True)
        pip = str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"
        session.run(*pip, TORCH, external=True)
        session.run(*pip, f"lmcache=={NEWEST}", *MATRIX_TOOLS, external=True)
        # lmcache's own ipc_wire.py, to prove each wire patch applies (no install: only the file is needed).
        session.run(str(venv / "bin" / "python"), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "-d", str(venv / "lmcache-wheel"), f"lmcache=={NEWEST}", external=True)  # fmt: skip
        stamp.write_text(wanted)
    return venv / "bin"


@nox.session(venv_backend="none")
@nox.parametrize(("ownership", "lmcache_driven", "native_ops", "emulator"), matrix_params())
def matrix(session: nox.Session, ownership: str, lmcache_driven: str, native_ops: str, emulator: str) -> None:
    """One option combination: render, syntax, compile, ruff, mypy, wheel or wire patch, and its tests.

    Every rendered file must be free of template syntax, Python must compile, TOML and JSON must
    parse; wheels are built and inspected, in-tree wire patches must apply to lmcache's sources.
    The heavy subset (HEAVY: the generate_and_test and in_tree variants) runs its whole suite, end
    to end, in those sessions; every other combination is installed into the shared environment
    (wheel, or in-tree overlay with its patch) and runs its server-free suite files here.
    """
    tools = matrix_tools(session)
    answers = {"device_name": "foo", "ownership": ownership, "lmcache_driven": lmcache_driven,
               "native_ops": native_ops, "emulator": emulator}  # fmt: skip
    work = Path(session.create_tmp()).resolve()
    out = work / "rendered"
    shutil.rmtree(out, ignore_errors=True)
    session.run(str(tools / "cookiecutter"), "--no-input", "-o", str(out), str(ROOT),
                *(f"{k}={v}" for k, v in answers.items()), external=True)  # fmt: skip
    (project,) = out.iterdir()
    check_rendered_text(session, project)
    if ownership == "wheel":
        session.run(str(tools / "ruff"), "check", "--no-cache", "--no-respect-gitignore", str(project), external=True)
        with session.chdir(project):
            session.run(str(tools / "mypy"), "--config-file", "pyproject.toml", "--cache-dir", str(work / "mypy-cache"), "src",
                        external=True)  # fmt: skip
        dist = work / "dist"
        shutil.rmtree(dist, ignore_errors=True)
        isolation = ["--no-isolation"] if native_ops == "yes" else []
        session.run(str(tools / "python"), "-m", "build", "--wheel", *isolation, "--outdir", str(dist), str(project),
                    silent=True, external=True)  # fmt: skip
        (wheel,) = dist.glob("*.whl")
        inspect_wheel(session, wheel, answers)
    else:
        session.run(str(tools / "ruff"), "check", "--no-cache", "--isolated", "--no-respect-gitignore", *IN_TREE_RUFF, str(project),
                    external=True)  # fmt: skip
        patches = wire_patches(project)
        if (lmcache_driven != "no") != bool(patches):
            session.error(f"expected {'a' if lmcache_driven != 'no' else 'no'} wire patch, found {patches}")
        # An LMCache source tree (the released wheel's Python files) with the contribution applied, as a reviewer sees it.
        checkout = work / "lmcache-checkout"
        shutil.rmtree(checkout, ignore_errors=True)
        (wheel,) = (tools.parent / "lmcache-wheel").glob("lmcache-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(checkout, [n for n in archive.namelist() if n.startswith("lmcache/") and n.endswith((".py", ".pyi"))])
        overlay_in_tree(session, project, checkout, "foo")
        with session.chdir(checkout):  # errors in LMCache's own modules are not ours to report
            session.run(str(tools / "mypy"), "--ignore-missing-imports", "--explicit-package-bases", "--follow-imports=silent",
                        "--cache-dir", str(tools.parent / "mypy-cache-in-tree"), "lmcache/v1/platform/devices/foo",
                        external=True)  # fmt: skip
    heavy = HEAVY.get(combination(answers))
    if heavy:
        session.log(f"suite: runs whole, end to end, in nox -s {heavy}")
        return
    # Outside the heavy subset: install this combination into the shared venv and run its server-free suite.
    site = matrix_install(session, tools, project, answers, work)
    tests_dir = project / ("tests" if ownership == "wheel" else "tests/v1/platform/devices/foo")
    run_dir = work / "run"
    run_dir.mkdir(exist_ok=True)
    env = {"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1" if emulator == "yes" else None, "PATH": f"{tools}:{os.environ['PATH']}"}
    with session.chdir(run_dir):
        run_suite_counted(session, [tests_dir / name for name in UNIT_SUITE], work / "junit.xml", env,
                          device_present=emulator == "yes", pytest=str(tools / "pytest"))  # fmt: skip
    session.log(f"suite: server-free files {', '.join(UNIT_SUITE)} against lmcache {NEWEST} in {site}")


def matrix_install(session: nox.Session, tools: Path, project: Path, answers: dict[str, str], work: Path) -> Path:
    """Reset the shared venv's lmcache to as released, then install one combination (wheel, or in-tree overlay)."""
    python = str(tools / "python")
    site = Path(session.run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True,
                            external=True).strip().splitlines()[-1])  # fmt: skip
    session.run(python, "-m", "pip", "uninstall", "--quiet", "--yes", "lmcache-foo-device", external=True)
    shutil.rmtree(site / "lmcache/v1/platform/devices/foo", ignore_errors=True)  # an earlier in-tree combination
    (wheel,) = (tools.parent / "lmcache-wheel").glob("lmcache-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # undo any earlier combination's wire patch
        archive.extract("lmcache/v1/platform/base/ipc_wire.py", site)
    if answers["ownership"] == "wheel":
        (built,) = (work / "dist").glob("*.whl")
        session.run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(built), external=True)
    else:
        overlay_in_tree(session, project, site, "foo")
    return site


LEFTOVER_SYNTAX = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|cookiecutter\.(?!json)")
GITHUB_EXPRESSION = re.compile(r"\$\{\{ [\w.]+ \}\}")


def check_rendered_text(session: nox.Session, project: Path) -> None:
    """No leftover template syntax in any file; every Python file compiles; TOML and JSON parse."""
    problems = []
    for path in sorted(p for p in project.rglob("*") if p.is_file()):
        name = str(path.relative_to(project))
        text = path.read_text()
        if name.endswith(".yml"):
            text = GITHUB_EXPRESSION.sub("", text)
        if match := LEFTOVER_SYNTAX.search(text):
            problems.append(f"{name}: leftover {match.group(0)!r}")
        try:
            if name.endswith(".py"):
                compile(text, name, "exec")
            elif name.endswith(".toml"):
                tomllib.loads(text)
            elif name.endswith(".json"):
                json.loads(text)
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{name}: {exc}")
    if problems:
        session.error("rendered project check failed:\n  " + "\n  ".join(problems))
    session.log(f"rendered text OK: {project.name}")


@nox.session(default=False, reuse_venv=True)
def bench(session: nox.Session) -> None:
    """Op-level and end-to-end KV transfer figures for native foo, baseline foo and LMCache's CPU path.

    Prints a table, writes bench-results/bench.json and bench.png, and checks the
    targets. Not a test: numbers depend on the machine; ratios are measured side
    by side in one run. Posargs go to benchmarks/transfer_bench.py (e.g. --reps 9).
    """
    session.install(TORCH)
    session.install(f"lmcache=={NEWEST}", "build", "setuptools>=77", "wheel", "matplotlib", *TEMPLATE_DEPS)
    work = Path(session.create_tmp()).resolve()
    answers = {"device_name": "foo", "lmcache_driven": "default", "native_ops": "yes"}
    project = install_variant(session, work / "native", answers, lint=False)
    out = ROOT / "bench-results"
    with session.chdir(work):
        session.run(
            "python", str(ROOT / "benchmarks" / "transfer_bench.py"), "--project", str(project), "--out", str(out),
            *session.posargs, env={"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1"},
        )  # fmt: skip


@nox.session(default=False, reuse_venv=True)
def soak(session: nox.Session) -> None:
    """1,000 store/lookup/retrieve cycles per transfer path of the LMCache-driven foo through real servers.

    Not a test: prints mismatches, RSS growth after warm-up, leaked descriptors and
    shared memory per path, and fails when a target is missed. Posargs go to the
    rendered tests/soak.py (e.g. --cycles 200).
    """
    session.install(TORCH)
    session.install(f"lmcache=={NEWEST}", *RELEASE_EXTRAS.get(NEWEST, []), "build", "setuptools>=77", "wheel",
                    *TEMPLATE_DEPS)  # fmt: skip
    work = Path(session.create_tmp()).resolve()
    answers = {"device_name": "foo", "lmcache_driven": "default", "native_ops": "no"}
    project = install_variant(session, work / "soak", answers, lint=False)
    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    with session.chdir(work):
        session.run("python", str(project / "tests" / "soak.py"), "--json", str(out / "soak.json"), *session.posargs,
                    env={"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1"})  # fmt: skip


if __name__ == "__main__":
    sys.exit('run with: nox -s tests generate_and_test in_tree matrix "lmcache_releases(0.5.4)"')
