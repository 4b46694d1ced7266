# SPDX-License-Identifier: Apache-2.0
"""Remove the directories that optional files left empty.

Optional files are chosen by their Jinja file names (a name that renders empty
is not written), so an option that drops every file of a directory (the CI
workflow of an in-tree contribution, the emulator when ``emulator=no``) leaves
that directory behind, empty. This hook removes such directories and nothing
else; it reads no answers.
"""

from __future__ import annotations

import os
from pathlib import Path


def remove_empty_directories(root: Path) -> list[Path]:
    """Delete every empty directory under ``root`` (deepest first); return what was removed."""
    removed = []
    for current, _dirs, _files in sorted(os.walk(root), key=lambda entry: -len(Path(entry[0]).parts)):
        path = Path(current)
        if path != root and not any(path.iterdir()):
            path.rmdir()
            removed.append(path)
    return removed


if __name__ == "__main__":
    remove_empty_directories(Path.cwd())
