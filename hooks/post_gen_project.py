# SPDX-License-Identifier: Apache-2.0
"""Delete what these answers leave out (``hooks/manifest.py``), then the directories left empty; copy in the
kit's files they add; record where the template came from.

Every template file is rendered; the optional parts an answer set does not keep are
listed by the manifest (its Jinja extension renders the list into this script) and
deleted here. Nothing outside the project directory is touched: a listed path that
resolves outside it stops the hook. An in-tree backend then gets its copy of the kit's
run-time LMCache shims (``COPIES``), byte for byte, and a wheel its copy of the kit's
``kit_source.py`` and ``.template.json``: the template's git URL and commit, or its
directory (``hooks/template_source.py``), where its sessions take the kit from until
the package index has it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def remove_empty_directories(root: Path, keep: Callable[[Path], bool] = lambda path: False) -> list[Path]:
    """Delete every empty directory under ``root`` (deepest first) but those ``keep`` names; return what was
    removed."""
    removed = []
    for current, _dirs, _files in sorted(os.walk(root), key=lambda entry: -len(Path(entry[0]).parts)):
        path = Path(current)
        if path != root and not keep(path) and not any(path.iterdir()):
            path.rmdir()
            removed.append(path)
    return removed


def prune(root: Path, dropped: list[str]) -> None:
    """Delete each of ``dropped`` (files or directories, relative to ``root``), then empty directories."""
    paths = [(root / relative).resolve() for relative in dropped]
    for relative, path in zip(dropped, paths, strict=True):
        if root.resolve() not in path.parents:  # checked before anything is deleted
            raise SystemExit(f"hooks/manifest.py lists {relative!r}, outside the project: fix the manifest")
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    remove_empty_directories(root)


def copy_in(root: Path, copies: list[tuple[str, str]]) -> None:
    """Copy each ``(source, project-relative destination)``; a destination outside the project stops the hook first."""
    for _, relative in copies:
        if root.resolve() not in (root / relative).resolve().parents:
            raise SystemExit(f"hooks/manifest.py copies to {relative!r}, outside the project: fix the manifest")
    for source, relative in copies:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, root / relative)


def record(root: Path, name: str, source: dict[str, str]) -> None:
    """Write where the template came from (``source``) to ``root / name``, a file the vendor commits."""
    (root / name).write_text(json.dumps(source, indent=2) + "\n")


if __name__ == "__main__":
    prune(Path.cwd(), json.loads(r"""{{ dropped_paths(cookiecutter) | tojson }}"""))
    copy_in(Path.cwd(), json.loads(r"""{{ copied_files(cookiecutter) | tojson }}"""))
    if "{{ cookiecutter.ownership }}" == "wheel":
        record(Path.cwd(), "{{ template_record }}", json.loads(r"""{{ template_source(cookiecutter) | tojson }}"""))
