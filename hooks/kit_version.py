# SPDX-License-Identifier: Apache-2.0
"""Give the template's files the kit's version as ``kit_version``, read from ``kit/pyproject.toml``.

Why: a render pins the kit (``lmcache-device-kit``, in ``kit/`` beside this template) at
the version of the template commit it was rendered from; the version is written once,
in the kit's own pyproject.toml, and this Jinja extension (listed in ``_extensions``)
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


class KitVersion(Extension):
    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["kit_version"] = kit_version()
