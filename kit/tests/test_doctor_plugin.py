# SPDX-License-Identifier: Apache-2.0
"""The doctor finds the plugin to examine from its backend name, and says what to
pass when that is not one plugin made from the template."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
import os
import subprocess
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit.doctor.plugin import GROUP, NoPlugin, package_of, select


def entry_point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=GROUP)


def test_without_a_name_the_doctor_examines_the_only_installed_plugin(
    fake_plugin: Callable[..., str],
) -> None:
    package = fake_plugin("kit_test_one")
    found = select(None, [entry_point("one", f"{package}.device:OneSpec")])
    assert found == package


def test_several_installed_plugins_are_named_with_the_option_that_picks_one(
    fake_plugin: Callable[..., str],
) -> None:
    one, two = fake_plugin("kit_test_one"), fake_plugin("kit_test_two")
    installed = [entry_point("one", f"{one}.device:S"), entry_point("two", f"{two}:S")]
    with pytest.raises(NoPlugin, match=r"\(one, two\): name one, .*--backend NAME"):
        select(None, installed)
    assert select("two", installed) == two


def test_no_installed_plugin_and_an_unknown_name_say_what_to_install_or_pass() -> None:
    with pytest.raises(NoPlugin, match="install the plugin's wheel"):
        select(None, [])
    with pytest.raises(NoPlugin, match=r"named 'three' \(installed: one\)"):
        select("three", [entry_point("one", "kit_test_x.device:S")])


def test_a_backend_name_another_plugin_claims_too_is_the_template_plugins(
    fake_plugin: Callable[..., str],
) -> None:
    """An impostor without the template's names.py cannot be examined: the backend
    is the plugin's whose package has one (the doctor then reports the clash)."""
    package = fake_plugin("kit_test_one")
    claims = [
        entry_point("one", f"{package}.device:OneSpec"),
        entry_point("one", "kit_test_impostor:Spec"),
    ]
    assert select("one", claims) == package
    with pytest.raises(NoPlugin, match="no package with a names.py"):
        select("one", claims[1:])


def test_an_entry_point_into_a_package_or_its_module_finds_the_package(
    fake_plugin: Callable[..., str],
) -> None:
    """A wheel's spec sits in ``<package>.device``; an in-tree one in the package."""
    package = fake_plugin("kit_test_one")
    assert package_of(entry_point("one", f"{package}.device:S")) == package
    assert package_of(entry_point("one", f"{package}:S")) == package
    assert package_of(entry_point("one", "kit_test_nowhere.device:S")) is None


def test_the_command_refuses_to_guess_between_installed_plugins(
    tmp_path: Path,
) -> None:
    """Two installed plugins and no --backend: exit 2 before any check, both named."""
    for name in ("kit_test_one", "kit_test_two"):
        info = tmp_path / f"{name}-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n")
        (info / "entry_points.txt").write_text(f"[{GROUP}]\n{name} = {name}:S\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    command = [sys.executable, "-m", "lmcache_device_kit.doctor"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "kit_test_one, kit_test_two" in done.stderr
    assert "--backend NAME" in done.stderr
