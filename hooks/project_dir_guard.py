# SPDX-License-Identifier: Apache-2.0
"""Refuse a project_slug that is not one directory name, before cookiecutter creates anything.

Why this is not in pre_gen_project.py: cookiecutter creates the project
directory from ``{{cookiecutter.project_slug}}`` *before* that hook runs, and
on a refused render deletes only that directory. A slug containing ``/`` (typed,
or inherited from a device_name containing one) would leave its parent
directories behind. This Jinja extension (listed in ``_extensions``) checks the
rendered directory name as it is rendered, so a bad slug stops the render
before any directory exists. The full validation stays in pre_gen_project.py.
"""

from __future__ import annotations

import re

from cookiecutter.exceptions import FailedHookException
from jinja2 import Environment
from jinja2.ext import Extension

PROJECT_DIR_TEMPLATE = "{{cookiecutter.project_slug}}"
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def single_directory_name(value: str) -> str:
    if not SAFE_NAME.match(value) or ".." in value:
        raise FailedHookException(
            f"lmcache-device-template: project_slug={value!r} must be one directory name of "
            "letters, digits, '-', '_' or '.', for example 'lmcache-acme-device' (device_name, "
            "from which it is derived by default, must be a lowercase Python identifier). "
            "Nothing was written."
        )
    return value


class ProjectDirGuard(Extension):
    """Route the project directory's name through ``single_directory_name``."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.filters["single_directory_name"] = single_directory_name

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if name is None and source.strip() == PROJECT_DIR_TEMPLATE:
            return "{{ cookiecutter.project_slug | single_directory_name }}"
        return source
