# SPDX-License-Identifier: Apache-2.0
"""The kit learns a backend from its names module alone, and says how to fix it
when it cannot."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from pathlib import Path
import os
import subprocess
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend

NAMES = """
DEVICE_TYPE = "bar"
BACKEND_NAME = "bar_backend"
TORCH_MODULE_NAME = "bar"
TORCH_EXTENSION_MODULE = "torch_bar"
SLOW_PATH_MARK = "bar_backend slow path:"
EMULATOR_ENV_VAR = "LMCACHE_BAR_EMULATOR"
"""


#: A package ``__init__`` the kit must never run: it reads names.py alone.
MUST_NOT_RUN = "raise ImportError('imported the package')\n"


@pytest.fixture
def plugin(fake_plugin: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A plugin ``kit_test_bar``: a names module, and an __init__ that must not run."""
    monkeypatch.delenv(kit_backend.PACKAGE_ENV_VAR, raising=False)
    kit_backend.current.cache_clear()
    return fake_plugin("kit_test_bar", {"__init__.py": MUST_NOT_RUN, "names.py": NAMES})


def test_a_backend_is_read_from_its_names_module_with_absent_optional_names_empty(
    fake_plugin: Callable[..., str],
) -> None:
    names = NAMES.replace("EMULATOR_ENV_VAR", "_UNUSED")
    fake_plugin("kit_test_plain", {"names.py": names})
    backend = kit_backend.Backend.of("kit_test_plain")
    assert (backend.device_type, backend.backend_name, backend.emulator_env_var) == (
        "bar",
        "bar_backend",
        "",
    )
    assert not backend.has_emulator


def test_a_names_module_without_a_required_name_is_refused_naming_it(
    fake_plugin: Callable[..., str],
) -> None:
    fake_plugin("kit_test_partial", {"names.py": 'DEVICE_TYPE = "bar"\n'})
    with pytest.raises(kit_backend.BackendNotConfigured, match="BACKEND_NAME"):
        kit_backend.Backend.of("kit_test_partial")


def test_without_a_configured_backend_the_error_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(kit_backend.PACKAGE_ENV_VAR, raising=False)
    kit_backend.current.cache_clear()
    with pytest.raises(kit_backend.BackendNotConfigured, match="conftest.py"):
        kit_backend.current()


def test_a_package_that_cannot_be_imported_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, "kit_test_not_installed")
    kit_backend.current.cache_clear()
    with pytest.raises(kit_backend.BackendNotConfigured, match="PACKAGE"):
        kit_backend.current()
    kit_backend.current.cache_clear()


def test_a_backend_in_use_is_the_backend_of_the_processes_the_run_starts(
    plugin: str, tmp_path: Path
) -> None:
    """``use`` reads names.py without importing the plugin package's __init__ (it raises
    here), and a child process finds the same backend through the environment."""
    backend = kit_backend.use(plugin)
    assert backend.emulator_env_var == "LMCACHE_BAR_EMULATOR"
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from lmcache_device_kit.backend import current; print(current())",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=True,
    )
    assert "backend_name='bar_backend'" in child.stdout


def test_a_backend_inside_another_package_is_read_without_importing_its_parents(
    fake_plugin: Callable[..., str],
) -> None:
    """As an in-tree backend in LMCache's tree, whose parent package imports lmcache."""
    fake_plugin(
        "kit_test_tree",
        {
            "__init__.py": MUST_NOT_RUN,
            "devices/__init__.py": "",
            "devices/bar/__init__.py": "",
            "devices/bar/names.py": NAMES,
        },
    )
    backend = kit_backend.Backend.of("kit_test_tree.devices.bar")
    assert (backend.package, backend.backend_name) == (
        "kit_test_tree.devices.bar",
        "bar_backend",
    )
    assert "kit_test_tree" not in sys.modules


@pytest.mark.parametrize(
    ("torch_module", "extension", "present"),
    [("cpu", "", True), ("kit_test_no", "", False), ("kit_test_no", "kit_x", False)],
)
def test_a_device_is_present_only_where_its_torch_module_says_it_is_available(
    torch_module: str, extension: str, present: bool
) -> None:
    """torch.cpu reports itself available; a device module torch lacks, even after
    its extension was asked for (not installed), is absent rather than an error."""
    backend = kit_backend.Backend(
        package="kit_test",
        device_type=torch_module,
        backend_name=torch_module,
        torch_module_name=torch_module,
        torch_extension_module=extension,
        slow_path_mark="",
    )
    assert backend.device_present() is present


def test_the_distribution_of_a_package_is_the_one_that_ships_its_files(
    fake_plugin: Callable[..., str], tmp_path: Path
) -> None:
    """Another wheel's top_level.txt naming the package (an empty directory setuptools
    took for a namespace package) and a second metadata directory of the same
    distribution are left out."""
    package = fake_plugin("lmcache_bar")
    for dist, top_level, shipped in (
        ("lmcache_bar_device", package, f"{package}/__init__.py"),
        ("lmcache_acme_device", f"lmcache_acme\n{package}", "lmcache_acme/__init__.py"),
    ):
        info = tmp_path / f"{dist}-0.1.0.dist-info"
        info.mkdir()
        name = dist.replace("_", "-")
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n")
        (info / "top_level.txt").write_text(top_level + "\n")
        (info / "RECORD").write_text(f"{shipped},,\n")
    assert kit_backend.distributions_of(package) == ["lmcache-bar-device"]
    assert kit_backend.distributions_of(f"{package}.device") == ["lmcache-bar-device"]
