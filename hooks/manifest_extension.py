# SPDX-License-Identifier: Apache-2.0
"""Give the post-generation hook ``dropped_paths(cookiecutter)``: what an answer set leaves out, and
``copied_files(cookiecutter)``: the kit's files it copies in (``hooks/manifest.py``).

A Jinja extension (listed in ``_extensions``) because cookiecutter renders a hook script with the template's
environment and answers, and nothing else reaches the script: the hook's text holds the rendered list.
"""

from __future__ import annotations

from jinja2 import Environment
from jinja2.ext import Extension

from hooks.manifest import copied_files, dropped_paths


class Manifest(Extension):
    """Jinja globals ``dropped_paths(cookiecutter)`` and ``copied_files(cookiecutter)`` for the post-generation hook."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["dropped_paths"] = lambda answers: dropped_paths(environment, answers)
        environment.globals["copied_files"] = lambda answers: copied_files(environment, answers)
