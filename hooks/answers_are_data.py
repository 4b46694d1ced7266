# SPDX-License-Identifier: Apache-2.0
"""Refuse answers that carry Jinja syntax, before cookiecutter renders them.

Why this exists: cookiecutter renders every answer given with ``--no-input``,
``--config-file`` or on the command line as a Jinja template, in an unsandboxed
environment, before any hook runs. ``author_name={{ 7*7 }}`` becomes ``49``, and
an answer such as ``{{ cycler.__init__.__globals__.os.system(...) }}`` runs a
command. Answers must be data, so this Jinja extension (listed in
``_extensions``) looks at every string cookiecutter renders without a file name
and refuses one that contains Jinja syntax unless it is text of this template
(a ``cookiecutter.json`` value, a file or directory name, a hook script).
Nothing has been written at that point.

Interactive answers are not rendered by cookiecutter; they reach the files as
typed, as data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from cookiecutter.exceptions import FailedHookException
from jinja2 import Environment
from jinja2.ext import Extension

TEMPLATE_ROOT = Path(__file__).resolve().parent.parent
JINJA_SYNTAX = re.compile(r"\{\{|\{%|\{#")


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def template_texts(root: Path = TEMPLATE_ROOT) -> tuple[set[str], set[str]]:
    """(whole strings of this template that cookiecutter renders, path components of its files)."""
    whole = set(_strings(json.loads((root / "cookiecutter.json").read_text(encoding="utf-8"))))
    whole |= {path.read_text(encoding="utf-8") for path in (root / "hooks").glob("*_gen_project.py")}
    project = root / "{{cookiecutter.project_slug}}"
    parts = {project.name} | {part for path in project.rglob("*") for part in path.relative_to(project).parts}
    return whole, parts


class AnswersAreData(Extension):
    """Runs before the other extensions' preprocessing, on every string rendered without a file name."""

    priority = 10

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.whole, self.parts = template_texts()

    def is_template_text(self, source: str) -> bool:
        if source in self.whole:
            return True
        return all(part in self.parts or not JINJA_SYNTAX.search(part) for part in source.split("/"))

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if name is None and JINJA_SYNTAX.search(source) and not self.is_template_text(source):
            raise FailedHookException(
                f"lmcache-device-template: the answer {source!r} contains Jinja syntax ('{{{{', '{{%' or '{{#'). "
                "Answers are data and are never rendered: type the literal value without these markers. "
                "Nothing was written."
            )
        return source
