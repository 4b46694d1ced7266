# SPDX-License-Identifier: Apache-2.0
"""Optional parts are listed once, in hooks/manifest.py: the template tree has plain file names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from jinja2 import Environment

from hooks.answer_rules import TEXT_CHOICES, extendable_builtins
from hooks.manifest import COPIES, EXTENDS_BUILTIN, KIT_COMPAT, KIT_SOURCE, OWN_DEVICE, PARTS, copied_files, dropped_paths
from hooks.post_gen_project import copy_in, prune

TEMPLATE = Path(__file__).resolve().parent.parent
PROJECT = TEMPLATE / "{{cookiecutter.project_slug}}"
OPTIONS = json.loads((TEMPLATE / "cookiecutter.json").read_text())


def choices(option: str) -> list[str]:
    """An option's values: a choice's, a text answer's (``TEXT_CHOICES``), or the built-in backend a render extends
    (``__extends``: none, or a built-in named as its device type)."""
    if option == "__extends":
        return ["", *extendable_builtins(OPTIONS["_builtin_device_types"])]
    assert isinstance(OPTIONS.get(option), list) or option in TEXT_CHOICES, f"{option!r} is not a choice"
    return list(OPTIONS[option]) if isinstance(OPTIONS[option], list) else list(TEXT_CHOICES[option])


def test_no_template_file_name_holds_a_jinja_condition() -> None:
    """Which files an answer set keeps is the manifest's to say, not a file name's."""
    conditional = [str(path.relative_to(PROJECT)) for path in PROJECT.rglob("*") if "{%" in path.name]
    assert conditional == []


@pytest.mark.parametrize("part", PARTS, ids=[part.name for part in PARTS])
def test_every_path_the_manifest_names_is_in_the_template(part) -> None:  # type: ignore[no-untyped-def]
    missing = [path for path in part.paths if not (PROJECT / path).exists()]
    assert missing == [], f"{part.name!r} names paths the template does not have"


@pytest.mark.parametrize("part", PARTS, ids=[part.name for part in PARTS])
def test_every_condition_names_an_option_and_its_choices(part) -> None:  # type: ignore[no-untyped-def]
    for option, values in part.when.items():
        assert set(values) <= set(choices(option)), f"{option!r} has no choice among {values}"


@pytest.mark.parametrize("part", COPIES, ids=[part.name for part in COPIES])
def test_every_kit_file_the_manifest_copies_is_a_run_time_module_of_the_kits_shims(part) -> None:  # type: ignore[no-untyped-def]
    """What an in-tree backend copies exists in the kit, and is none of what only a wheel or the doctor uses."""
    assert [name for name in part.paths if not (KIT_COMPAT / name).is_file()] == []
    assert not {"declared.py", "release.py", "wire.py"} & set(part.paths)
    for option, values in part.when.items():
        assert set(values) <= set(choices(option)), f"{option!r} has no choice among {values}"


def test_an_in_tree_answer_set_copies_the_kits_shims_into_its_package_and_a_wheel_only_the_kits_source_module(tmp_path: Path) -> None:
    answers = {"ownership": "in_tree", "lmcache_driven": "no", "__package_dir": "lmcache/v1/platform/devices/foo"}
    copies = copied_files(Environment(), answers)
    assert [target for _, target in copies] == [
        f"lmcache/v1/platform/devices/foo/_compat/{name}"
        for name in ("__init__.py", "ops_support.py", "resolve.py", "spec.py", "surface.py")
    ]
    assert copied_files(Environment(), {**answers, "ownership": "wheel"}) == [(str(KIT_SOURCE[0]), "kit_source.py")]
    copy_in(tmp_path, copies)
    assert (tmp_path / copies[0][1]).read_bytes() == (KIT_COMPAT / "__init__.py").read_bytes()
    with pytest.raises(SystemExit, match="outside the project: fix the manifest"):
        copy_in(tmp_path / "project", [(copies[0][0], "../outside.py")])
    assert not (tmp_path / "outside.py").exists()


@pytest.mark.parametrize("lmcache_driven", ["no", "default"])
def test_the_shims_an_in_tree_backend_copies_import_only_each_other(lmcache_driven: str) -> None:
    """Every shim module an in-tree copy imports when it loads is copied too, and, with LMCache-driven transfer (whose
    server calls the pointer-mode helpers), every module they import at call time as well."""
    answers = {"ownership": "in_tree", "lmcache_driven": lmcache_driven, "__package_dir": "lmcache/v1/platform/devices/foo"}
    copied = {Path(target).name for _, target in copied_files(Environment(), answers)}
    for name in sorted(copied):
        tree = ast.parse((KIT_COMPAT / name).read_text())
        nodes = ast.walk(tree) if lmcache_driven != "no" else iter(tree.body)
        imported = {f"{node.module}.py" for node in nodes if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert imported <= copied, f"{name} imports {sorted(imported - copied)}, which an in-tree backend does not copy"


def test_answers_drop_exactly_the_parts_they_do_not_keep() -> None:
    answers = {
        "ownership": "wheel", "lmcache_driven": "no", "native_ops": "yes", "emulator": "yes", "backend_name": "foo",
        "__package_dir": "src/lmcache_foo", "__emulator_dir": "emulator", "__extends": "",
    }  # fmt: skip
    dropped = dropped_paths(Environment(), answers)
    assert "src/lmcache_foo/ipc_wrapper.py" in dropped and "PR_DESCRIPTION.md" in dropped
    assert "src/lmcache_foo/native_ops.py" not in dropped and "emulator" not in dropped
    assert "patches/0001-ipc-wire-foo.patch" in dropped


@pytest.mark.parametrize("choice", ["no", "default"])
def test_an_in_tree_render_carries_its_own_tests_and_not_the_kits(choice: str) -> None:
    """LMCache's tree does not depend on the kit: in-tree, the kit's conftest and subclasses go, the LMCache-style
    tests of the parts the backend has stay; a wheel keeps the kit's and none of these."""
    tests = "tests/v1/platform/devices/foo"
    answers = {
        "ownership": "in_tree", "lmcache_driven": choice, "native_ops": "no", "emulator": "yes", "backend_name": "foo",
        "__package_dir": "lmcache/v1/platform/devices/foo", "__emulator_dir": f"{tests}_emulator", "__tests_dir": tests,
        "__extends": "",
    }  # fmt: skip
    dropped = set(dropped_paths(Environment(), answers))
    assert {f"{tests}/conftest.py", f"{tests}/test_conformance.py"} <= dropped
    kept = {"test_foo_support.py", "test_foo_transfer.py"}
    kept |= {"test_foo_engine_driven.py"} if choice == "no" else {"test_foo_ipc_wrapper.py", "test_foo_pin_memory.py"}
    assert not {f"{tests}/{name}" for name in kept} & dropped
    other = "test_foo_ipc_wrapper.py" if choice == "no" else "test_foo_engine_driven.py"
    assert f"{tests}/{other}" in dropped
    wheel = set(dropped_paths(Environment(), {**answers, "ownership": "wheel", "__tests_dir": "tests"}))
    assert "tests/test_foo_support.py" in wheel and "tests/conftest.py" not in wheel


def test_the_hook_refuses_a_path_outside_the_project_and_deletes_nothing(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "keep.py").write_text("")
    (tmp_path / "outside.py").write_text("")
    with pytest.raises(SystemExit, match="outside the project: fix the manifest"):
        prune(tmp_path / "project", ["keep.py", "../outside.py"])
    assert (tmp_path / "outside.py").exists() and (tmp_path / "project" / "keep.py").exists()


def test_a_render_that_extends_a_builtin_keeps_the_spec_and_its_detection_and_drops_the_parts_the_builtin_has() -> None:
    """Its ops, IPC wrapper, cache context, events and pinning are the built-in's: none of the sample's are rendered,
    nor LMCache's ports of its per-device tests; a render of its own device has no ``detect.py``."""
    answers = {
        "ownership": "wheel", "lmcache_driven": "default", "native_ops": "no", "emulator": "no", "backend_name": "maca",
        "__package_dir": "src/lmcache_maca", "__emulator_dir": "emulator", "__tests_dir": "tests", "__extends": "cuda",
    }  # fmt: skip
    assert "cuda" in EXTENDS_BUILTIN and "rocm" not in EXTENDS_BUILTIN and OWN_DEVICE == ("",)
    dropped = set(dropped_paths(Environment(), answers))
    package = "src/lmcache_maca"
    own = {"device_ops", "ipc_wrapper", "cache_context", "event_ipc", "pin_memory", "runtime", "_ipc_rendezvous"}
    assert {f"{package}/{name}.py" for name in own} <= dropped
    assert "tests/test_lmcache_ports.py" in dropped
    assert not {f"{package}/device.py", f"{package}/detect.py", "tests/test_conformance.py"} & dropped
    assert f"{package}/detect.py" in dropped_paths(Environment(), {**answers, "__extends": ""})


def test_an_engine_driven_wheel_render_has_none_of_the_lmcache_driven_part(render: Callable[..., Path]) -> None:
    project = render(lmcache_driven="no", native_ops="no", emulator="no")
    package = project / "src/lmcache_foo"
    assert not (package / "ipc_wrapper.py").exists() and "WireType" not in (package / "_lmcache_compat.py").read_text()
    assert not (project / "emulator").exists() and not (project / "setup.py").exists()
    assert (package / "device_ops.py").exists()


def test_the_template_automation_imports_without_jinja2_as_in_noxs_own_environment() -> None:
    """``.ci/run`` installs nox and uv only: the noxfile and everything it imports (the manifest included) must
    load without jinja2 or cookiecutter, which only the sessions' environments have."""
    code = "import sys; sys.modules['jinja2'] = sys.modules['cookiecutter'] = None; import noxfile"
    done = subprocess.run([sys.executable, "-c", code], cwd=TEMPLATE, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
