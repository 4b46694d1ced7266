# SPDX-License-Identifier: Apache-2.0
"""Release day, walked as a vendor walks it, against a real package index on 127.0.0.1 (``nox -s release_day``).

Why: everything else runs inside the template's checkout, where the sessions hand the kit over themselves. Here
nothing is handed over: a fresh ``HOME``, fresh pip and uv caches, no ``LMCACHE_DEVICE_KIT``, and every ``pip install``
goes to a pypiserver on 127.0.0.1, which accepts ``twine upload`` and redirects what it does not hold to PyPI (the
real index for everything else). The steps, each of which fails the session when it does not do what it should:

a. the template, committed into a bare git repository, rendered from its URL with plain cookiecutter, which clones
   it as it does ``gh:``: the template README's "Start a new accelerator port" block, run as written (its URL and
   torch filled in, a device name no other test uses);
b. before the kit is published, that block's ``nox -s lint typecheck build "tests(<newest>)"`` passes with the kit
   from the template source the render recorded, and the release check refuses the render's wheel;
c. the kit, built and checked as its release workflow builds it, uploaded with twine; a second render's
   ``nox -s "tests(<newest>)"`` takes the kit from the index;
d. the vendor's release: ``nox -s build``, ``twine check``, the release check, ``twine upload``; then their users:
   a fresh venv with CPU torch, ``pip install <distribution>`` resolves the kit from the index (pip's report), and
   ``lmcache-<name>-doctor`` finds the entry point and LMCache's registration of the backend;
e. an index without the kit and a template source that is gone: ``nox -s "tests(<newest>)"`` fails within 30 s
   with the message that names each source and the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

from tasks.envs import TORCH
from tasks.kit_release import TAG_PREFIX, build_release
from tasks.kit_source import KIT_DISTRIBUTION, kit_version
from tasks.progress import timed
from tasks.readme import bash, runs
from tasks.variants import NEWEST, ROOT

#: A device name no other test renders.
NAME = "relday"
PROJECT = f"lmcache-{NAME}-device"
#: The template README's block the vendor's first commands are in, and what its placeholders stand for here.
FIRST_COMMANDS = "first-commands"
TEMPLATE_PLACEHOLDER, TORCH_PLACEHOLDER = "gh:<org>/lmcache-device-template", "<your torch>"
#: How long a session may take to say that no source gives the kit.
FAIL_FAST_S = 30
#: The message a session gives when no source gives the kit (the kit's kit_source.unavailable), in parts.
UNAVAILABLE = ("could not be installed; tried, in order:", "1. LMCACHE_DEVICE_KIT: not set",
               f"2. the package index: ERROR: No matching distribution found for {KIT_DISTRIBUTION}==",
               "3. the template (.template.json): fatal:",
               f'LMCACHE_DEVICE_KIT="$PWD/lmcache-device-template/kit" nox -s "tests({NEWEST})"')  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def package_index(session: nox.Session, packages: Path, log: Path) -> Iterator[str]:
    """A pypiserver serving ``packages`` on 127.0.0.1, taking uploads without a password and redirecting what it does
    not hold to PyPI; its simple API's URL (its root takes ``twine upload``)."""
    packages.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [str(Path(session.bin) / "pypi-server"), "run", "-p", str(port), "-i", "127.0.0.1", "-a", ".", "-P", ".",
               "--log-file", str(log), "--log-stream", "none", str(packages)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{root}/health", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    session.error(f"the package index did not start ({' '.join(command)}): {log}")
                time.sleep(0.2)
        yield f"{root}/simple/"
    finally:
        server.terminate()
        server.wait(timeout=30)


def template_repository(work: Path) -> str:
    """This checkout's template (what git tracks, and new files it does not ignore), committed into a bare
    repository; its ``file://`` URL."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")  # fmt: skip
    source, bare = work / "template", work / "lmcache-device-template.git"
    shutil.rmtree(source, ignore_errors=True)
    shutil.rmtree(bare, ignore_errors=True)
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    who = ["-c", "user.name=release day", "-c", "user.email=release-day@example.com"]
    for command in (["init", "-q"], ["add", "-A"], [*who, "commit", "-q", "-m", "the template on release day"]):
        subprocess.run(["git", *command], cwd=source, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(bare)], check=True, capture_output=True)
    return bare.as_uri()


class Vendor:
    """A vendor's machine: a fresh HOME (cookiecutter's clones, pip's and uv's caches), this session's tools on
    PATH, every pip install through ``index``, no kit handed over."""

    def __init__(self, session: nox.Session, home: Path, index: str, logs: Path) -> None:
        self.session, self.home, self.logs = session, home, logs
        home.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        drop = ("LMCACHE_DEVICE_KIT", "VIRTUAL_ENV", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "UV_INDEX_URL")
        self.env = {key: value for key, value in os.environ.items() if key not in drop}
        self.env |= {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "PIP_CACHE_DIR": str(home / "pip"),
                     "UV_CACHE_DIR": str(home / "uv"), "PIP_INDEX_URL": index, "TORCH_REQUIREMENT": TORCH,
                     "OMP_NUM_THREADS": "1", "PATH": f"{session.bin}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip

    def run(self, log: str, *command: str | Path, cwd: Path, ok: bool = True) -> tuple[int, str, float]:
        """``command`` in ``cwd``, its output in ``logs/<log>.log``; (exit code, output, seconds). ``ok``: a
        non-zero exit fails the session with the output's tail (else the caller judges it)."""
        path = self.logs / f"{log}.log"
        shown = " ".join(map(str, command)).splitlines()[0]
        self.session.log(f"{log}: {shown} (in {cwd}; output: {path})")
        begun = time.monotonic()
        with path.open("w") as out:
            code = subprocess.run([str(c) for c in command], cwd=cwd, env=self.env, stdout=out,
                                  stderr=subprocess.STDOUT, check=False).returncode  # fmt: skip
        output = path.read_text(errors="replace")
        if ok and code:
            self.session.error(f"{log} exited with {code}; the last lines of {path}:\n" + output[-4000:])
        return code, output, time.monotonic() - begun

    def kit_line(self, output: str) -> str:
        """What the render's session said of where the kit came from (kit_source.install)."""
        lines = [line for line in output.splitlines() if f"nox > {KIT_DISTRIBUTION} " in line]
        return lines[0].split("nox > ", 1)[1] if lines else "(the session said nothing of the kit)"


def first_commands(url: str, work: Path) -> str:
    """The template README's first commands, as written, with this template's URL, this machine's torch and the
    release-day device name."""
    text = runs((ROOT / "README.md").read_text())[FIRST_COMMANDS].text
    assert TEMPLATE_PLACEHOLDER in text and TORCH_PLACEHOLDER in text, text
    text = text.replace(TEMPLATE_PLACEHOLDER, url).replace(TORCH_PLACEHOLDER, TORCH).replace("acme", NAME)
    return f"cd {work}\n{text}"


def installed_kit(project: Path, session_dir: str) -> dict:
    """How pip installed the kit into a render's nox session: its direct_url.json (``{}``: from an index)."""
    (info,) = (project / ".nox" / session_dir).glob("lib/python*/site-packages/lmcache_device_kit-*.dist-info")
    direct = info / "direct_url.json"
    return json.loads(direct.read_text()) if direct.is_file() else {}


def walk(session: nox.Session, work: Path) -> None:
    """The five steps of the module's docstring, each timed."""
    shutil.rmtree(work, ignore_errors=True)
    tests = f"tests-{NEWEST.replace('.', '-')}"
    with timed(session, "release day") as timings, package_index(session, work / "index", work / "index.log") as index:
        vendor = Vendor(session, work / "home", index, work / "logs")
        with timings.step(f'a, b. the README\'s first commands: render from a git URL, "tests({NEWEST})"') as step:
            url = template_repository(work)
            renders = work / "renders"
            renders.mkdir()
            commit = subprocess.run(["git", "ls-remote", url, "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.split()[0]  # fmt: skip
            script = first_commands(url, renders)
            session.log(f"the README's first commands, filled in:\n{script}")
            _, output, _ = vendor.run("a-first-commands", bash(), "-euo", "pipefail", "-c", script, cwd=renders)
            project = renders / PROJECT
            record = json.loads((project / ".template.json").read_text())
            if (record.get("url"), record.get("commit")) != (url, commit):
                session.error(f"{PROJECT}/.template.json records {record}, not {url} at {commit}")
            direct = installed_kit(project, tests)
            if direct.get("vcs_info", {}).get("commit_id") != commit:
                session.error(f"the kit did not come from the template at {commit}: {direct or 'from an index'}")
            step.result = f"rendered at {commit[:12]}; lint typecheck build tests passed; {vendor.kit_line(output)}"
        with timings.step("b. the release check, with no kit on the index") as step:
            (wheel,) = (project / ".nox" / "build" / "tmp" / "dist").glob("*.whl")
            code, said, _ = vendor.run("b-release-check", "nox", "-s", "check_wheels", "--", "--index", index, wheel,
                                       cwd=project, ok=False)  # fmt: skip
            if code == 0 or "Publish the kit there first" not in said:
                session.error(f"the release check let {wheel.name} through with no kit on the index:\n{said[-3000:]}")
            step.result = f"refused {wheel.name}, naming how the kit gets onto the index"
        with timings.step("c. the kit released to the index; a second render takes it from there") as step:
            distributions = build_release(session, work / "kit-dist", tag=f"{TAG_PREFIX}{kit_version()}")
            vendor.run("c-kit-upload", "twine", "upload", "--non-interactive", "--repository-url", index.removesuffix(
                "simple/"), "-u", "release-day", "-p", "release-day", *distributions, cwd=work)  # fmt: skip
            second = work / "second"
            vendor.run("c-render", "cookiecutter", "--no-input", "-o", second, url, f"device_name={NAME}", cwd=work)
            project = second / PROJECT
            _, output, _ = vendor.run("c-tests", "nox", "-s", f"tests({NEWEST})", cwd=project)
            if installed_kit(project, tests):
                session.error(f"the second render's kit did not come from the index: {installed_kit(project, tests)}")
            step.result = f"tests passed; {vendor.kit_line(output)}"
        with timings.step("d. the vendor's release, then their users' pip install") as step:
            release(session, vendor, project, index, work)
            step.result = f"{PROJECT} and the kit from {index}; the doctor reports backend {NAME!r}"
        with timings.step("e. an index without the kit, the template gone: the message") as step:
            with package_index(session, work / "empty-index", work / "empty-index.log") as empty:
                step.result = no_source(session, work, url, empty)


def release(session: nox.Session, vendor: Vendor, project: Path, index: str, work: Path) -> None:
    """``nox -s build``, twine check, the release check, twine upload; a fresh venv with CPU torch, ``pip install``
    the vendor's distribution from the index; the doctor of its users' install."""
    vendor.run("d-build", "nox", "-s", "build", cwd=project)
    (wheel,) = (project / ".nox" / "build" / "tmp" / "dist").glob("*.whl")
    vendor.run("d-twine-check", "twine", "check", "--strict", wheel, cwd=project)
    vendor.run("d-release-check", "nox", "-s", "check_wheels", "--", "--index", index, wheel, cwd=project)
    vendor.run("d-upload", "twine", "upload", "--non-interactive", "--repository-url", index.removesuffix("simple/"),
               "-u", "release-day", "-p", "release-day", wheel, cwd=project)  # fmt: skip
    users = work / "users"
    vendor.run("d-venv", sys.executable, "-m", "venv", users, cwd=work)
    python = users / "bin" / "python"
    vendor.run("d-torch", python, "-m", "pip", "install", *TORCH.split(), cwd=work)
    report = work / "pip-report.json"
    vendor.run("d-install", python, "-m", "pip", "install", "--report", report, PROJECT, cwd=work)
    installed = {item["metadata"]["name"]: item for item in json.loads(report.read_text())["install"]}
    kit = installed.get(KIT_DISTRIBUTION, {})
    direct = [name for name, item in installed.items() if item.get("is_direct")]
    if not kit.get("download_info", {}).get("url", "").startswith(index.removesuffix("simple/")) or direct:
        session.error(f"pip did not take the kit from {index} ({kit.get('download_info')}; direct: {direct})")
    _, said, _ = vendor.run("d-doctor", users / "bin" / f"lmcache-{NAME}-doctor", cwd=work, ok=False)
    for wanted in ("✓ entry point: lmcache.device_plugins: ", f"✓ registered: LMCache registered backend '{NAME}'"):
        if wanted not in said:
            session.error(f"lmcache-{NAME}-doctor did not report {wanted!r}:\n{said[-3000:]}")


def no_source(session: nox.Session, work: Path, url: str, empty: str) -> str:
    """A render whose template repository is gone, on an index without the kit (and a machine that never cached
    it): ``nox -s "tests(<newest>)"`` fails within FAIL_FAST_S with kit_source's message."""
    gone = work / "gone.git"
    subprocess.run(["git", "clone", "-q", "--bare", url, str(gone)], check=True, capture_output=True)
    vendor = Vendor(session, work / "home-e", empty, work / "logs")
    vendor.run("e-render", "cookiecutter", "--no-input", "-o", work / "e", gone.as_uri(), f"device_name={NAME}",
               cwd=work)  # fmt: skip
    shutil.rmtree(gone)
    code, said, seconds = vendor.run("e-tests", "nox", "-s", f"tests({NEWEST})", cwd=work / "e" / PROJECT, ok=False)
    missing = [part for part in UNAVAILABLE if part not in said]
    if code == 0 or missing or seconds > FAIL_FAST_S:
        session.error(f"with no source of the kit, nox -s tests exited {code} in {seconds:.0f} s (at most "
                      f"{FAIL_FAST_S}), its message lacking {missing}:\n{said[-3000:]}")  # fmt: skip
    return f"exit {code} in {seconds:.0f} s, naming each source and the fix"
