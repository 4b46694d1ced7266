# SPDX-License-Identifier: Apache-2.0
"""The porting ladder agrees in its three places: the kit's steps (``doctor --port``), the rendered README's table,
and the ``TODO(vendor)`` markers of the render's sources."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from conftest import TEMPLATE

from tasks.variants import OPTIONS

LADDER = TEMPLATE / "kit" / "src" / "lmcache_device_kit" / "doctor" / "ladder"
#: A marker is ``TODO(vendor):``; ``the TODO(vendor) of ...`` refers to one.
MARKER = "TODO(vendor):"


def ladder() -> ModuleType:
    """The kit's ladder package, loaded by path: it imports only the standard library and its own modules."""
    spec = importlib.util.spec_from_file_location("kit_ladder", LADDER / "__init__.py",
                                                  submodule_search_locations=[str(LADDER)])  # fmt: skip
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def python_site(path: Path, relative: str, line: int) -> str:
    """``file:Qual.name`` of the innermost function or class holding ``line``; for a comment above a module-level
    assignment, that constant; else the module (``file``)."""
    tree = ast.parse(path.read_text())
    names: list[str] = []
    body: list[ast.stmt] = tree.body
    while True:
        inner = [n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.lineno <= line <= n.end_lineno]
        if not inner:
            break
        names.append(inner[0].name)
        body = inner[0].body
    if not names:
        following = [n for n in tree.body if n.lineno > line]
        text = path.read_text().splitlines()[line - 1].strip()
        if text.startswith("#") and following and isinstance(following[0], (ast.Assign, ast.AnnAssign)):
            target = following[0].targets[0] if isinstance(following[0], ast.Assign) else following[0].target
            names.append(target.id)  # type: ignore[attr-defined]
    return f"{relative}:{'.'.join(names)}" if names else relative


def cpp_site(path: Path, relative: str, line: int) -> str:
    """``file`` for a marker in the header comment, else ``file:NAME`` of the declaration after it."""
    lines = path.read_text().splitlines()
    code = [i for i, text in enumerate(lines, 1) if text.strip() and not text.lstrip().startswith(("//", "#"))]
    if not code or line < code[0]:
        return relative
    after = next(lines[i - 1] for i in code if i > line)
    found = re.match(r"\s*using (\w+)|\s*\w[\w:<>*& ]* (\w+)\(", after)
    assert found, f"{relative}:{line}: no declaration after the marker: {after!r}"
    return f"{relative}:{found.group(1) or found.group(2)}"


def toml_site(path: Path, relative: str, line: int) -> str:
    """``file:[table]`` of the table a marker sits in, or of the table its comment block heads."""
    lines = path.read_text().splitlines()
    after = next((text for text in lines[line:] if not text.startswith("#")), "")
    header = [text for text in [*lines[:line], after] if re.match(r"\[[\w.\-\"]+\]$", text)]
    return f"{relative}:{header[-1]}" if header else relative


def marker_sites(project: Path, package_name: str = "lmcache_foo") -> dict[str, list[str]]:
    """Each ``TODO(vendor):`` marker of the package's sources, the render's tests and its build files (``setup.py``,
    ``pyproject.toml``), by its site."""
    package = project / "src" / package_name
    roots = [(package, ""), (project / "tests", "tests/")]
    paths = [(path, prefix + path.name) for root, prefix in roots for path in sorted([*root.glob("*.py"), *root.glob("*.cpp")])]
    paths += [(project / name, name) for name in ("setup.py", "pyproject.toml") if (project / name).exists()]
    sites: dict[str, list[str]] = {}
    for path, relative in paths:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if MARKER in text:
                where = {".py": python_site, ".cpp": cpp_site, ".toml": toml_site}[path.suffix]
                sites.setdefault(where(path, relative, number), []).append(f"{relative}:{number}")
    return sites


def applicable(steps: tuple, project: Path, package_name: str = "lmcache_foo") -> list:
    return [s for s in steps if not s.needs or (project / "src" / package_name / f"{s.needs}.py").exists()]


def readme_rows(project: Path) -> list[list[str]]:
    text = (project / "README.md").read_text()
    table = text.split("## Porting ladder", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return [[cell.strip().replace("`", "") for cell in row.strip("|").split(" | ")] for row in rows]


VARIANTS = [
    {"lmcache_driven": "default", "native_ops": "yes"},
    {"lmcache_driven": "default", "native_ops": "no"},
    {"lmcache_driven": "no", "native_ops": "yes", "emulator": "no"},
    {"lmcache_driven": "no", "native_ops": "no"},
    # A backend that extends LMCache's cuda backend (a CUDA look-alike): its own part of the ladder.
    {"device_name": "cuda", "backend_name": "maca", "lmcache_driven": "default"},
    {"device_name": "cuda", "backend_name": "maca", "lmcache_driven": "no"},
]


@pytest.mark.parametrize("answers", VARIANTS, ids=lambda a: "-".join(f"{k}={v}" for k, v in a.items()))
def test_every_todo_marker_is_a_ladder_step_and_the_readme_lists_the_ladder_in_order(
    render: Callable[..., Path], answers: dict[str, str]
) -> None:
    """Each ``TODO(vendor):`` of a render sits at a site of a ladder step that applies to it; each such step has a
    marker there; and the README's table lists exactly those steps, in the ladder's order, with their sites, the
    runtime call, the tests and the doctor check the kit's data gives (what ``doctor --port`` prints)."""
    assert set(answers) <= set(OPTIONS) | {"device_name", "backend_name"}
    project = render(**answers)
    package, prefix, torch = ("lmcache_maca", "Maca", "torch.cuda") if "backend_name" in answers else (
        "lmcache_foo", "Foo", "torch.foo")  # fmt: skip
    steps = applicable(ladder().STEPS, project, package)
    sites = marker_sites(project, package)
    named = {site.replace("{prefix}", prefix): step.key for step in steps for site in step.sites}
    assert {site: where for site, where in sites.items() if site not in named} == {}, (
        "TODO(vendor) markers on no ladder step: add the site to a step of kit/src/lmcache_device_kit/doctor/ladder/"
    )
    unmarked = [step.key for step in steps if not any(site.replace("{prefix}", prefix) in sites for site in step.sites)]
    assert unmarked == [], "ladder steps with no TODO(vendor) in this render"
    expected = [
        [
            step.title,
            ", ".join(s.replace("{prefix}", prefix) for s in step.sites if s.replace("{prefix}", prefix) in sites),
            step.call.replace("{torch}", torch),
            step.tests,
            step.check,
        ]
        for step in steps
    ]
    assert readme_rows(project) == expected


def test_each_sample_call_sits_at_a_marked_site() -> None:
    """A step's sample calls (what ``doctor --port`` looks for to say "not ported yet") are at marked sites: its own,
    or (the kernels' address translator, passed by the launch) another step's."""
    steps = ladder().STEPS
    everywhere = {site for step in steps for site in step.sites}
    for step in steps:
        assert {site for site, _ in step.sample} <= everywhere, step.key
        assert {site for site, _ in step.sample} <= set(step.sites) or step.key == "kernels", step.key


def test_every_test_class_a_step_names_is_in_a_render(render: Callable[..., Path]) -> None:
    """The tests a step says prove it are classes a render runs (its conformance suite, LMCache's ported tests)."""
    project = render(lmcache_driven="default", native_ops="yes")
    text = "".join((project / "tests" / name).read_text() for name in ("test_conformance.py", "test_lmcache_ports.py"))
    defined = set(re.findall(r"^class (Test\w+)\(", text, re.MULTILINE))
    named = {name for step in ladder().STEPS for name in step.tests.split(", ")}
    assert named - defined == set()
