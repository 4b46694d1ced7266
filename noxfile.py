# /// script
# dependencies = ["nox>=2024.4.15"]
# ///
# SPDX-License-Identifier: Apache-2.0
"""Automation for lmcache-device-template.

Sessions:
  tests              the template's own tests (render, refuse, compile); fast.
  generate_and_test  render the sample ``foo`` backend in each variant (engine-driven
                     only; LMCache-driven as the default; LMCache-driven opt-in;
                     native ops with LMCache-driven),
                     build its wheel, install it into a fresh environment with real
                     torch (CPU) and the newest supported lmcache, and run the rendered
                     conformance suite, end to end against a real ``lmcache server``
                     on 127.0.0.1.
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
import shutil
import sys
import time
import zipfile
from pathlib import Path

import nox
from packaging.requirements import Requirement

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["tests", "generate_and_test"]
nox.options.reuse_existing_virtualenvs = True

ROOT = Path(__file__).resolve().parent
TORCH = os.environ.get("LMCACHE_TEMPLATE_TORCH", "torch==2.13.0")
TEMPLATE_DEPS = ["cookiecutter>=2.6", "pytest>=8", "ruff", "nox>=2024.4.15"]
_CONTEXT = json.loads((ROOT / "cookiecutter.json").read_text())
#: The LMCache releases the rendered package supports, oldest first (cookiecutter.json).
LMCACHE_RELEASES: list[str] = _CONTEXT["_lmcache_tested"]
LMCACHE_REQUIREMENT: str = _CONTEXT["_lmcache_requirement"]
NEWEST = LMCACHE_RELEASES[-1]
#: Undeclared dependencies a release's ``lmcache`` command line needs (0.5.4's and 0.5.5's import openai).
RELEASE_EXTRAS: dict[str, list[str]] = {"0.5.4": ["openai"], "0.5.5": ["openai"]}
#: The sample backends generate_and_test proves, one after another in one environment.
VARIANTS = {
    "engine-driven": {"device_name": "foo", "lmcache_driven": "no", "native_ops": "no"},
    "lmcache-driven-default": {"device_name": "foo", "lmcache_driven": "default", "native_ops": "no"},
    "lmcache-driven-opt-in": {"device_name": "foo", "lmcache_driven": "opt_in", "native_ops": "no"},
    "native-lmcache-driven": {"device_name": "foo", "lmcache_driven": "default", "native_ops": "yes"},
}
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
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    expected_ep = f"[lmcache.device_plugins]\n{device} = lmcache_{device}.device:{device.capitalize()}DeviceSpec"
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
    for required in (f"lmcache_{device}/py.typed", f"lmcache_{device}/emulator/csrc/host_device.cpp", f"{info}/licenses/LICENSE"):
        if required not in names:
            problems.append(f"wheel lacks {required}")
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
    session.log(f"wheel OK: {wheel.name} ({len(names)} files), entry point {device} -> {device.capitalize()}DeviceSpec")


@nox.session
def tests(session: nox.Session) -> None:
    """The template's own tests: renders, refusals, no leftover syntax, compilable output."""
    session.install(*TEMPLATE_DEPS)
    session.run("pytest", "-p", "no:cacheprovider", str(ROOT / "tests"), *session.posargs)


def prove_release(session: nox.Session, release: str) -> None:
    """Install CPU torch and lmcache ``release``, then prove the selected variants one after another."""
    unknown = set(session.posargs) - set(VARIANTS)
    if unknown:
        session.error(f"unknown variant(s) {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    selected = [name for name in VARIANTS if not session.posargs or name in session.posargs]
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 1)
        clock = now

    # Torch first and pinned: lmcache's own dependency on torch is unpinned.
    session.install(TORCH)
    # setuptools and wheel: native variants build without isolation, against this torch.
    session.install(f"lmcache=={release}", *RELEASE_EXTRAS.get(release, []), "build", "mypy", "setuptools>=77", "wheel", *TEMPLATE_DEPS)
    session.run("python", "-c", "from importlib.metadata import version; print('lmcache under test:', version('lmcache'))")
    # Fail here, not in every E2E test, if the release's command line lacks an undeclared dependency.
    session.run("lmcache", "server", "--help", silent=True)
    lap(f"install torch + lmcache {release}")
    work = Path(session.create_tmp()).resolve()
    for index, name in enumerate(selected):
        project = prove_variant(session, work / name, VARIANTS[name])
        lap(name)
        if index == 0 and release == NEWEST:
            # The vendor's own noxfile, as its CI workflow calls it: every session must work as
            # shipped (own venvs; the conformance suite once more, from the vendor's session).
            with session.chdir(project):
                session.run("nox", "--envdir", str(work / "vendor-nox"), "-s", "lint", "typecheck", "build",
                            f"tests({release})", env={"TORCH_REQUIREMENT": TORCH})  # fmt: skip
            lap(f"{name}: rendered noxfile lint typecheck build tests({release})")
    session.log(f"lmcache {release} timings (s): " + json.dumps(timings) + f", total {sum(timings.values()):.1f}")


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


def prove_variant(session: nox.Session, work: Path, answers: dict[str, str]) -> Path:
    """Install one variant and run its conformance suite from an empty directory; return the rendered project."""
    project = install_variant(session, work, answers)
    run_dir = work / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {"OMP_NUM_THREADS": "1", "LMCACHE_FOO_EMULATOR": "1"}
    with session.chdir(run_dir):  # nothing may resolve to the source tree
        session.run(
            "python", "-c",
            "import lmcache_foo, sysconfig; p = lmcache_foo.__file__; "
            "assert p.startswith(sysconfig.get_paths()['purelib']), p; print('plugin under test:', p)",
            env=env,
        )  # fmt: skip
        session.run("python", "-c", "import lmcache_foo.emulator, torch; print('torch.foo devices:', torch.foo.device_count())", env=env)
        session.run("pytest", "-p", "no:cacheprovider", "-ra", "-v", str(project / "tests"), env=env)
    return project


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
    sys.exit('run with: nox -s tests generate_and_test "lmcache_releases(0.5.4)"')
