# SPDX-License-Identifier: Apache-2.0
"""What each option guarantees: the in-tree layout, the wire patch, emulator on/off, and odd names."""

from __future__ import annotations

import ast
import itertools
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_render_sessions

from hooks.manifest import KIT_COMPAT
from tasks.checks import EMULATOR_FILES, files, leftover_syntax
from tasks.lmcache_style import check_contribution
from tasks.variants import NEWEST, ROOT

IN_TREE_PACKAGE = "lmcache/v1/platform/devices/foo"
IN_TREE_TESTS = "tests/v1/platform/devices/foo"
#: The kit's conformance classes that only one ownership model can run (their ``requires``): what is about how the
#: backend is installed (a wheel's entry point, release range, tables and doctor; LMCache's scan of its own tree).
#: Both models render the same subclasses; the kit's plugin skips these where the backend lacks the capability.
WHEEL_ONLY_CLASSES = {
    "BaseWheelDiscoveryTests", "BaseLMCacheSurfaceTests", "BaseDoctorTests", "BaseDoctorLiveTests", "BaseDoctorPathsTests",
    "BaseNativeTorchPinTests",
    "BaseDoctorPortTests",
}  # fmt: skip
IN_TREE_ONLY_CLASSES = {"BaseInTreeDiscoveryTests"}
#: An in-tree contribution's own tests, in LMCache's per-device style (no kit), by lmcache_driven choice.
IN_TREE_OWN_TESTS = {
    "no": ("test_foo_support.py", "test_foo_transfer.py", "test_foo_engine_driven.py"),
    "default": ("test_foo_support.py", "test_foo_transfer.py", "test_foo_ipc_wrapper.py", "test_foo_cache_context.py",
                "test_foo_event_ipc.py", "test_foo_pin_memory.py"),
}  # fmt: skip
KIT_CONFORMANCE = ROOT / "kit" / "src" / "lmcache_device_kit" / "conformance"


def kit_requires() -> dict[str, set[str]]:
    """``{module.Base...Tests: its requires}`` of the kit's conformance classes, read from its sources."""
    found = {}
    for path in sorted(KIT_CONFORMANCE.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.startswith("Base"):
                requires = [n.value for n in node.body if isinstance(n, ast.Assign)
                            and [ast.unparse(t) for t in n.targets] == ["requires"]]  # fmt: skip
                # ``frozenset({...})``, ``frozenset()`` or none (the base's: nothing)
                args = requires[0].args if requires and isinstance(requires[0], ast.Call) else []
                found[f"{path.stem}.{node.name}"] = set(ast.literal_eval(args[0])) if args else set()
    return found


def test_in_tree_render_is_laid_out_as_an_lmcache_contribution(render: Callable[..., Path]) -> None:
    """ownership=in_tree: the package under lmcache/v1/platform/devices/<name>/, tests in LMCache's layout, patch, PR text; no wheel."""
    project = render(ownership="in_tree", lmcache_driven="default")
    rendered = files(project)
    package = {f"{IN_TREE_PACKAGE}/{name}" for name in (
        "__init__.py", "names.py", "_lmcache_compat.py", "_compat/__init__.py", "_compat/kv_layout.py",
        "_compat/ops_support.py", "_compat/resolve.py", "_compat/spec.py", "_compat/surface.py", "device_ops.py",
        "ipc_wrapper.py", "_ipc_rendezvous.py", "cache_context.py", "runtime.py", "event_ipc.py", "pin_memory.py")}  # fmt: skip
    emulator = {f"{IN_TREE_TESTS}_emulator/pyproject.toml",
                *(f"{IN_TREE_TESTS}_emulator/src/lmcache_foo_emulator/{name}" for name in EMULATOR_FILES)}  # fmt: skip
    suite = {f"{IN_TREE_TESTS}/{name}" for name in IN_TREE_OWN_TESTS["default"]}
    assert rendered == package | suite | emulator | {"patches/0001-ipc-wire-foo.patch", "PR_DESCRIPTION.md", ".cookiecutter.json"}
    assert not [d for d in project.rglob("*") if d.is_dir() and not any(d.iterdir())], "empty directories left behind"


def test_in_tree_spec_class_is_defined_in_the_package_init_and_imports_only_device_spec(render: Callable[..., Path]) -> None:
    """LMCache registers only DeviceSpec subclasses *defined* in devices/<name>/__init__.py, and drops packages whose import fails."""
    init = render(ownership="in_tree") / IN_TREE_PACKAGE / "__init__.py"
    tree = ast.parse(init.read_text())
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes == ["FooDeviceSpec"]
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom | ast.Import)]
    from_lmcache = [n.module for n in imports if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("lmcache"))]
    assert from_lmcache == ["_lmcache_compat", "names"]  # DeviceSpec only, and this backend's names
    assert "entry point" not in init.read_text().split('"""')[1].lower() or "no entry point" in init.read_text()


def test_in_tree_compat_module_neither_checks_the_release_nor_patches_the_wire_codec(render: Callable[..., Path]) -> None:
    """In LMCache's tree the backend ships with LMCache, and the wire type comes from the patch, not a runtime registration:
    its binding imports its own copy of the kit's run-time shims (LMCache cannot depend on the kit), without a
    release check or a wire registration."""
    project = render(ownership="in_tree", lmcache_driven="default")
    compat = (project / IN_TREE_PACKAGE / "_lmcache_compat.py").read_text()
    assert "check_lmcache_version" not in compat and "wire" not in compat.split('"""')[2]
    assert "lmcache_device_kit" not in compat and f"from {IN_TREE_PACKAGE.replace('/', '.')}._compat.resolve import" in compat
    copies = sorted(path.name for path in (project / IN_TREE_PACKAGE / "_compat").iterdir())
    assert copies == ["__init__.py", "kv_layout.py", "ops_support.py", "resolve.py", "spec.py", "surface.py"]
    for name in copies:  # byte for byte: the shims stay written once, in the kit
        assert (project / IN_TREE_PACKAGE / "_compat" / name).read_bytes() == (KIT_COMPAT / name).read_bytes(), name
    engine_only = render(ownership="in_tree", lmcache_driven="no") / IN_TREE_PACKAGE / "_compat"
    expected = ["__init__.py", "ops_support.py", "resolve.py", "spec.py", "surface.py"]
    assert sorted(path.name for path in engine_only.iterdir()) == expected
    assert "check_lmcache_version" not in (project / IN_TREE_PACKAGE / "__init__.py").read_text()
    wrapper = (render(ownership="in_tree", lmcache_driven="opt_in") / IN_TREE_PACKAGE / "ipc_wrapper.py").read_text()
    imported = wrapper.split("from lmcache.v1.platform.base.ipc_wire import (", 1)[1].split(")", 1)[0].split()
    assert imported == ["DTYPES,", "FooIPCData,", "FooPlaneData,", "TensorMetadata,"]  # isort's order
    assert "publish_wrapper_class" not in wrapper


def test_wire_patch_adds_the_struct_its_union_member_and_its_allowlist_entry(render: Callable[..., Path]) -> None:
    """The three ipc_wire.py edits LMCache 0.5.6 needs for a new wrapper (its descriptor holds a layer's planes, as NPU's
    does), as a unified diff with consistent hunks."""
    patch = (render(ownership="in_tree", lmcache_driven="default", device_name="acme_npu") / "patches/0001-ipc-wire-acme_npu.patch").read_text()
    added = [line[1:] for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++")]
    struct = ["class AcmeNpuIPCData(", "    msgspec.Struct,", '    tag="acme_npu",', "    forbid_unknown_fields=True,", "):"]
    assert any(added[i : i + 5] == struct for i in range(len(added))), added
    assert "class AcmeNpuPlaneData(" in added
    assert "    planes: tuple[AcmeNpuPlaneData, ...]" in added
    assert "    | AcmeNpuIPCData" in added
    entry = ["    AcmeNpuIPCData: (", '        "acme_npu.ipc_wrapper",', '        "AcmeNpuIPCWrapper",', "    ),"]
    assert any(added[i : i + 4] == entry for i in range(len(added))), added
    assert patch.startswith("diff --git a/lmcache/v1/platform/base/ipc_wire.py b/lmcache/v1/platform/base/ipc_wire.py\n")
    for header, body in re.findall(r"^(@@ .* @@)\n((?:[ +-].*\n?)*)", patch, flags=re.M):
        old_count, new_count = (int(n) for n in re.findall(r"[-+]\d+,(\d+)", header))
        lines = body.splitlines()
        assert old_count == sum(1 for line in lines if line[:1] in " -"), header
        assert new_count == sum(1 for line in lines if line[:1] in " +"), header
    first_hunk = patch.split("\n@@ ")[1].splitlines()[1:]
    compile("\n".join(line[1:] for line in first_hunk if line.startswith("+")), "new-struct", "exec")


def test_engine_driven_in_tree_render_needs_no_wire_patch(render: Callable[..., Path]) -> None:
    """Without LMCache-driven transfer there is no wrapper, so LMCache's sources stay untouched."""
    project = render(ownership="in_tree", lmcache_driven="no")
    assert not (project / "patches").exists()
    assert "git apply" not in (project / "PR_DESCRIPTION.md").read_text()


@pytest.mark.parametrize("choice", ["no", "opt_in", "default"])
def test_in_tree_tests_are_lmcache_style_and_import_no_kit(render: Callable[..., Path], choice: str) -> None:
    """LMCache's tree does not depend on lmcache-device-kit: the contribution's tests are plain pytest modules named
    and skipped as LMCache's per-device tests are (``test_<backend>_*.py``, no conftest, a device probe through the
    spec), importing LMCache and the backend only; the template runs the kit's classes beside them."""
    tests = render(ownership="in_tree", lmcache_driven=choice) / IN_TREE_TESTS
    names = sorted(path.name for path in tests.iterdir())
    assert names == sorted(IN_TREE_OWN_TESTS["no" if choice == "no" else "default"])
    for name in names:
        text = (tests / name).read_text()
        tree = ast.parse(text)
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not [module for module in imported if module.startswith("lmcache_device_kit")], name
        assert {module.split(".")[0] for module in imported} <= {"lmcache", "torch", "pytest", "msgspec", "ctypes",
                                                                 "collections", "contextlib", "math", "types",
                                                                 "typing", "unittest", "importlib"}, name  # fmt: skip
        assert "pytestmark = pytest.mark.no_shared_allocator" in text, name
        assert "not FooDeviceSpec().is_available()," in text, name


def catalog_list(name: str) -> list[str]:
    """The classes a list of the kit's catalog (``BASES``, ``APART``) names, as ``module.BaseXTests``."""
    catalog = ast.parse((KIT_CONFORMANCE / "catalog.py").read_text())
    (bases,) = [n.value for n in catalog.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == name]
    assert isinstance(bases, ast.Tuple)
    return [ast.unparse(base) for base in bases.elts]


def test_the_classes_run_apart_each_have_a_test_module_of_their_own(render: Callable[..., Path]) -> None:
    """The catalog's APART classes (several servers per test: the cluster) are subclassed in their own module, which
    a wheel render's default pytest run deselects by marker and ``nox -s cluster`` runs."""
    project = render(lmcache_driven="default")
    tree = ast.parse((project / "tests" / "test_cluster.py").read_text())
    assert [ast.unparse(n.bases[0]) for n in tree.body if isinstance(n, ast.ClassDef)] == catalog_list("APART")
    pytest_settings = (project / "pyproject.toml").read_text()
    assert '"-m", "not cluster"' in pytest_settings
    assert 'run_pytest(session, "-m", "cluster", ' in (project / "noxfile.py").read_text()


def test_the_wheel_suite_subclasses_the_kits_catalog_in_its_order(render: Callable[..., Path]) -> None:
    """A wheel's tests/test_conformance.py subclasses every class of the kit's one list (``conformance.catalog``), in
    its order: the list the template's in-tree sessions subclass beside an in-tree contribution (tasks/suite.py). The
    few classes about how the backend is installed declare it (``requires`` wheel or in_tree), so the kit's plugin
    skips them under the other model."""
    tree = ast.parse((render(lmcache_driven="default") / "tests" / "test_conformance.py").read_text())
    subclassed = [(n.name, ast.unparse(n.bases[0])) for n in tree.body if isinstance(n, ast.ClassDef)]
    listed, apart = catalog_list("BASES"), catalog_list("APART")
    assert [base for _, base in subclassed] == listed
    assert all(name == "Test" + base.split(".Base")[1].removesuffix("Tests") for name, base in subclassed)
    classes = kit_requires()
    assert set(listed) | set(apart) == set(classes), "the catalog lists every kit class, and only those"
    assert {name.split(".")[1] for name, needs in classes.items() if "wheel" in needs} == WHEEL_ONLY_CLASSES
    assert {name.split(".")[1] for name, needs in classes.items() if "in_tree" in needs} == IN_TREE_ONLY_CLASSES


@pytest.mark.parametrize(("ownership", "choice"), list(itertools.product(["wheel", "in_tree"], ["opt_in", "default"])))
def test_every_lmcache_driven_render_carries_an_event_ipc_backend(render: Callable[..., Path], ownership: str, choice: str) -> None:
    """LMCache-driven without an event backend cannot be rendered: the choice brings the backend and the spec binds it."""
    project = render(ownership=ownership, lmcache_driven=choice)
    package = project / (IN_TREE_PACKAGE if ownership == "in_tree" else "src/lmcache_foo")
    spec = (package / ("__init__.py" if ownership == "in_tree" else "device.py")).read_text()
    assert (package / "event_ipc.py").is_file()
    assert "def event_ipc_backend(self) -> FooEventIPCBackend:" in spec


def test_no_emulator_render_ships_no_emulator_and_skips_device_tests_without_a_device(render: Callable[..., Path]) -> None:
    """emulator=no: no emulator files or variable; the suite skips what needs a device, with the reason, and runs the rest."""
    project = render(emulator="no", lmcache_driven="default")
    assert not (project / "emulator").exists()
    sources = "".join((project / name).read_text() for name in files(project) if name.startswith("src/"))
    assert "LMCACHE_FOO_EMULATOR" not in sources and "EMULATOR_MODULE" not in sources
    conftest = (project / "tests/conftest.py").read_text()
    # the kit's plugin skips what needs a device (kit/tests/test_conformance_frame.py)
    assert "DEVICE_PRESENT = BACKEND.device_present()" in conftest
    assert "from lmcache_device_kit.conformance.plugin import *" in conftest


ODD_NAMES = [
    {"device_name": "x" * 24, "torch_extension_module": "torch_" + "x" * 24},
    {"device_name": "acme_npu", "backend_name": "acme_npu2_v2"},
    {"device_name": "d_e_v_u", "class_prefix": "D3v4U"},
]


@pytest.mark.parametrize("answers", ODD_NAMES, ids=["24-characters", "underscores-digits-in-backend", "single-letters-between-underscores"])
@pytest.mark.parametrize("ownership", ["wheel", "in_tree"])
def test_odd_but_valid_names_render_clean_python_for_both_ownership_models(
    render: Callable[..., Path], answers: dict[str, str], ownership: str
) -> None:
    """Long names, digits and underscores: no template syntax left, every Python file compiles, and the
    style checks pass: the wheel's own (ruff, ruff format, isort), LMCache's pre-commit hooks in-tree."""
    extra = {"backend_name": answers["device_name"]} if ownership == "in_tree" else {}
    project = render(**{**answers, **extra}, ownership=ownership, lmcache_driven="default")
    for name in files(project):
        text = (project / name).read_text()
        assert leftover_syntax(name, text) is None, name
        if name.endswith(".py"):
            compile(text, name, "exec")
    if ownership == "in_tree":
        passed, report = check_contribution(project, NEWEST, ROOT / ".nox" / f"lmcache-style-{NEWEST}")
        assert passed, report[-3000:]
        return
    done = run_render_sessions(project, "lint")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


@pytest.mark.parametrize("answers", ODD_NAMES[:2], ids=["24-characters", "underscores-digits-in-backend"])
def test_odd_but_valid_names_build_a_wheel_with_the_right_entry_point(render: Callable[..., Path], answers: dict[str, str], tmp_path: Path) -> None:
    """The wheel of an odd name builds (PEP 517, isolated) and points its entry point at the spec."""
    project = render(**answers)
    dist = tmp_path / "dist"
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(project)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(archive.read(n).decode() for n in archive.namelist() if n.endswith("entry_points.txt"))
    device, backend = answers["device_name"], answers.get("backend_name", answers["device_name"])
    prefix = "".join(part.capitalize() for part in device.split("_"))
    assert f"{backend} = lmcache_{device}.device:{prefix}DeviceSpec" in entry_points
