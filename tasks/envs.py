# SPDX-License-Identifier: Apache-2.0
"""One virtual environment per LMCache release, shared by every session and variant that uses it.

Why: an environment costs about a minute (CPU torch, lmcache and its dependencies),
and every variant of a release needs the same one. ``ReleaseEnv`` creates it once
(``.nox/lmcache-<release>/``), recreates it when what it should hold changes, and
lets sessions install a variant's wheel into it or overlay an in-tree contribution
onto its lmcache, which ``overlaid`` undoes exactly afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

from tasks.kit_source import environment_steps, kit_test_requirements
from tasks.variants import CONTEXT, ROOT

#: The torch installed before anything else (lmcache depends on an unpinned torch, which
#: otherwise pulls a multi-GB CUDA build); vendors point it at their torch. By default the one a
#: native render's wheel pins (cookiecutter.json ``_torch_version``): its ops are built against it.
TORCH = os.environ.get("LMCACHE_TEMPLATE_TORCH", f"torch=={CONTEXT['_torch_version']}")
#: What every variant needs beside torch and lmcache: the template's tools, the builders (native
#: ops build without isolation, against this torch) and the rendered suite's test extra (pytest and
#: pytest-xdist: the kit's own test extra, where they are pinned).
TOOLS = [
    "cookiecutter>=2.6", "ruff", "isort>=6", "mypy", "build", "setuptools>=77", "wheel", "ninja", "packaging",
    *kit_test_requirements(), "nox>=2024.4.15",
]  # fmt: skip


#: Nothing is compiled at install (below); Python writes the bytecode of what is imported, once, unless
#: PYTHONDONTWRITEBYTECODE is set (as on this machine and in CI): then every process compiled torch's and
#: LMCache's modules again (2-3 s of CPU each; the suite starts about eighty). Unset for what runs here.
BYTECODE: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": None}
#: How much of a failed command's log is printed (the whole log stays on disk).
LOG_TAIL = 300


class ReleaseEnv:
    """The environment of one lmcache release: ``.nox/lmcache-<release>/``."""

    def __init__(self, release: str) -> None:
        self.release = release
        self.path = ROOT / ".nox" / f"lmcache-{release}"
        self.bin = self.path / "bin"
        self.python = str(self.bin / "python")

    def torch_dist_info(self) -> Path:
        """The installed torch's ``.dist-info`` directory."""
        (torch,) = self.path.glob("lib/python*/site-packages/torch-*.dist-info")
        return torch

    def torch_version(self) -> str:
        """The installed torch's public version (``2.13.0`` of ``2.13.0+cpu``): what a native render pins."""
        return self.torch_dist_info().name.removesuffix(".dist-info").split("-", 1)[1].split("+")[0]

    def steps(self) -> tuple[list[str], list[str]]:
        """The ``pip install`` arguments of torch, then of lmcache with its command line's undeclared
        dependencies: the kit's order (``lmcache_device_kit.install``, which rendered noxfiles follow too)."""
        (_, torch), (_, lmcache) = environment_steps(TORCH.split(), self.release)
        return torch, lmcache

    def wanted(self) -> list[str]:
        torch, lmcache = self.steps()
        return [sys.version, *torch, *lmcache, *TOOLS]

    def ensure(self, session: nox.Session) -> bool:
        """Create the environment unless it already holds what it should; True when it was (re)created."""
        stamp = self.path / "installed.json"
        wanted = json.dumps(self.wanted())
        if stamp.exists() and stamp.read_text() == wanted:
            session.log(f"reusing {self.path.relative_to(ROOT)} (lmcache {self.release}, {TORCH})")
            return False
        shutil.rmtree(self.path, ignore_errors=True)
        session.run(sys.executable, "-m", "venv", str(self.path), external=True)
        # First, with pip and the machine's pip configuration (where a CPU or vendor torch is found):
        # lmcache's own torch requirement is unpinned.
        # Without compiling its 2,000-odd modules (14 s here): Python compiles the few hundred imported, once.
        # Its output (a machine's index warnings included) goes to a log, printed if the install fails.
        torch, lmcache = self.steps()
        self.run_logged(session, self.path / "torch-install.log", self.python, "-m", "pip", "install", "--no-compile",
                        *torch)  # fmt: skip
        self.install(session, *lmcache, *TOOLS)
        # Fail here, not in every E2E test, if the release's command line lacks an undeclared dependency.
        self.run(session, "lmcache", "server", "--help", silent=True)
        stamp.write_text(wanted)
        return True

    def install(self, session: nox.Session, *requirements: str) -> None:
        """Install from the package index into this environment: with uv when it is installed (beside nox or
        on PATH; it installs lmcache's ~140 dependencies about four times faster), else with pip."""
        uv = Path(sys.executable).with_name("uv")
        uv_command = str(uv) if uv.exists() else shutil.which("uv")
        if uv_command is None:
            self.pip(session, "install", "--quiet", *requirements)
            return
        # No bytecode compiled at install (uv's default): the first import compiles what is imported, once.
        # TLS trusts the platform's certificate store, as pip does here (uv otherwise trusts only its
        # own bundled roots, and an index behind a company CA fails with "UnknownIssuer").
        tls = {name: os.environ.get(name, "1") for name in ("UV_SYSTEM_CERTS", "UV_NATIVE_TLS")}
        session.run(uv_command, "pip", "install", "--quiet", "--python", self.python, *requirements,
                    external=True, env=tls)  # fmt: skip

    def tools(self) -> dict[str, str]:
        """What a command of this environment runs with: its bin/ first on PATH, VIRTUAL_ENV naming it."""
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(self.path)}

    def command(self, name: str) -> str:
        """A command of this environment by name (``python``, ``pytest``, ``lmcache``, ...)."""
        return str(self.bin / name)

    def run(self, session: nox.Session, program: str, *args: str, **kwargs: object) -> str | bool | None:
        """Run ``program`` from this environment (a bare name is looked up in its bin/)."""
        if os.sep not in program:
            program = self.command(program)
        env = {**self.tools(), **BYTECODE}
        env.update(kwargs.pop("env", None) or {})  # type: ignore[call-overload]
        return session.run(program, *args, external=True, env=env, **kwargs)  # type: ignore[arg-type,call-overload]

    def run_logged(self, session: nox.Session, log: Path, program: str, *args: str, **kwargs: object) -> str:
        """``run``, its output (LMCache's log lines, third-party warnings, pytest's report) written to ``log``
        and named, not printed, and returned; when the command fails, its last lines are printed too."""
        log.parent.mkdir(parents=True, exist_ok=True)
        session.log(f"output: {log}")
        with log.open("w") as out:
            try:
                self.run(session, program, *args, stdout=out, stderr=subprocess.STDOUT, **kwargs)
            except nox.command.CommandFailed:
                out.flush()
                tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
                print(f"--- the last {len(tail)} lines of {log} ---", *tail, sep="\n", file=sys.stderr)
                raise
        return log.read_text(errors="replace")

    def pip(self, session: nox.Session, *args: str, **kwargs: object) -> str | bool | None:
        return self.run(session, self.python, "-m", "pip", *args, **kwargs)

    def site_packages(self, session: nox.Session) -> Path:
        out = self.run(
            session, self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
        )
        return Path(str(out).strip().splitlines()[-1])

    def uninstall_plugins(self, session: nox.Session, *distributions: str) -> None:
        """Remove a variant's wheel and emulator, so the next variant (wheel or in-tree) is the only backend of
        its name and runs on the emulator only if it has one."""
        # Twice quiet: "Skipping ... as it is not installed" (a first run) is a warning; errors still show.
        self.pip(session, "uninstall", "--quiet", "--quiet", "--yes", *distributions)

    @contextmanager
    def overlaid(self, session: nox.Session, project: Path, backend: str) -> Iterator[Path]:
        """lmcache with an in-tree contribution applied (its package, then its patches), as in a reviewer's
        checkout; afterwards the package is removed and every patched file restored byte for byte."""
        site = self.site_packages(session)
        with overlay_in_tree(session, project, site, backend):
            yield site


def wire_patches(project: Path) -> list[Path]:
    """The rendered in-tree contribution's patches to LMCache's own files (none when engine-driven)."""
    return sorted((project / "patches").glob("*.patch")) if (project / "patches").is_dir() else []


def patched_files(patch: Path) -> list[str]:
    """The files a unified diff changes (its ``+++ b/...`` lines)."""
    return [line[6:].strip() for line in patch.read_text().splitlines() if line.startswith("+++ b/")]


@contextmanager
def overlay_in_tree(session: nox.Session, project: Path, root: Path, backend: str) -> Iterator[None]:
    """Apply a rendered in-tree contribution to the LMCache tree under ``root``, undone afterwards."""
    relative = Path("lmcache/v1/platform/devices") / backend
    target = root / relative
    if target.exists():
        session.error(f"{target} exists before the overlay: an earlier overlay was not undone")
    saved = {name: (root / name).read_bytes() for patch in wire_patches(project) for name in patched_files(patch)}
    shutil.copytree(project / relative, target)
    try:
        for patch in wire_patches(project):
            session.run("patch", "-p1", "--forward", "--dry-run", "-d", str(root), "-i", str(patch), external=True)
            session.run("patch", "-p1", "--forward", "--quiet", "-d", str(root), "-i", str(patch), external=True)
        yield
    finally:
        shutil.rmtree(target)
        for name, content in saved.items():
            (root / name).write_bytes(content)
