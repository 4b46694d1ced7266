# SPDX-License-Identifier: Apache-2.0
"""The checks a render and its wheel must pass, defined once: the nox sessions and the template's
tests both call these."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from hooks.answer_rules import tested_releases
from hooks.manifest import PACKAGE, PARTS, kept
from tasks.kit_source import KIT_DISTRIBUTION, compatible_range, kit_version, plugin_wheel_problems, read_wheel

#: Template syntax that must not survive rendering.
LEFTOVER_SYNTAX = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|cookiecutter\.(?!json)")
#: GitHub Actions expressions (``${{ matrix.x }}``, ``${{ vars.X || 'default' }}``) are meant to survive rendering
#: (no brace inside one: a Jinja leftover there is still found).
GITHUB_EXPRESSION = re.compile(r"\$\{\{ [^{}]+? \}\}")
#: Where a render's own sessions run as it ships them, with the tools already on PATH (no environment made,
#: nothing installed): its lint and typecheck are defined once, in its noxfile, and the template runs those.
RENDER_SESSION_OPTIONS = ("--no-venv", "--no-install", "--no-color")
#: ... writing nothing into the render (no ruff cache, no bytecode of its noxfile; mypy's cache goes where
#: MYPY_CACHE_DIR says).
RENDER_SESSION_ENV = {"RUFF_NO_CACHE": "true", "PYTHONDONTWRITEBYTECODE": "1"}


def render_sessions(project: Path, *sessions: str, nox: str = "nox") -> list[str]:
    """The command that runs a wheel render's own nox ``sessions`` (``lint``, ``typecheck``) as it ships them,
    in the environment the command runs in (``RENDER_SESSION_OPTIONS``; its environment: ``RENDER_SESSION_ENV``)."""
    return [nox, *RENDER_SESSION_OPTIONS, "--noxfile", str(project / "noxfile.py"), "--sessions", *sessions]


#: The most lines a rendered file may have: a vendor reads each on one screen.
MAX_LINES = 300
#: The CPU emulator's package (its own distribution, ``__emulator_dir``): its Python and the C++ it compiles at load.
EMULATOR_FILES = (
    "__init__.py", "_cache.py", "_counters.py", "_device.py", "_ipc.py", "_record.py", "_streams.py", "csrc/counters.cpp",
    "csrc/emulator.h", "csrc/events.cpp", "csrc/faults.cpp", "csrc/guard.cpp", "csrc/host_device.cpp",
    "csrc/host_memory.cpp", "csrc/ipc.cpp", "csrc/kernels.cpp", "csrc/launch.cpp", "csrc/memory.cpp", "csrc/ops.cpp",
    "csrc/streams.cpp",
)  # fmt: skip


def optional_modules(names: set[str] | list[str], package: str, ctx: dict) -> dict[str, tuple[bool, bool]]:
    """``{module: (shipped, expected)}`` for each package module of an optional part (``hooks/manifest.py``): a
    wheel ships it exactly when the render's answers keep its part."""
    return {
        module: (f"{package}/{module}" in names, kept(part, ctx))
        for part in PARTS
        for path in part.paths
        if path.startswith(f"{PACKAGE}/") and (module := path.removeprefix(f"{PACKAGE}/")).endswith((".py", ".typed"))
    }


def context(project: Path) -> dict:
    """A render's answers, derived values included (its ``.cookiecutter.json``)."""
    return json.loads((project / ".cookiecutter.json").read_text())


def files(project: Path) -> set[str]:
    """Every file of a render, relative to it."""
    return {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}


def leftover_syntax(name: str, text: str) -> str | None:
    """The first leftover template marker in a rendered file's text, if any."""
    if name.endswith(".yml"):
        text = GITHUB_EXPRESSION.sub("", text)
    match = LEFTOVER_SYNTAX.search(text)
    return match.group(0) if match else None


def rendered_text_problems(project: Path) -> list[str]:
    """No leftover template syntax in any file; Python compiles; TOML and JSON parse."""
    problems = []
    for name in sorted(files(project)):
        text = (project / name).read_text()
        if marker := leftover_syntax(name, text):
            problems.append(f"{name}: leftover {marker!r}")
        try:
            if name.endswith(".py"):
                compile(text, name, "exec")
            elif name.endswith(".toml"):
                tomllib.loads(text)
            elif name.endswith(".json"):
                json.loads(text)
        except (SyntaxError, ValueError) as exc:
            problems.append(f"{name}: {exc}")
    return problems


def wheel_problems(wheel: Path, project: Path) -> list[str]:
    """What is wrong with a render's wheel: the kit's wheel check (a vendor's ``nox -s build`` runs the same), then
    what holds it to the render's answers: the entry point, the tested lmcache range, the kit's range from this
    template's kit version, which modules ship."""
    ctx = context(project)
    package = ctx["import_package"]
    names, _, entry_points, metadata = read_wheel(wheel)
    problems = plugin_wheel_problems(wheel, project)
    expected = (
        f"[{ctx['_entry_point_group']}]\n{ctx['backend_name']} = {ctx['__spec_module']}:{ctx['class_prefix']}DeviceSpec"
    )
    if expected not in entry_points:
        problems.append(f"entry_points.txt lacks {expected!r}:\n{entry_points}")
    if f"License-Expression: {ctx['license']}" not in metadata:
        problems.append(f"METADATA lacks the chosen licence {ctx['license']!r}")
    requirement = Requirement(ctx["__lmcache_requirement"])
    declared = [Requirement(m.split(":", 1)[1]) for m in metadata if m.startswith("Requires-Dist:")]
    lmcache = [r for r in declared if r.name == "lmcache"]
    if [r.specifier for r in lmcache] != [requirement.specifier]:
        problems.append(f"Requires-Dist for lmcache is {[str(r) for r in lmcache]}, expected {str(requirement)!r}")
    untested = [v for v in tested_releases(ctx) if not requirement.specifier.contains(v)]
    if untested:
        problems.append(f"{requirement} excludes tested releases {untested}")

    torch = [str(r.specifier) for r in declared if r.name == "torch" and r.marker is None]
    pin = [f"=={ctx['_torch_version']}"] if ctx["native_ops"] == "yes" else []
    if torch != pin:  # the kit's check holds the pin to the build's; this, to the torch it was built with
        problems.append(f"Requires-Dist for torch is {torch}, expected {pin} (the torch the native ops are built against)")

    kit = [r for r in declared if r.name == KIT_DISTRIBUTION and r.marker is None]
    wanted = f"{KIT_DISTRIBUTION}{compatible_range(kit_version())}"
    if [r.specifier for r in kit] != [Requirement(wanted).specifier]:
        problems.append(f"Requires-Dist for {KIT_DISTRIBUTION} is {[str(r) for r in kit]}, expected {wanted!r}")
    shipped = {
        "native ops": (
            any(n.startswith(f"{package}/_kernels") and n.endswith(".so") for n in names)
            and f"{package}/native_ops.py" in names,
            ctx["native_ops"] == "yes",
        ),
        **optional_modules(names, package, ctx),
    }
    # the emulator's own module names anywhere (the kit's check sees its directories)
    emulator = {name.rsplit("/", 1)[-1] for name in EMULATOR_FILES} - {"__init__.py"}
    misplaced = [n for n in names if n.rsplit("/", 1)[-1] in emulator and "emulator" not in n]
    if misplaced:
        problems.append(f"the production wheel ships emulator files: {', '.join(misplaced[:4])}")
    for what, (present, wanted) in shipped.items():
        if present != wanted:
            problems.append(f"{what}: {'missing' if wanted else 'shipped but not chosen'}")
    return problems


def package_imports(package_dir: Path, package: str) -> dict[str, set[str]]:
    """Each module of the rendered package -> the package's modules it imports.

    Every import counts wherever it stands (in functions and ``TYPE_CHECKING``
    blocks too): a lazy import is still a dependency. Modules are named relative
    to the package (``device``, ``_compat.surface``; ``__init__`` for the package itself).
    """

    def module_name(path: Path) -> str:
        parts = path.relative_to(package_dir).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)

    paths = {path: module_name(path) for path in package_dir.rglob("*.py")}
    modules = set(paths.values())

    def known(dotted: str) -> str | None:
        """The package's module ``dotted`` names, if it is one."""
        if dotted != package and not dotted.startswith(package + "."):
            return None
        relative = dotted.removeprefix(package).lstrip(".") or "__init__"
        return relative if relative in modules else None

    graph: dict[str, set[str]] = {}
    for path, name in paths.items():
        here = package.split(".") + ([] if name == "__init__" else name.split("."))
        if path.name != "__init__.py":
            here = here[:-1]  # a module's relative imports start from its package
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(filter(None, (known(alias.name) for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1]) if node.level else ""
                origin = ".".join(filter(None, [base, node.module or ""])) if node.level else node.module or ""
                submodules = [known(f"{origin}.{alias.name}") for alias in node.names]
                targets.update(filter(None, submodules))
                if not all(submodules) and (found := known(origin)):
                    targets.add(found)
        graph[name] = targets - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a module graph: each strongly connected group of two or more modules, sorted."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(start: str, edges: dict[str, set[str]], out: list[str]) -> None:
        stack = [(start, iter(sorted(edges.get(start, ()))))]
        seen.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                out.append(node)
            elif child not in seen:
                seen.add(child)
                stack.append((child, iter(sorted(edges.get(child, ())))))

    for node in sorted(graph):
        if node not in seen:
            visit(node, graph, order)
    reverse: dict[str, set[str]] = {}
    for node, targets in graph.items():
        for target in targets:
            reverse.setdefault(target, set()).add(node)
    seen.clear()
    circles = []
    for node in reversed(order):
        if node not in seen:
            group: list[str] = []
            visit(node, reverse, group)
            if len(group) > 1:
                circles.append(sorted(group))
    return sorted(circles)


def structure_problems(project: Path) -> list[str]:
    """Import circles in the rendered package, production code that names the emulator, and rendered files
    a vendor cannot read on one screen."""
    ctx = context(project)
    package_dir = project / ctx["__package_dir"]
    problems = [
        f"import circle: {' -> '.join(circle)}"
        for circle in import_circles(package_imports(package_dir, ctx["__package"]))
    ]
    problems += [  # by import or by name (``importlib.import_module``): production code never selects it
        f"{path.relative_to(project)}: production code names the emulator's package"
        for path in sorted(package_dir.rglob("*.py"))
        if ctx["__emulator_package"] in path.read_text()
    ]
    for name in sorted(files(project)):
        if name.endswith((".py", ".cpp", ".h")):
            lines = (project / name).read_text().count("\n")
            if lines > MAX_LINES:
                problems.append(f"{name}: {lines} lines (at most {MAX_LINES})")
    return problems


def emulator_wheel_problems(wheel: Path, project: Path) -> list[str]:
    """What is wrong with the emulator's own wheel: its package files and torch's autoloading entry point."""
    package = context(project)["__emulator_package"]
    names, _, entry_points, _ = read_wheel(wheel)
    problems = [f"emulator wheel lacks {package}/{name}" for name in EMULATOR_FILES if f"{package}/{name}" not in names]
    expected = f"[torch.backends]\n{package} = {package}:autoload"
    if expected not in entry_points:
        problems.append(f"emulator wheel's entry_points.txt lacks {expected!r}:\n{entry_points}")
    return problems
