# SPDX-License-Identifier: Apache-2.0
"""Give the template's files the kit's version as ``kit_version``, read from ``kit/pyproject.toml``, and the
wheel's requirement of it as ``kit_requirement``.

Why: a render's test extra pins the kit (``lmcache-device-kit``, in ``kit/`` beside this template) at the version
of the template commit it was rendered from, and its wheel requires the kit (its LMCache release shims) in a
compatible range from that version: the same minor series, so that several plugins share one environment. The
version is written once, in the kit's own pyproject.toml, and this Jinja extension (listed in ``_extensions``)
reads it from there for every render.
"""

from __future__ import annotations

import re
from pathlib import Path

from jinja2 import Environment
from jinja2.ext import Extension

KIT_PYPROJECT = Path(__file__).resolve().parent.parent / "kit" / "pyproject.toml"
VERSION_LINE = re.compile(r'^version = "([^"]+)"$', re.MULTILINE)


def kit_version(pyproject: Path = KIT_PYPROJECT) -> str:
    """The ``version`` of the kit's ``[project]`` table (the template runs on Python 3.10+: no tomllib)."""
    found = VERSION_LINE.search(pyproject.read_text(encoding="utf-8"))
    if found is None:
        raise RuntimeError(f"{pyproject} declares no version = \"...\" line: the kit needs a static version")
    return found.group(1)


def kit_requirement(version: str) -> str:
    """A plugin wheel's requirement of the kit at ``version``: that release or a later one of its minor series
    (``0.2.0`` -> ``lmcache-device-kit>=0.2.0,<0.3``)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"lmcache-device-kit>={version},<{major}.{minor + 1}"


class KitVersion(Extension):
    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        version = kit_version()
        environment.globals["kit_version"] = version
        environment.globals["kit_requirement"] = kit_requirement(version)
