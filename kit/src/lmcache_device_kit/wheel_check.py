# SPDX-License-Identifier: Apache-2.0
"""The checks a plugin's wheel must pass, read against the project's own
pyproject.toml: ``python -m lmcache_device_kit.wheel_check WHEEL --project DIR``.

Why it exists: a wheel that builds can still be one LMCache never loads or a serving
host cannot install: an entry point missing from ``entry_points.txt``, a dependency
beyond lmcache and the kit outside the extras, the kit (its release shims) missing
or pinned so that two plugins cannot share an environment, an extra that lost its
requirements, no licence, no ``py.typed``, C++ sources or the CPU emulator inside;
a wheel with native ops that does not pin the torch its module is compiled against
(``torch==X``, the same pin the build requires), which another torch would load.
A project's ``nox -s build`` runs this on the wheel it built; the template runs the
same function on every render's wheel, with the checks that hold a render to its
answers on top.

Must not import lmcache, torch or the plugin (it reads files only).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from pathlib import Path
from typing import Any
import argparse
import sys
import zipfile

# Third Party
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    # Standard
    import tomllib
else:  # pragma: no cover - Python 3.10
    # Third Party
    import tomli as tomllib

#: The entry-point group LMCache discovers plugins in.
ENTRY_POINT_GROUP = "lmcache.device_plugins"
#: The kit's distribution: a plugin runs on its release shims (``compat``).
KIT = "lmcache-device-kit"


def read_wheel(wheel: Path) -> tuple[list[str], str, str, list[str]]:
    """A wheel's file names, its ``.dist-info`` directory, its entry_points.txt
    (empty if none), its METADATA lines."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(
            n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA")
        )
        points = f"{info}/entry_points.txt"
        entry_points = archive.read(points).decode() if points in names else ""
        metadata = archive.read(f"{info}/METADATA").decode().splitlines()
    return names, info, entry_points, metadata


def plugin_packages(project: dict[str, Any]) -> list[str]:
    """The import packages the project's LMCache entry points load."""
    entries = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return sorted({value.split(":")[0].split(".")[0] for value in entries.values()})


def entry_point_problems(project: dict[str, Any], entry_points: str) -> list[str]:
    groups = {
        **project.get("entry-points", {}),
        "console_scripts": project.get("scripts", {}),
    }
    problems = []
    if not project.get("entry-points", {}).get(ENTRY_POINT_GROUP):
        problems.append(
            f"pyproject.toml declares no [project.entry-points.{ENTRY_POINT_GROUP!r}]: "
            "LMCache would never find the plugin"
        )
    for group, entries in groups.items():
        for name, value in entries.items():
            if (
                f"[{group}]" not in entry_points
                or f"{name} = {value}" not in entry_points
            ):
                problems.append(f"entry point [{group}] {name} = {value} missing")
    return problems


def requirement_problems(
    project: dict[str, Any], metadata: list[str], native: bool = False
) -> list[str]:
    """The wheel requires lmcache and the kit alone (and, with ``native`` ops, the
    torch they are built for and what they link, each pinned exactly: the vendor's
    torch extension), the kit in a compatible range; every extra of pyproject.toml
    is in its METADATA under that extra."""
    declared = [
        Requirement(line.split(":", 1)[1])
        for line in metadata
        if line.startswith("Requires-Dist:")
    ]
    own = ("lmcache", KIT, "torch") if native else ("lmcache", KIT)
    alone = f"{', '.join(own[:-1])} and {own[-1]}"
    problems = [
        f"the production wheel requires {requirement} ({alone} alone: the rest comes "
        "with extras)"
        for requirement in declared
        if requirement.marker is None
        and requirement.name not in own
        and not (native and str(requirement.specifier).startswith("=="))
    ]
    kit = [r for r in declared if r.marker is None and r.name == KIT]
    if not kit:
        problems.append(
            f"the production wheel does not require {KIT}: the release shims it runs "
            "on (lmcache_device_kit.compat) would be missing where it is installed"
        )
    problems += [problem for r in kit if (problem := kit_range_problem(r))]
    for extra, texts in project.get("optional-dependencies", {}).items():
        for wanted in map(Requirement, texts):
            if not any(
                (r.name, r.specifier) == (wanted.name, wanted.specifier)
                and r.marker is not None
                and r.marker.evaluate({"extra": extra})
                for r in declared
            ):
                problems.append(
                    f"METADATA lacks {str(wanted)!r} under the {extra!r} extra"
                )
            pinned = [s.version for s in wanted.specifier if s.operator == "=="]
            if wanted.name == KIT and kit and pinned:
                if not kit[0].specifier.contains(pinned[0], prereleases=True):
                    problems.append(
                        f"the {extra!r} extra pins {wanted}, outside the wheel's own "
                        f"requirement {kit[0]}"
                    )
    return problems


def torch_pin(requirements: list[Requirement]) -> str | None:
    """The one torch version ``requirements`` pin exactly (``torch==X``), if so."""
    torch = [r for r in requirements if r.name == "torch" and r.marker is None]
    specs = [s for r in torch for s in r.specifier]
    if len(torch) == 1 and len(specs) == 1 and specs[0].operator == "==":
        return None if "*" in specs[0].version else specs[0].version
    return None


def native_torch_problems(
    pyproject: dict[str, Any], metadata: list[str], modules: list[str]
) -> list[str]:
    """A wheel with compiled ``modules`` pins, exactly, the torch they are built for
    (another torch's C++ ABI fails to load them, or crashes), and it is the torch
    the build requires ([build-system] requires: what an isolated build compiles
    against); so is every other exact pin (the vendor's torch extension)."""
    declared = [
        Requirement(line.split(":", 1)[1])
        for line in metadata
        if line.startswith("Requires-Dist:")
    ]
    pinned = torch_pin(declared)
    if pinned is None:
        found = [str(r) for r in declared if r.name == "torch"] or "no torch"
        return [
            f"the wheel ships native ops ({', '.join(modules)}) but requires {found}: "
            "pin the torch they are compiled against, torch==X, in pyproject.toml's "
            "[project] dependencies (and the same in [build-system] requires)"
        ]
    build = pyproject.get("build-system", {}).get("requires", [])
    built = torch_pin([Requirement(r) for r in build])
    if built != pinned:
        return [
            f"the wheel requires torch=={pinned}, but pyproject.toml's [build-system] "
            f"requires {[r for r in build if r.startswith('torch')] or 'no torch'}: "
            f"an isolated build would compile against another torch; require "
            f"torch=={pinned} there too"
        ]
    # Every other exact pin is what the module links too (the vendor's torch
    # extension): an isolated build must compile against the same release.
    built_pins = {r.name: str(r.specifier) for r in map(Requirement, build)}
    return [
        f"the wheel requires {r.name}{r.specifier} (an exact pin: a library its native "
        f"ops link), but pyproject.toml's [build-system] requires "
        f"{r.name}{built_pins.get(r.name, ' nothing')}: an isolated build would "
        f"compile against another release; require {r.name}{r.specifier} there too"
        for r in declared
        if r.name != "torch"
        and r.marker is None
        and str(r.specifier).startswith("==")
        and built_pins.get(r.name) != str(r.specifier)
    ]


def compatible_range(version: str) -> str:
    """The kit's releases a plugin made with kit ``version`` runs on: that one and the
    later ones of its minor series (``0.2.0`` -> ``>=0.2.0,<0.3``)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f">={version},<{major}.{minor + 1}"


def kit_range_problem(requirement: Requirement) -> str:
    """Why the wheel's requirement of the kit is not a compatible range (empty: it
    is): a lower bound and the next minor release as the upper one. A pin (``==``)
    or an open range would stop two plugins sharing an environment, or let a kit
    with other shims in."""
    lower = [s.version for s in requirement.specifier if s.operator == ">="]
    if len(lower) == 1 and len(requirement.specifier) == 2:
        wanted = SpecifierSet(compatible_range(lower[0]))
        if requirement.specifier == wanted:
            return ""
    return (
        f"the production wheel requires {requirement}: require the kit in a "
        f"compatible range, {KIT}>=X.Y.Z,<X.(Y+1) (one minor series), so that "
        "plugins made from other template commits share an environment"
    )


def plugin_wheel_problems(wheel: Path, project_dir: Path) -> list[str]:
    """What is wrong with a plugin's wheel, by its project's pyproject.toml."""
    pyproject = tomllib.loads((project_dir / "pyproject.toml").read_text())
    project = pyproject["project"]
    names, info, entry_points, metadata = read_wheel(wheel)
    packages = plugin_packages(project)
    native = [
        n for n in names if n.split("/")[0] in packages and n.endswith((".so", ".pyd"))
    ]
    problems = entry_point_problems(project, entry_points)
    problems += requirement_problems(project, metadata, native=bool(native))
    if native:
        problems += native_torch_problems(pyproject, metadata, native)
    license_line = f"License-Expression: {project.get('license')}"
    for line in (license_line, "License-File: LICENSE"):
        if line not in metadata:
            problems.append(f"METADATA lacks {line!r}")
    required = [f"{info}/licenses/LICENSE"]
    required += [f"{package}/py.typed" for package in packages]
    problems += [f"wheel lacks {name}" for name in required if name not in names]
    sources = [n for n in names if n.endswith((".cpp", ".h"))]
    if sources:
        problems.append(
            "the wheel ships C++ sources (compiled into its extension; "
            f"exclude them from package data): {', '.join(sources)}"
        )
    emulator = [n for n in names if "emulator" in n.split("/")[0].split(".")[0]]
    emulator += [n for n in names if "/emulator/" in n]
    if emulator:
        problems.append(
            "the production wheel ships emulator files: " + ", ".join(emulator[:4])
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_device_kit.wheel_check", description=__doc__
    )
    parser.add_argument("wheel", type=Path, help="the plugin wheel to check")
    parser.add_argument(
        "--project", type=Path, default=Path.cwd(), help="its project directory"
    )
    args = parser.parse_args(argv)
    problems = plugin_wheel_problems(args.wheel, args.project)
    for problem in problems:
        print(f"wheel check: {problem}", file=sys.stderr)
    if not problems:
        print(f"wheel OK: {args.wheel.name}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
