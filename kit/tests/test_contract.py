# SPDX-License-Identifier: Apache-2.0
"""The contract runner: which of LMCache's tests it runs, which it declares not
applicable (the kit's entries, a project's over them), and the project's ported
tests run and counted apart; its pytest plugin refuses a run that would not reach
the plugin under test.

Checked on small stand-ins (an sdist, a project, a backend's names), without a
plugin: the render's ``generate_and_test`` runs the real thing.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import io
import json
import os
import subprocess
import sys
import tarfile

# Third Party
import pytest

# First Party
from lmcache_device_kit.backend import PACKAGE_ENV_VAR
from lmcache_device_kit.conformance import ports as ported
from lmcache_device_kit.contract import project as projects
from lmcache_device_kit.contract.not_applicable import for_release, load
from lmcache_device_kit.contract.pytest_plugin import SETTINGS_ENV_VAR, this_pass
from lmcache_device_kit.contract.runner import unpack_tests

NAMES = """
DEVICE_TYPE = "bar"
BACKEND_NAME = "bar_backend"
TORCH_MODULE_NAME = "bar"
TORCH_EXTENSION_MODULE = ""
SLOW_PATH_MARK = "bar_backend slow path:"
"""
#: The runner's options for the stand-in backend's ported tests alone (no sdist).
DEVICES_ONLY = ["--package", "kit_test_contract_bar", "--suite", "devices"]


@pytest.fixture
def backend_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process whose backend is ``kit_test_contract_bar``: its
    names module only, importable from ``PYTHONPATH``."""
    package = tmp_path / "site" / "kit_test_contract_bar"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "names.py").write_text(NAMES)
    path = os.pathsep.join([str(package.parent), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def project_with(tmp_path: Path, ports: str | None, toml: str | None = None) -> Path:
    """A project: a pyproject.toml, its ``tests/test_lmcache_ports.py`` (the ports'
    subclasses) if given and, if given, its own ``tests/lmcache_contract.toml``."""
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    if ports is not None:
        (root / "tests" / projects.PORTS_FILE).write_text(ports)
    if toml is not None:
        (root / "tests" / "lmcache_contract.toml").write_text(toml)
    return root


def contract(
    args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "lmcache_device_kit.contract", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)


def test_the_kits_entries_ship_with_it_each_for_the_releases_it_names() -> None:
    newest, oldest = load("0.5.6"), load("0.5.4")
    assert "tests/v1/multiprocess/test_mq.py" in newest.skip
    assert (
        "tests/v1/platform/test_gpu_cache_context.py::TestGPUCacheContext"
        in oldest.skip
    )
    assert (
        "tests/v1/platform/test_gpu_cache_context.py::TestGPUCacheContext"
        not in newest.skip
    )
    assert newest.device_type_only and newest.not_collected
    assert all(
        source == "the kit's lmcache_contract.toml" for source in newest.source.values()
    )


def test_a_bounded_entry_concerns_its_releases_a_pre_release_counting_as_final() -> (
    None
):
    entries = {
        "a": "always",
        "b": {"first": "0.5.6", "reason": "new"},
        "c": {"last": "0.5.5", "reason": "old"},
    }
    assert for_release(entries, "0.5.7rc2") == {"a": "always", "b": "new"}
    assert for_release(entries, "0.5.5") == {"a": "always", "c": "old"}


def test_a_projects_own_entries_are_read_over_the_kits_and_may_move_a_test(
    tmp_path: Path,
) -> None:
    mq = "tests/v1/multiprocess/test_mq.py"
    own = tmp_path / "lmcache_contract.toml"
    own.write_text(
        '[skip]\n"tests/v1/platform/test_x.py::test_y" = "our device has no y"\n'
        f'[device_type_only]\n"{mq}" = "our runtime needs the device type"\n'
    )
    listing = load("0.5.6", own)
    assert listing.skip["tests/v1/platform/test_x.py::test_y"] == "our device has no y"
    assert (
        mq not in listing.skip
        and listing.device_type_only[mq] == "our runtime needs the device type"
    )
    assert listing.source[mq] == str(own)
    kit_only = set(load("0.5.6").listed()) - {mq}
    assert kit_only <= set(listing.listed())


def test_a_project_file_with_an_unknown_table_is_refused_naming_the_tables(
    tmp_path: Path,
) -> None:
    own = tmp_path / "lmcache_contract.toml"
    own.write_text('[skips]\n"tests/v1/platform/test_x.py" = "typo"\n')
    with pytest.raises(
        ValueError, match="unknown table.*skips.*skip, device_type_only, not_collected"
    ):
        load("0.5.6", own)


def test_the_sdist_s_device_generic_tests_are_unpacked_and_the_others_set_aside(
    tmp_path: Path,
) -> None:
    files = {
        "pytest.ini": b"[pytest]\n",
        "tests/__init__.py": b"",
        "tests/v1/__init__.py": b"",
        "tests/v1/platform/test_spec.py": b"def test_a(): pass\n",
        "tests/v1/platform/devices/cuda/test_cuda.py": b"def test_b(): pass\n",
        "tests/v1/multiprocess/test_uses_device.py": b"from lmcache import torch_dev\n",
        "tests/v1/multiprocess/test_server_only.py": b"def test_c(): pass\n",
        "tests/v1/multiprocess/helpers.py": b"",
        "tests/v1/test_other.py": b"",
    }
    archive = tmp_path / "lmcache-0.5.6.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"lmcache-0.5.6/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    scratch = tmp_path / "scratch"
    others = unpack_tests(archive, "0.5.6", scratch, ["platform", "multiprocess"])
    unpacked = {str(p.relative_to(scratch)) for p in scratch.rglob("*") if p.is_file()}
    assert unpacked == set(files) - {
        "tests/v1/platform/devices/cuda/test_cuda.py",
        "tests/v1/test_other.py",
    }
    assert others == ["tests/v1/multiprocess/test_server_only.py"]
    only_platform = unpack_tests(archive, "0.5.6", scratch, ["platform"])
    assert only_platform == [] and not (scratch / "tests/v1/multiprocess").exists()


def test_a_project_is_found_around_the_current_directory_with_its_optional_files(
    tmp_path: Path,
) -> None:
    root = project_with(tmp_path, "")
    assert projects.find_project(root / "tests") == root
    assert projects.ported_tests(root) == root / "tests" / "test_lmcache_ports.py"
    assert projects.own_not_applicable(root) is None
    assert projects.ported_tests(project_with(tmp_path / "other", None)) is None
    assert (
        projects.find_project(tmp_path) is None and projects.ported_tests(None) is None
    )


def test_each_pass_runs_its_own_tests_the_device_type_ones_apart() -> None:
    moved = {"tests/v1/platform/test_plugins.py::test_fake": "fakes the entry points"}
    nodeids = [
        "tests/v1/platform/test_plugins.py::test_fake[x]",
        "tests/v1/platform/test_plugins.py::test_real",
    ]
    assert this_pass(nodeids, moved, only_moved=True) == {nodeids[0]}
    assert this_pass(nodeids, moved, only_moved=False) == {nodeids[1]}


def test_the_devices_suite_runs_the_projects_ports_counted_apart_with_their_departures(
    tmp_path: Path, backend_env: dict[str, str]
) -> None:
    root = project_with(
        tmp_path,
        "class TestOne:\n    def test_one(self):\n        pass\n\n"
        "class TestTwo:\n    def test_two(self):\n        pass\n\n"
        "    def test_three(self):\n        pass\n",
    )
    work = tmp_path / "work"
    args = [*DEVICES_ONLY, "--work", str(work)]
    # the ports: those of the project around the current directory
    done = contract(args, root / "tests", backend_env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "devices (ported, test_lmcache_ports.py)" in done.stdout
    assert "3 tests: 3 passed, 0 failed, 0 skipped" in done.stdout
    # the kit's ports' departures, whatever the project subclasses
    assert ported.departures().strip() in done.stdout
    assert [p.name for p in work.glob("contract-*.xml")] == ["contract-devices.xml"]


def test_a_failing_port_fails_the_run_and_a_devices_suite_without_ports_is_refused(
    tmp_path: Path, backend_env: dict[str, str]
) -> None:
    root = project_with(tmp_path, "def test_one():\n    assert 0\n")
    args = [*DEVICES_ONLY, "--work", str(tmp_path / "w")]
    file = root.relative_to(tmp_path) / "tests" / projects.PORTS_FILE
    ports = ["--ports", str(file)]
    failed = contract([*args, *ports], tmp_path, backend_env)  # relative to cwd
    assert failed.returncode == 1 and "1 tests: 0 passed, 1 failed" in failed.stdout
    refused = contract(args, tmp_path, backend_env)  # no project here, no --ports
    assert refused.returncode != 0 and "pass --ports PATH" in refused.stderr


def test_a_pass_whose_lmcache_ops_are_not_the_plugins_is_stopped_before_it_runs(
    tmp_path: Path, backend_env: dict[str, str]
) -> None:
    (tmp_path / "test_anything.py").write_text("def test_anything():\n    pass\n")
    settings = {"skip": {}, "device_type_only": {}, "not_collected": []}
    env = {**backend_env, SETTINGS_ENV_VAR: json.dumps({**settings, "pass": "backend"})}
    env[PACKAGE_ENV_VAR] = "kit_test_contract_bar"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "lmcache_device_kit.contract.pytest_plugin", str(tmp_path)]
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        "not kit_test_contract_bar's: the run would prove nothing"
        in done.stdout + done.stderr
    )
