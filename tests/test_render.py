# SPDX-License-Identifier: Apache-2.0
"""What every successful render guarantees, before anything is built or installed."""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TEMPLATE, run_render_sessions
from cookiecutter.main import cookiecutter

from tasks.checks import (
    EMULATOR_FILES,
    files,
    leftover_syntax,
    structure_problems,
    wheel_problems,
)
from hooks.manifest import KIT_COMPAT, KIT_SOURCE
from tasks.kit_source import kit_version
from tasks.variants import OPTIONS, combination, combination_id, matrix

EXPECTED_FILES = {
    ".cookiecutter.json",
    ".gitattributes",
    ".github/dependabot.yml",
    ".github/workflows/ci.yml",
    ".github/workflows/release.yml",
    ".gitignore",
    ".pre-commit-config.yaml",
    ".template.json",
    "CHANGELOG.md",
    "LICENSE",
    "README.md",
    "kit_source.py",
    "noxfile.py",
    "pyproject.toml",
    "src/lmcache_foo/__init__.py",
    "src/lmcache_foo/_lmcache_compat.py",
    "src/lmcache_foo/device.py",
    "src/lmcache_foo/device_ops.py",
    "src/lmcache_foo/doctor.py",
    "src/lmcache_foo/names.py",
    "src/lmcache_foo/py.typed",
    "emulator/pyproject.toml",
    *(f"emulator/src/lmcache_foo_emulator/{name}" for name in EMULATOR_FILES),
    "tests/conftest.py",
    "tests/test_conformance.py",
    "tests/test_cluster.py",
}
NATIVE_FILES = {
    "setup.py", "src/lmcache_foo/_kernels.cpp", "src/lmcache_foo/_recorders.cpp", "src/lmcache_foo/_native_plan.py",
    "src/lmcache_foo/native_ops.py", "src/lmcache_foo/_host_access.py",
    "tests/test_sample_kernels.py",  # the sample kernels' own tests: with the emulator only (the default)
}  # fmt: skip
LMCACHE_DRIVEN_FILES = {
    f"src/lmcache_foo/{name}.py"
    for name in ("ipc_wrapper", "_ipc_rendezvous", "cache_context", "runtime", "event_ipc", "pin_memory")
}
#: LMCache's per-device tests ported to a plugin (the kit's conformance.ports), subclassed: the contract's devices
#: suite, in wheels with LMCache-driven classes.
PORTED_FILES = {"tests/test_lmcache_ports.py"}
LMCACHE_DRIVEN_FILES |= PORTED_FILES


def pyproject(project: Path) -> dict:
    return tomllib.loads((project / "pyproject.toml").read_text())


def test_default_render_is_the_foo_plugin_with_the_documented_layout(render: Callable[..., Path]) -> None:
    """``cookiecutter --no-input`` renders lmcache-foo-device/ with exactly the expected files."""
    project = render()
    assert project.name == "lmcache-foo-device"
    assert files(project) == EXPECTED_FILES


@pytest.mark.parametrize("choice", ["opt_in", "default"])
def test_lmcache_driven_choice_adds_exactly_the_ipc_modules(render: Callable[..., Path], choice: str) -> None:
    """Asking for LMCache-driven support adds the wrapper, cache context, publish-after-stream, event and pin modules,
    nothing else."""
    assert files(render(lmcache_driven=choice)) == EXPECTED_FILES | LMCACHE_DRIVEN_FILES


def test_native_ops_choice_adds_the_extension_its_build_and_binding(render: Callable[..., Path]) -> None:
    """native_ops=yes adds the C++ kernels, setup.py and native_ops.py, and ensure_native binds them."""
    project = render(native_ops="yes")
    assert files(project) == EXPECTED_FILES | NATIVE_FILES
    assert "self.bind_native(native_ops)" in (project / "src/lmcache_foo/device_ops.py").read_text()
    assert '"torch==' in (project / "pyproject.toml").read_text().split("\n[project]")[0]


@pytest.mark.parametrize(("choice", "default_mode"), [("opt_in", "ENGINE_DRIVEN"), ("default", "LMCACHE_DRIVEN")])
def test_lmcache_driven_choice_sets_what_auto_means(render: Callable[..., Path], choice: str, default_mode: str) -> None:
    """opt_in keeps auto on engine-driven; default makes auto LMCache-driven while it is offered (its probe passes:
    TestDoctorPort runs a runtime where it does not), engine-driven otherwise."""
    device = (render(lmcache_driven=choice) / "src/lmcache_foo/device.py").read_text()
    assert f"return MPTransferMode.{default_mode}" in device
    assert ("if self.is_lmcache_driven_available():\n            return MPTransferMode.LMCACHE_DRIVEN" in device) is (
        choice == "default")  # fmt: skip
    assert "def is_lmcache_driven_available(self) -> bool:" in device
    assert "return not self.lmcache_driven_unproven()" in device


@pytest.mark.parametrize(
    ("choice", "native", "ownership", "emulator"),
    [
        ("no", "no", "wheel", "yes"), ("opt_in", "no", "wheel", "yes"), ("default", "yes", "wheel", "yes"),
        ("no", "yes", "wheel", "no"), ("default", "no", "wheel", "no"),
        ("no", "no", "in_tree", "yes"), ("default", "no", "in_tree", "yes"), ("opt_in", "no", "in_tree", "no"),
        ("no", "no", "wheel", "builtin"), ("default", "no", "wheel", "builtin"),
    ],
)  # fmt: skip
def test_every_render_leaves_no_template_syntax(render: Callable[..., Path], choice: str, native: str, ownership: str, emulator: str) -> None:
    """No rendered file still contains Jinja markers or ``cookiecutter.`` references, whatever the options (emulator
    ``builtin``: a backend that extends LMCache's cuda backend, which has none)."""
    extends = {"device_name": "cuda", "backend_name": "maca"} if emulator == "builtin" else {"emulator": emulator}
    project = render(lmcache_driven=choice, native_ops=native, ownership=ownership, **extends)
    texts = {name: (project / name).read_text() for name in files(project)}
    offenders = {name: marker for name, text in texts.items() if (marker := leftover_syntax(name, text))}
    assert offenders == {}


@pytest.mark.parametrize(
    "answers",
    [
        {},
        {"device_name": "acme_npu", "backend_name": "acme_npu2_v2"},
        {"device_name": "x" * 24, "torch_extension_module": "", "emulator": "no"},
        {"device_name": "tpu_x", "license": "MIT", "class_prefix": "Tpu7X"},
        {"device_name": "gaudi_x", "license": "BSD-3-Clause", "torch_extension_module": "habana.torch_ext"},
        {"device_name": "acme_npu", "lmcache_driven": "default"},
        {"device_name": "tpu_x", "lmcache_driven": "opt_in", "class_prefix": "Tpu7X"},
        {"native_ops": "yes"},
        {"native_ops": "yes", "lmcache_driven": "default"},
        {"device_name": "cuda", "backend_name": "maca", "lmcache_driven": "default"},
    ],
    ids=[
        "default", "underscores-digits-in-backend", "long-name-builtin-torch", "mit", "bsd-dotted-extension",
        "ld-default", "ld-opt-in", "native", "native-ld", "extends-cuda",
    ],  # fmt: skip
)
def test_every_rendered_python_file_compiles(render: Callable[..., Path], answers: dict[str, str]) -> None:
    """Odd but valid names render into Python that compiles."""
    project = render(**answers)
    sources = sorted(project.rglob("*.py"))
    assert len(sources) >= 9  # the smallest render: the package's 6 modules, the noxfile, 2 test modules
    for source in sources:
        compile(source.read_text(), str(source), "exec")


#: Backends that extend a built-in on its device type, as a vendor types them: a CUDA look-alike in each transfer
#: mode, and one on Ascend's device type.
EXTENSION_RENDERS = {
    "extends-cuda": {"device_name": "cuda", "backend_name": "maca"},
    "extends-cuda-ld-default": {"device_name": "cuda", "backend_name": "maca", "lmcache_driven": "default"},
    "extends-cuda-ld-opt-in-long-name": {
        "device_name": "cuda", "backend_name": "acme_tensor_core_unit_xy", "lmcache_driven": "opt_in",
    },
    "extends-npu": {"device_name": "npu", "backend_name": "acme_npu", "license": "MIT"},
}
#: Every wheel combination of the options (tasks/variants.py), one with a custom name and licence, and the backends
#: that extend a built-in.
WHEEL_RENDERS = [dict(zip(OPTIONS, combo, strict=True)) for combo in matrix() if combo[0] == "wheel"] + [
    {"device_name": "acme_npu", "license": "MIT"}, *EXTENSION_RENDERS.values()
]
WHEEL_IDS = [combination_id(combination(a)) for a in WHEEL_RENDERS[: -1 - len(EXTENSION_RENDERS)]]


@pytest.mark.parametrize("answers", WHEEL_RENDERS, ids=[*WHEEL_IDS, "custom", *EXTENSION_RENDERS])
def test_every_wheel_render_is_lint_formatter_and_isort_clean_under_its_own_settings(
    render: Callable[..., Path], answers: dict[str, str]
) -> None:
    """The generated code passes ``ruff check``, ``ruff format --check`` and ``isort --check`` with the settings it
    ships with, LMCache's style (Jinja whitespace control drops or doubles blank lines silently: only the formatter
    sees it)."""
    project = render(**answers)
    rendered = files(project)
    done = run_render_sessions(project, "lint")
    assert done.returncode == 0, f"{done.stdout}{done.stderr}"[-3000:]
    assert files(project) == rendered, "the lint session wrote into the render (a cache, bytecode)"


def test_the_renders_own_lint_session_checks_its_files_wherever_the_project_sits(render: Callable[..., Path]) -> None:
    """Rendered under a directory a repository ignores with ``*`` (as nox does its .nox/, where the template's
    renders sit), the lint session still checks the project: ruff left alone finds no file there and passes."""
    project = render()
    subprocess.run(["git", "init", "--quiet", str(project.parent.parent)], check=True)
    (project.parent / ".gitignore").write_text("*\n")
    names = next(project.glob("src/*/names.py"))
    names.write_text("import os\n" + names.read_text())  # unused, and out of isort's order
    done = run_render_sessions(project, "lint")
    assert done.returncode != 0, f"the lint session passed a planted unused import:\n{done.stdout}{done.stderr}"
    assert "F401" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]


#: Every combination of the options (tasks/variants.py), both ownership models, and the backends that extend a
#: built-in.
ALL_RENDERS = [dict(zip(OPTIONS, combo, strict=True)) for combo in matrix()] + list(EXTENSION_RENDERS.values())
ALL_IDS = [combination_id(combination(a)) for a in ALL_RENDERS[: -len(EXTENSION_RENDERS)]] + list(EXTENSION_RENDERS)


@pytest.mark.parametrize("answers", ALL_RENDERS, ids=ALL_IDS)
def test_every_render_has_no_import_circle_and_no_file_longer_than_a_screen(
    render: Callable[..., Path], answers: dict[str, str]
) -> None:
    """The rendered package's modules import each other one way only (imports inside functions count), and no
    rendered source file is over 300 lines."""
    assert structure_problems(render(**answers)) == []


@pytest.mark.parametrize("member", ["lmcache_foo/emulator/csrc/memory.cpp", "lmcache_foo_emulator/_streams.py"])
def test_the_wheel_check_refuses_a_production_wheel_that_ships_the_emulator(
    render: Callable[..., Path], tmp_path: Path, member: str
) -> None:
    """The emulator is a distribution of its own: a plugin wheel holding any of its files fails the wheel check."""
    project = render()
    wheel = tmp_path / "lmcache_foo_device-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: x\n")
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/entry_points.txt", "")
        archive.writestr("lmcache_foo/device.py", "")
        archive.writestr(member, "")
    assert f"the production wheel ships emulator files: {member}" in wheel_problems(wheel, project)


def test_the_wheel_check_holds_a_wheel_to_the_manifest_parts_its_answers_keep(
    render: Callable[..., Path], tmp_path: Path
) -> None:
    """An engine-driven render's wheel that ships an IPC wrapper, or lacks the spec module, fails the check."""
    project = render(lmcache_driven="no")
    wheel = tmp_path / "lmcache_foo_device-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: x\n")
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/entry_points.txt", "")
        archive.writestr("lmcache_foo/ipc_wrapper.py", "")
    problems = wheel_problems(wheel, project)
    assert "ipc_wrapper.py: shipped but not chosen" in problems and "device.py: missing" in problems


def test_pyproject_declares_the_entry_point_and_requires_exactly_the_tested_lmcache_range(
    render: Callable[..., Path],
) -> None:
    """The entry point is named backend_name and points to the spec; lmcache is >=oldest,<=newest tested release
    (and the kit, in its compatible range: see the doctor's test)."""
    meta = pyproject(render())
    project = meta["project"]
    assert project["entry-points"]["lmcache.device_plugins"] == {"foo": "lmcache_foo.device:FooDeviceSpec"}
    tested = json.loads((TEMPLATE / "cookiecutter.json").read_text())["_lmcache_tested"]
    assert project["dependencies"][0] == f"lmcache>={tested[0]},<={tested[-1]}"
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert meta["tool"]["setuptools"]["packages"]["find"]["where"] == ["src"]


def test_backend_name_is_used_for_the_entry_point_and_the_spec(render: Callable[..., Path]) -> None:
    """A backend name different from the device name reaches both pyproject.toml and the names module."""
    project = render(device_name="acme", backend_name="acme_v2")
    assert pyproject(project)["project"]["entry-points"]["lmcache.device_plugins"] == {
        "acme_v2": "lmcache_acme.device:AcmeDeviceSpec"
    }
    names = (project / "src/lmcache_acme/names.py").read_text()
    assert 'BACKEND_NAME = "acme_v2"' in names and 'DEVICE_TYPE = "acme"' in names


@pytest.mark.parametrize("choice", ["no", "default"])
def test_spec_module_imports_nothing_from_lmcache_but_device_spec(render: Callable[..., Path], choice: str) -> None:
    """device.py and what it imports at load (the binding, and the kit's release shims: all of them) keep LMCache
    imports out of module level, except DeviceSpec and the packages' own first import, ``lmcache`` itself (during
    discovery, the half-imported lmcache: a no-op); of the kit, the binding imports only the shims."""
    project = render(lmcache_driven=choice)
    package = project / "src/lmcache_foo"
    sources = {name: (package / name).read_text() for name in ("device.py", "names.py", "_lmcache_compat.py", "__init__.py")}
    kit_imports = {m for m in module_level_imports(sources["_lmcache_compat.py"]) if m.startswith("lmcache_device_kit")}
    assert kit_imports and all(m.startswith("lmcache_device_kit.compat") for m in kit_imports), kit_imports
    sources |= {f"kit {path.name}": path.read_text() for path in KIT_COMPAT.glob("*.py")}
    for name, source in sources.items():
        lmcache = {m for m in module_level_imports(source) if m == "lmcache" or m.startswith("lmcache.")}
        first = name in ("__init__.py", "kit __init__.py")  # ``import lmcache`` before anything of their own
        allowed = {"lmcache.v1.platform.base.device_spec"} | ({"lmcache"} if first else set())
        assert lmcache <= allowed, name


def module_level_imports(source: str) -> set[str]:
    """The modules a source imports when it loads (``if`` and ``try`` blocks included, function bodies not)."""
    found, pending = set(), list(ast.parse(source).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            pending.extend(node.orelse)  # annotations only
        elif isinstance(node, ast.If | ast.Try):
            pending.extend([*node.body, *node.orelse, *getattr(node, "handlers", []), *getattr(node, "finalbody", [])])
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return found


@pytest.mark.parametrize(
    ("license_id", "marker"),
    [("Apache-2.0", "Apache License"), ("MIT", "MIT License"), ("BSD-3-Clause", "BSD 3-Clause License")],
)
def test_license_choice_renders_its_text_and_spdx_headers(render: Callable[..., Path], license_id: str, marker: str) -> None:
    """The LICENSE text, PEP 639 metadata and every SPDX header agree with the chosen licence, but the kit's own
    module the render carries a copy of (kit_source.py), which keeps the kit's."""
    project = render(license=license_id)
    assert (project / "LICENSE").read_text().lstrip().startswith(marker)
    assert pyproject(project)["project"]["license"] == license_id
    for source in project.rglob("*.py"):
        kits = source.relative_to(project) == Path(KIT_SOURCE[1])
        assert source.read_text().startswith(f"# SPDX-License-Identifier: {'Apache-2.0' if kits else license_id}\n"), source


def test_rendered_project_records_its_answers_for_regeneration(render: Callable[..., Path]) -> None:
    """.cookiecutter.json holds the answers, so the project can be regenerated or updated."""
    answers = json.loads((render(device_name="acme").joinpath(".cookiecutter.json")).read_text())
    assert answers["device_name"] == "acme" and answers["import_package"] == "lmcache_acme"


def test_todo_markers_sit_where_vendor_code_goes(render: Callable[..., Path]) -> None:
    """The vendor is pointed at the availability probe, native ops and tensor_from_ptr."""
    project = render()
    todos = {
        path.name: len(re.findall(r"TODO\(vendor\)", path.read_text()))
        for path in (project / "src/lmcache_foo").glob("*.py")
    }
    assert todos["device.py"] >= 1 and todos["device_ops.py"] >= 2


@pytest.mark.parametrize("native_ops", ["no", "yes"])
def test_every_source_says_on_its_second_line_whether_it_is_the_vendors_or_the_templates(
    render: Callable[..., Path], native_ops: str
) -> None:
    """A vendor sees at a glance which files are theirs: each Python and C++ source of a wheel render (the
    emulator's C++ aside: its directory is a distribution of its own) is marked "Your code" or "From the
    template" under its SPDX line, TODO(vendor) appears only in files marked as the vendor's, and each of those
    has one. An in-tree contribution, LMCache's from then on, carries no marks."""
    owner = json.loads((TEMPLATE / "cookiecutter.json").read_text())["_owner"]
    project = render(lmcache_driven="default", native_ops=native_ops)
    marks = {}
    for name in sorted(files(project)):
        if name.endswith((".py", ".cpp", ".h")) and not (name.startswith("emulator/") and name.endswith((".cpp", ".h"))):
            second = (project / name).read_text().splitlines()[1].lstrip("#/ ")
            marks[name] = next((who for who, text in owner.items() if second == text), f"unmarked: {second!r}")
    assert {name: mark for name, mark in marks.items() if mark not in owner} == {}
    todo = {name for name in marks if "TODO(vendor)" in (project / name).read_text()}
    assert todo == {name for name, mark in marks.items() if mark == "vendor"}
    assert {"src/lmcache_foo/device.py", "src/lmcache_foo/device_ops.py"} <= todo
    in_tree = render(ownership="in_tree", lmcache_driven="default")
    sources = [name for name in files(in_tree) if name.endswith((".py", ".cpp", ".h"))]
    assert not [name for name in sources if any(text in (in_tree / name).read_text() for text in owner.values())]


def test_a_new_final_lmcache_release_is_one_line_of_cookiecutter_json(tmp_path: Path) -> None:
    """Adding a final to ``_lmcache_tested`` is all it takes: the requirement, the compat layer's tested releases,
    the rendered sessions, CI matrix and README, and the template's own sessions (what ``nox -t ci`` runs) follow,
    and the pre-releases it supersedes drop out."""
    template = tmp_path / "template"
    shutil.copytree(TEMPLATE, template, ignore=shutil.ignore_patterns(".git", ".nox", ".ci-venv", "bench-results"))
    context = json.loads((template / "cookiecutter.json").read_text())
    final = "0.5.7"
    assert final not in context["_lmcache_tested"] and any(p.startswith(final) for p in context["_lmcache_prereleases"])
    text = (template / "cookiecutter.json").read_text()
    newest = f'"{context["_lmcache_tested"][-1]}"'
    (template / "cookiecutter.json").write_text(text.replace(f"{newest}\n", f'{newest},\n    "{final}"\n', 1))
    tested = [*context["_lmcache_tested"], final]
    assert json.loads((template / "cookiecutter.json").read_text())["_lmcache_tested"] == tested

    project = Path(cookiecutter(str(template), no_input=True, output_dir=str(tmp_path / "out")))
    requirement = f"lmcache>={tested[0]},<={final}"
    assert pyproject(project)["project"]["dependencies"][0] == requirement
    compat = (project / "src" / "lmcache_foo" / "_lmcache_compat.py").read_text()
    line = next(ln for ln in compat.splitlines() if ln.startswith("TESTED_LMCACHE_VERSIONS = "))
    assert ast.literal_eval(line.split("=", 1)[1].strip()) == tuple(tested)
    assert f'SUPPORTED_LMCACHE = "{requirement}"' in compat
    import yaml

    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    assert workflow["jobs"]["conformance"]["strategy"]["matrix"]["lmcache"] == tested
    readme = " ".join((project / "README.md").read_text().split())
    assert f"`{requirement}`" in readme and f"tested end to end on each: {', '.join(tested)}" in readme
    listed = nox_list(project)
    assert {f"tests({final})", f"lmcache_contract({final})"} <= listed

    ci = nox_list(template, "-t", "ci")
    assert {f"lmcache_releases({final})", f"lmcache_releases({tested[0]})"} <= ci
    prereleases = {f"lmcache_releases({release})" for release in context["_lmcache_prereleases"]}
    assert not ci & prereleases, "a final supersedes its pre-releases"
    # CI and the README's test command name no release: they run what is tagged ci.
    commands = [line for line in (template / ".ci" / "run").read_text().splitlines() if line.startswith("nox ")]
    blocks = re.findall(r"```bash\n(.*?)```", (template / "README.md").read_text(), re.S)
    assert commands == ["nox -t ci"] and "nox -t ci\n" in blocks, (commands, blocks)
    assert not [block for block in blocks if "lmcache_releases(" in block], blocks


def nox_list(directory: Path, *args: str) -> set[str]:
    """The sessions ``nox --list`` selects in ``directory`` (with ``args``, e.g. a tag)."""
    nox = shutil.which("nox")
    assert nox, "nox is a test dependency of the template (the tests session installs it)"
    done = subprocess.run([nox, "--list", "--json", *args], cwd=directory, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {entry["session"] for entry in json.loads(done.stdout)}


def noxfile_sessions(project: Path) -> set[str]:
    """Names of the functions decorated with ``@nox.session`` in the rendered noxfile."""
    tree = ast.parse((project / "noxfile.py").read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any("nox.session" in ast.unparse(d) for d in node.decorator_list)
    }


def nox_sessions_of(command: str) -> list[str]:
    """The sessions a ``nox -s ...`` command runs (its arguments up to ``--``)."""
    args = shlex.split(command)[2:]
    return args[: args.index("--")] if "--" in args else args


def test_rendered_ci_workflow_runs_existing_nox_sessions_on_every_tested_lmcache(render: Callable[..., Path]) -> None:
    """ci.yml is valid YAML, its matrix is the tested lmcache releases, and it runs only sessions the noxfile has."""
    import yaml

    project = render()
    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    context = json.loads((TEMPLATE / "cookiecutter.json").read_text())
    jobs = workflow["jobs"]
    assert jobs["conformance"]["strategy"]["matrix"]["lmcache"] == context["_lmcache_tested"]
    commands = [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]
    invoked = {arg.split("(")[0] for cmd in commands if cmd.startswith("nox -s ") for arg in nox_sessions_of(cmd)}
    assert {"lint", "typecheck", "build", "tests", "lmcache_contract", "canary"} <= invoked <= noxfile_sessions(project)
    assert "${{ matrix.lmcache }}" in (project / ".github/workflows/ci.yml").read_text()


def test_rendered_ci_tests_every_python_the_rendered_project_declares(render: Callable[..., Path]) -> None:
    """The conformance matrix's Pythons are exactly those requires-python admits (plugin and emulator alike)."""
    import yaml
    from packaging.specifiers import SpecifierSet

    project = render()
    declared = SpecifierSet(pyproject(project)["project"]["requires-python"])
    emulator = tomllib.loads((project / "emulator" / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(emulator) == declared
    admitted = [f"3.{minor}" for minor in range(6, 20) if declared.contains(f"3.{minor}.0")]
    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    assert workflow["jobs"]["conformance"]["strategy"]["matrix"]["python"] == admitted
    assert "${{ matrix.python }}" in (project / ".github/workflows/ci.yml").read_text()


def test_rendered_ci_runs_a_weekly_canary_on_lmcache_main_and_newest_and_keeps_its_report(
    render: Callable[..., Path],
) -> None:
    """A scheduled job runs ``nox -s canary`` on LMCache's main branch and its newest release and uploads the report
    even when the canary fails; push and pull-request runs skip it."""
    import yaml

    project = render()
    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key "on" as True
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    canary = workflow["jobs"]["canary"]
    assert "schedule" in canary["if"] and "push" not in canary["if"]
    targets = canary["strategy"]["matrix"]["lmcache"]
    assert "lmcache" in targets and any("git+https://github.com/LMCache/LMCache" in t for t in targets)
    steps = canary["steps"]
    assert any(step.get("run", "").startswith("nox -s canary -- ") for step in steps)
    upload = next(step for step in steps if "upload-artifact" in step.get("uses", ""))
    assert upload["if"] == "always()" and upload["with"]["path"] == "canary-report.md"


def test_rendered_tooling_configures_pre_commit_line_endings_and_mypy(render: Callable[..., Path]) -> None:
    """pre-commit runs isort, ruff, ruff-format and mypy, .gitattributes keeps LF, and pyproject carries the mypy
    settings."""
    import yaml

    project = render()
    hooks = {hook["id"] for repo in yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"]
             for hook in repo["hooks"]}  # fmt: skip
    assert {"isort", "ruff", "ruff-format", "mypy", "check-toml", "end-of-file-fixer"} <= hooks
    assert "* text=auto eol=lf" in (project / ".gitattributes").read_text()
    mypy = pyproject(project)["tool"]["mypy"]
    assert mypy["files"] == ["src", "emulator/src"] and mypy["ignore_missing_imports"] is True


def test_rendered_noxfile_offers_the_template_sessions_per_tested_release(render: Callable[..., Path]) -> None:
    """``nox --list`` shows lint, typecheck, build, soak, and tests(<release>) and lmcache_contract(<release>) per release."""
    project = render()
    listed = nox_list(project)
    tested = json.loads((TEMPLATE / "cookiecutter.json").read_text())["_lmcache_tested"]
    assert {"lint", "typecheck", "build", *(f"tests({v})" for v in tested), *(f"lmcache_contract({v})" for v in tested)} <= listed
    assert "soak" in noxfile_sessions(project)  # not a default session, so --list --json leaves it out


def test_the_wheel_requires_the_kit_in_a_compatible_range_and_its_doctor_says_how_to_restore_it(
    render: Callable[..., Path],
) -> None:
    """pyproject declares lmcache-foo-doctor -> lmcache_foo.doctor:main; the wheel requires lmcache and the kit (its
    release shims, the doctor's checks) in one minor series from the kit's version, the test extra pins that
    version, no ``doctor`` extra is left; the command reads the kit's requirement from the wheel's metadata (the
    conformance suite's doctor tests run it)."""
    project = render()
    declared = pyproject(project)["project"]
    assert declared["scripts"] == {"lmcache-foo-doctor": "lmcache_foo.doctor:main"}
    major, minor, _ = kit_version().split(".")
    kit = f"lmcache-device-kit>={kit_version()},<{major}.{int(minor) + 1}"
    assert declared["dependencies"] == ["lmcache>=0.5.4,<=0.5.6", kit]
    assert f"lmcache-device-kit[test]=={kit_version()}" in declared["optional-dependencies"]["test"]
    # the cluster tests' extra: the kit's real Redis, apart from the test extra (tests/test_cluster.py)
    assert declared["optional-dependencies"]["cluster"] == [f"lmcache-device-kit[cluster]=={kit_version()}"]
    # the P2P cluster tests' transfer engine (nixl), apart again: only TestClusterP2P needs it
    assert declared["optional-dependencies"]["p2p"] == [f"lmcache-device-kit[p2p]=={kit_version()}"]
    assert set(declared["optional-dependencies"]) == {"test", "cluster", "p2p"}
    assert 'DISTRIBUTION = "lmcache-foo-device"' in (project / "src/lmcache_foo/doctor.py").read_text()


@pytest.mark.parametrize(
    ("requires", "problem"),
    [
        ("", "the production wheel does not require lmcache-device-kit: the release shims it runs on"),
        ("lmcache-device-kit==0.2.0", "the production wheel requires lmcache-device-kit==0.2.0: require the kit in a "
                                      "compatible range"),
        ("lmcache-device-kit>=0.2.0", "the production wheel requires lmcache-device-kit>=0.2.0: require the kit"),
        ("lmcache-device-kit>=0.1.0,<0.2", "Requires-Dist for lmcache-device-kit is ['lmcache-device-kit<0.2,>=0.1.0']"),
        ("lmcache-device-kit>=0.2.0,<0.3\nRequires-Dist: torch", "the production wheel requires torch (lmcache and "
                                                                  "lmcache-device-kit alone"),
    ],
)  # fmt: skip
def test_the_wheel_check_refuses_a_production_wheel_whose_requirements_are_not_lmcache_and_the_kits_range(
    render: Callable[..., Path], tmp_path: Path, requires: str, problem: str
) -> None:
    """The wheel requires lmcache and the kit alone, the kit in this template's compatible range (a pin or an open
    range would keep two plugins from one environment); every extra pyproject declares is in its metadata."""
    project = render()
    wheel = tmp_path / "lmcache_foo_device-0.1.0-py3-none-any.whl"
    metadata = "Metadata-Version: 2.4\nName: x\nRequires-Dist: lmcache>=0.5.4,<=0.5.6\n"
    metadata += f"Requires-Dist: {requires}\n" if requires else ""
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/METADATA", metadata)
        archive.writestr("lmcache_foo_device-0.1.0.dist-info/entry_points.txt", "")
    problems = wheel_problems(wheel, project)
    assert any(p.startswith(problem) for p in problems), problems
    assert f"METADATA lacks 'lmcache-device-kit[test]=={kit_version()}' under the 'test' extra" in problems


@pytest.mark.parametrize("native_ops", ["no", "yes"])
def test_rendered_readme_opens_every_code_fence_after_a_blank_line(render: Callable[..., Path], native_ops: str) -> None:
    """Jinja whitespace control must not glue a code fence to the sentence before it."""
    lines = (render(native_ops=native_ops) / "README.md").read_text().splitlines()
    fences = [i for i, line in enumerate(lines) if "```" in line]
    assert fences and len(fences) % 2 == 0, "unbalanced code fences"
    for opening in fences[::2]:
        assert lines[opening].startswith("```") and not lines[opening - 1].strip(), lines[opening - 1 : opening + 1]


def test_rendered_readme_states_the_cycles_the_soak_runs(render: Callable[..., Path]) -> None:
    """The checklist's soak figures are the kit's soak's defaults (what ``nox -s soak`` runs)."""
    project = render()
    soak = (TEMPLATE / "kit" / "src" / "lmcache_device_kit" / "soak.py").read_text()
    defaults = {name: int(value) for name, value in re.findall(r'"--(cycles|warmup)", type=int, default=(\d+)', soak)}
    expected = f"{defaults['warmup']:,} warm-up and {defaults['cycles']:,} measured cycles"
    assert expected in " ".join((project / "README.md").read_text().split())


def test_the_build_tree_keeps_no_empty_package_directory_of_a_previous_render(tmp_path: Path) -> None:
    """An empty src/<package>/ left by another render is a namespace package to setuptools, which would name it in
    the next wheel's top_level.txt (a CI run saw lmcache_acme_...'s wheel claim lmcache_foo); build/ stays."""
    from tasks.project import sync_tree

    first, second, tree = tmp_path / "first", tmp_path / "second", tmp_path / "tree"
    (first / "src/lmcache_foo").mkdir(parents=True)
    (first / "src/lmcache_foo/__init__.py").write_text("")
    (second / "src/lmcache_acme").mkdir(parents=True)
    (second / "src/lmcache_acme/__init__.py").write_text("")
    sync_tree(first, tree)
    (tree / "build/temp.linux").mkdir(parents=True)
    sync_tree(second, tree)
    assert sorted(p.name for p in (tree / "src").iterdir()) == ["lmcache_acme"]
    assert (tree / "build/temp.linux").is_dir()
