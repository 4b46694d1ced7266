# SPDX-License-Identifier: Apache-2.0
"""Give the post-generation hook ``template_source(cookiecutter)``: where this render's template came from, which
the hook writes into a wheel render as ``.template.json``, the file its sessions take the kit from when the package
index does not have it yet (``kit_source.py``, the kit's ``lmcache_device_kit/kit_source.py``).

What is recorded: cookiecutter's ``_template`` as the vendor typed it; for a template cookiecutter cloned (a git URL,
``gh:``, ``gl:``, ``bb:``), the URL of its clone and the commit it rendered from; for a local directory, its absolute
path. A zip or a Mercurial template records ``_template`` alone: the kit then comes from ``LMCACHE_DEVICE_KIT`` or
the index.

Why here, in cookiecutter's own process (a Jinja extension listed in ``_extensions``) and not in the hook script:
the hook runs in the new project's directory, where a relative template path means nothing, and only cookiecutter
knows the checkout it rendered from (``_repo_dir``: its clone of a git template, or the template directory).
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Mapping
from pathlib import Path

from jinja2 import Environment
from jinja2.ext import Extension

from hooks.manifest import KIT_SOURCE


def record_file() -> str:
    """The file a wheel render records it in: ``RECORD`` of the kit's ``kit_source`` (which reads it there)."""
    spec = importlib.util.spec_from_file_location("lmcache_device_kit_source", KIT_SOURCE[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.RECORD)


def git(checkout: Path, *args: str) -> str:
    """What ``git -C checkout args`` prints, stripped; empty when it fails (not a git checkout, no git)."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def template_source(answers: Mapping[str, object]) -> dict[str, str]:
    """Where the template of ``answers`` (cookiecutter's context) came from (the module's docstring says what).

    cookiecutter renders from the template as given when it is a local directory (``_repo_dir`` is then
    ``_template`` itself, perhaps relative to where cookiecutter was started), from its clone otherwise, and it
    renders the hook in that checkout (its working directory then), which a relative ``_repo_dir`` names."""
    template = str(answers.get("_template") or "")
    given = Path(str(answers.get("_repo_dir") or "."))
    checkout = given if given.is_absolute() else Path.cwd()  # relative: where the hook renders
    record = {"template": template}
    if template.endswith(".zip"):
        return record
    if str(answers.get("_repo_dir")) == template:  # a local directory, not a clone
        record["directory"] = str(checkout.resolve())
        return record
    url, commit = git(checkout, "remote", "get-url", "origin"), git(checkout, "rev-parse", "HEAD")
    if url and commit:
        record |= {"url": url, "commit": commit}
    return record


class TemplateSource(Extension):
    """Jinja globals ``template_source(cookiecutter)`` and ``template_record`` (the file name) for the hook."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["template_source"] = template_source
        environment.globals["template_record"] = record_file()
