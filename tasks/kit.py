# SPDX-License-Identifier: Apache-2.0
"""The kit (``kit/``, the distribution ``lmcache-device-kit``): the checks of its source and its wheel.

Why: a rendered project's tests take their harness from the kit at the version the
project pins; the template's sessions build the kit from this repository with a PEP 517
frontend, check its wheel here, and install it before a render's wheel
(``tasks.project.install_kit``), so the render's pin resolves to this very source.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from tasks.checks import MAX_LINES, import_circles, package_imports
from tasks.kit_source import KIT, KIT_DISTRIBUTION, kit_version, read_wheel

KIT_PACKAGE = "lmcache_device_kit"


def kit_structure_problems(root: Path = KIT) -> list[str]:
    """Import circles in the kit's package and modules longer than a screen."""
    package_dir = root / "src" / KIT_PACKAGE
    problems = [
        f"import circle: {' -> '.join(circle)}"
        for circle in import_circles(package_imports(package_dir, KIT_PACKAGE))
    ]
    for path in sorted(package_dir.rglob("*.py")):
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            problems.append(f"{path.relative_to(root)}: {lines} lines (at most {MAX_LINES})")
    return problems


def kit_wheel_problems(wheel: Path, root: Path = KIT) -> list[str]:
    """What is wrong with the kit's wheel: its name and version, its modules and data files, its console
    scripts, py.typed, no tests."""
    names, _, entry_points, metadata = read_wheel(wheel)
    problems = []
    for line in (f"Name: {KIT_DISTRIBUTION}", f"Version: {kit_version(root)}"):
        if line not in metadata:
            problems.append(f"METADATA lacks {line!r}")
    package = root / "src" / KIT_PACKAGE  # its modules and its data (py.typed, the contract's TOML)
    shipped = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    sources = {str(p.relative_to(root / "src")) for p in shipped}
    missing = sorted(sources - set(names))
    if missing:
        problems.append(f"the kit's wheel lacks {', '.join(missing[:4])}")
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"].get("scripts", {})
    for name, target in scripts.items():
        if f"{name} = {target}" not in entry_points:
            problems.append(f"the kit's entry_points.txt lacks the console script {name} = {target}")
    if f"{KIT_PACKAGE}/py.typed" not in names:
        problems.append(f"the kit's wheel lacks {KIT_PACKAGE}/py.typed")
    if any(name.startswith("tests/") for name in names):
        problems.append("the kit's wheel ships its tests")
    return problems
