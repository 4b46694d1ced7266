# SPDX-License-Identifier: Apache-2.0
# From the template: keep it as generated (README.md, "Updating from the template").
"""Where a rendered project takes lmcache-device-kit from, and what it says when
nothing gives it.

Why it exists: a render's tests import their harness from the kit and its wheel
requires the kit's shims, so its sessions install the kit first, and a project fresh
from ``cookiecutter`` must find it without being told, before the kit's release is on
the package index and after. The sources are tried in ``ORDER``; when none gives the
kit, ``Unavailable`` names each one tried and the command that fixes it. The template
copies this module, byte for byte, into every wheel render as ``kit_source.py``,
which its ``noxfile.py`` loads before the kit exists (``install_in``);
``python -m lmcache_device_kit.install --kit-sources`` prints the same plan.

Must not import anything but the standard library (tomli on Python 3.10, which nox
brings, when a pyproject.toml is read): it runs in nox's own interpreter, before the
kit and ``packaging``, and the template's post-generation hook reads ``RECORD`` here.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Protocol
import json
import os
import re
import shlex
import sys

#: The kit's distribution, as a render's test extra pins it.
KIT = "lmcache-device-kit"
#: pip arguments that replace every other source (a checkout's ``kit/`` directory).
ENV_VAR = "LMCACHE_DEVICE_KIT"
#: Where the template's post-generation hook records where the project came from.
RECORD = ".template.json"
#: cruft's record (``cruft create``, ``cruft link``), honoured before ``RECORD``:
#: ``cruft update`` moves its commit.
CRUFT = ".cruft.json"
#: cookiecutter's built-in abbreviations, as pip reads them.
ABBREVIATIONS = {"gh:": "https://github.com/", "gl:": "https://gitlab.com/"}
ABBREVIATIONS["bb:"] = "https://bitbucket.org/"
#: The sources, in the order they are tried (the README's "Where the kit comes from").
ORDER = (
    f"{ENV_VAR}: pip arguments, e.g. a template checkout's kit/ directory",
    "the package index: the version pyproject.toml's test extra pins",
    f"the template this project was rendered from: the commit cruft recorded in "
    f"{CRUFT}, else what the template recorded in {RECORD} (a git URL and its "
    "commit, or a local directory)",
)
#: Runs its arguments and prints their exit code last: nox keeps a command's output,
#: but not its exit code, when every code counts as success.
EXIT_CODE = "import subprocess, sys; print(subprocess.run(sys.argv[1:]).returncode)"
#: Prints the installed kit's version, or an empty line.
INSTALLED = (
    "from importlib import metadata as m\n"
    f"try: print(m.version({KIT!r}))\n"
    "except m.PackageNotFoundError: print()"
)
#: A pinned requirement: ``name[extras]==version``.
PIN = re.compile(r"^\s*([A-Za-z0-9._-]+)\s*(\[[^\]]*\])?\s*==\s*([^\s;]+)\s*$")


class Source(NamedTuple):
    """One place the kit may come from: its pip arguments (none: nothing to try,
    ``absent`` says why)."""

    name: str
    arguments: tuple[str, ...]
    absent: str = ""


class Template(NamedTuple):
    """The template a project was rendered from, as pip reads it."""

    record: str  # the file that says so
    location: str  # a git URL, or a directory
    commit: str  # empty for a directory


class Unavailable(Exception):
    """No source gave the kit; the message names each and the fix."""


class Session(Protocol):
    """What ``install_in`` uses of a ``nox.Session`` (this module imports no nox)."""

    name: str
    venv_backend: str

    def run(self, *args: str, **kwargs: Any) -> Any: ...
    def run_install(self, *args: str, **kwargs: Any) -> Any: ...
    def log(self, *args: Any) -> None: ...
    def error(self, *args: Any) -> Any: ...


def pinned(project: Path) -> tuple[str, str, str]:
    """The kit as the project's test extra pins it: (requirement, extras, version)."""
    # Imported here, not at the top: the template's hook reads RECORD without tomli.
    if sys.version_info >= (3, 11):
        # Standard
        import tomllib
    else:  # pragma: no cover - Python 3.10
        # Third Party
        import tomli as tomllib
    if not (project / "pyproject.toml").is_file():
        raise Unavailable(
            f"{project} has no pyproject.toml: run this in a project rendered from "
            "lmcache-device-template"
        )
    text = (project / "pyproject.toml").read_text()
    extra = tomllib.loads(text)["project"]["optional-dependencies"]["test"]
    for requirement in extra:
        found = PIN.match(requirement)
        if found and found.group(1).replace("_", "-").lower() == KIT:
            return requirement, found.group(2) or "", found.group(3)
    raise Unavailable(
        f"pyproject.toml's test extra pins no {KIT}==X.Y.Z: restore the line the "
        f'template rendered ("{KIT}[test]==<version>")'
    )


def git_url(template: str) -> str:
    """``template`` as a git URL pip can clone: cookiecutter's abbreviations
    expanded, ``git@host:path`` as ``ssh://``, ``git+`` dropped."""
    for short, base in ABBREVIATIONS.items():
        if template.startswith(short):
            return base + template.removeprefix(short)
    template = template.removeprefix("git+")
    scp = re.fullmatch(r"([\w.-]+@[\w.-]+):(?!//)(.+)", template)
    return f"ssh://{scp.group(1)}/{scp.group(2)}" if scp else template


def template(project: Path) -> Template | None:
    """The recorded template: cruft's record first, then the post-generation
    hook's."""
    cruft = project / CRUFT
    if cruft.is_file():
        record = json.loads(cruft.read_text())
        location = str(record["template"])
        if Path(location).is_dir():
            location = Path(location).resolve().as_uri()
        return Template(CRUFT, git_url(location), str(record["commit"]))
    path = project / RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("directory"):
        return Template(RECORD, str(record["directory"]), "")
    if record.get("url") and record.get("commit"):
        return Template(RECORD, git_url(str(record["url"])), str(record["commit"]))
    return None


def template_requirement(found: Template, extras: str) -> str:
    """The kit of ``found``'s ``kit/`` directory, as a pip requirement."""
    if not found.commit:
        return f"{KIT}{extras} @ {(Path(found.location) / 'kit').as_uri()}"
    return f"{KIT}{extras} @ git+{found.location}@{found.commit}#subdirectory=kit"


def sources(project: Path, environ: Mapping[str, str]) -> list[Source]:
    """Every source, in ``ORDER``, with the pip arguments it gives for ``project``."""
    given = tuple(environ.get(ENV_VAR, "").split())
    requirement, extras, _ = pinned(project)
    found = template(project)
    recorded = f"nothing recorded: no {CRUFT}, no {RECORD} with a URL or directory"
    return [
        Source(ENV_VAR, given, "" if given else "not set"),
        Source("the package index", (requirement,)),
        Source(
            f"the template ({found.record})" if found else "the template",
            (template_requirement(found, extras),) if found else (),
            "" if found else recorded,
        ),
    ]


def pip_command(source: Source) -> str:
    """The ``pip install`` command of ``source``, as a shell reads it."""
    return f"pip install {shlex.join(source.arguments)}"


def reason(output: str) -> str:
    """What went wrong, in a line of pip's output: git's own error first (a clone
    that failed), else pip's last error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith("fatal:")]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (fatal[:1] or errors[-1:] or lines[-1:] or ["pip said nothing"])[0]


def install(
    project: Path,
    environ: Mapping[str, str],
    pip: Callable[[tuple[str, ...]], tuple[int, str]],
    installed: Callable[[], str],
    command: str,
) -> str:
    """Install the kit from the first source that gives it; which one, in words.

    ``pip(arguments)`` runs ``pip install`` and returns its exit code and output,
    ``installed()`` the kit's installed version (empty: none). A kit already at the
    pinned version stays, unless ``LMCACHE_DEVICE_KIT`` names one; that source, once
    given, is final. ``command``: what the fix runs again (``nox -s "tests(X)"``).
    """
    version = pinned(project)[2]
    every = sources(project, environ)
    if not every[0].arguments and installed() == version:
        return f"{KIT} {version}: installed already"
    tried: list[tuple[Source, str]] = []
    for source in every:
        if not source.arguments:
            tried.append((source, source.absent))
            continue
        code, output = pip(source.arguments)
        if code == 0:
            return f"{KIT} from {source.name}: {pip_command(source)}"
        tried.append((source, reason(output)))
        if source.name == ENV_VAR:
            break
    raise Unavailable(unavailable(project, tried, command))


def install_in(session: Session, project: Path) -> None:
    """``install`` into a nox session's environment (pip, or uv where nox makes its
    environments with uv), saying which source gave the kit; none: the session
    fails with ``Unavailable``'s message. Honours ``nox --no-install``."""
    uv = session.venv_backend == "uv"
    installer = ("uv", "pip", "install") if uv else ("python", "-m", "pip", "install")

    def pip(arguments: tuple[str, ...]) -> tuple[int, str]:
        session.log(f"pip install {shlex.join(arguments)}")
        ran = session.run_install(
            "python", "-c", EXIT_CODE, *installer, *arguments, silent=True, log=False
        )
        *output, code = (str(ran or "").rstrip() or "0").splitlines()
        return int(code), "\n".join(output)

    def installed() -> str:
        said = str(session.run("python", "-c", INSTALLED, silent=True, log=False))
        return said.strip().splitlines()[-1] if said.strip() else ""

    command = f'nox -s "{session.name}"'
    try:
        session.log(install(project, os.environ, pip, installed, command))
    except Unavailable as nothing:
        session.error(str(nothing))


def unavailable(project: Path, tried: list[tuple[Source, str]], command: str) -> str:
    """The message for a kit no source gave: each source tried and why it gave
    nothing, then the commands that fix it."""
    version = pinned(project)[2]
    lines = [
        f"{KIT}=={version} (the tests' harness, the shims the wheel requires) could "
        "not be installed; tried, in order:"
    ]
    for number, (source, why) in enumerate(tried, 1):
        lines.append(f"  {number}. {source.name}: {why}")
        if source.arguments:
            lines.append(f"     ({pip_command(source)})")
    found = template(project)
    checkout = "lmcache-device-template"
    if found and found.commit:
        clone = f"git clone {found.location} {checkout}"
        lines += [
            "Fix: install it from a checkout of the template at the recorded commit:",
            f"  {clone} && git -C {checkout} checkout {found.commit}",
            f'  {ENV_VAR}="$PWD/{checkout}/kit" {command}',
        ]
    else:
        where = found.location if found else f"<a checkout of {checkout}>"
        lines += [
            "Fix: install it from the template's kit/ directory:",
            f'  {ENV_VAR}="{where}/kit" {command}',
        ]
    lines.append(
        f"or from an index that has it: PIP_EXTRA_INDEX_URL=<that index> {command} "
        '(README.md, "Where the kit comes from")'
    )
    return "\n".join(lines)


def describe(project: Path, environ: Mapping[str, str]) -> str:
    """The plan for ``project``: each source in order, with its pip arguments."""
    lines = [f"{KIT} comes from the first of:"]
    for number, source in enumerate(sources(project, environ), 1):
        given = pip_command(source) if source.arguments else source.absent
        lines.append(f"  {number}. {source.name}: {given}")
    return "\n".join(lines)


if __name__ == "__main__":  # in a render: python kit_source.py
    try:
        print(describe(Path(__file__).resolve().parent, os.environ))
    except Unavailable as nothing:
        sys.exit(str(nothing))
