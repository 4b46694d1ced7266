# SPDX-License-Identifier: Apache-2.0
"""The kit's release, made once: its sdist and wheel, checked, and the release notes, as the template's
kit-release workflow publishes them (``.github/workflows/kit-release.yml`` runs ``nox -s kit_release -- --tag
kit-vX.Y.Z``; the release-day session builds the kit the same way before uploading it to its index).

Why: a render's wheel requires the kit and its tests pin it, so until the kit is on the package index no vendor can
release a wheel its users can install. A tag that is not the kit's version, a changelog without its section, a
distribution twine or the kit's wheel check refuses: each stops the release before anything is published.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nox

from tasks.kit import kit_wheel_problems
from tasks.kit_source import KIT, kit_version

#: A kit release's tag: ``kit-v`` and the kit's version (the template's own commits are not versioned).
TAG_PREFIX = "kit-v"
CHANGELOG = KIT / "CHANGELOG.md"


def tag_problems(tag: str, version: str) -> list[str]:
    """Why ``tag`` cannot release kit ``version``, with the fix (none: it can)."""
    if tag == f"{TAG_PREFIX}{version}":
        return []
    return [f"the tag {tag!r} is not the kit's version {version} (kit/pyproject.toml): tag {TAG_PREFIX}{version}, "
            f"or set the version the tag names in kit/pyproject.toml and kit/CHANGELOG.md first"]  # fmt: skip


def notes(version: str, changelog: Path = CHANGELOG) -> str:
    """The section of ``changelog`` for ``version`` (its release notes); empty when it has none."""
    found = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## |\Z)", changelog.read_text(), re.M | re.S)
    return found.group(1).strip() if found else ""


def release_problems(tag: str, version: str, changelog: Path = CHANGELOG) -> list[str]:
    """Everything about ``tag`` and the changelog that stops a release of kit ``version``."""
    problems = tag_problems(tag, version)
    if not notes(version, changelog):
        problems.append(f"{changelog.name} has no section '## [{version}]': move what is under Unreleased into one")
    return problems


def build_release(session: nox.Session, out: Path, tag: str | None = None) -> list[Path]:
    """The kit's sdist and wheel in an emptied ``out``, built in isolation with a PEP 517 frontend (as an index
    serves them), checked by ``twine check --strict`` and the kit's wheel check; with ``tag``, the tag and the
    changelog too, before anything is built, and the notes written to ``out.parent / "kit-notes.md"``."""
    version = kit_version()
    if tag is not None:
        problems = release_problems(tag, version)
        if problems:
            session.error("kit release refused:\n  " + "\n  ".join(problems))
    shutil.rmtree(out, ignore_errors=True)
    source = out.with_name(f"{out.name}-source")  # a copy: a build writes its egg-info and build/ into the tree
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(KIT, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"))
    session.run("python", "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(source), silent=True)
    distributions = sorted(out.iterdir())
    session.run("python", "-m", "twine", "check", "--strict", *map(str, distributions), silent=True)
    (wheel,) = out.glob("*.whl")
    problems = kit_wheel_problems(wheel)
    if problems:
        session.error(f"{wheel.name} check failed:\n  " + "\n  ".join(problems))
    if tag is not None:
        (out.parent / "kit-notes.md").write_text(notes(version) + "\n")
    session.log(f"kit release {version}: " + ", ".join(d.name for d in distributions) + " (twine, wheel check: OK)")
    return distributions
