# SPDX-License-Identifier: Apache-2.0
"""The install order: torch, lmcache with its command line's undeclared dependencies,
the kit, the wheel with its test extra, the wheel itself, the emulator."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json

# Third Party
import pytest

# First Party
from lmcache_device_kit.install import (
    CLI_EXTRAS,
    environment_steps,
    lmcache_requirements,
    main,
    plugin_steps,
)

PYPROJECT = """
[project]
name = "lmcache-bar-device"
dependencies = ["lmcache>=0.5.4,<=0.5.6"]

[project.optional-dependencies]
test = ["pytest>=8", "lmcache-device-kit==0.1.0"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


@pytest.mark.parametrize(
    ("lmcache", "expected"),
    [
        ("0.5.4", ["lmcache==0.5.4", "openai"]),
        ("0.5.6", ["lmcache==0.5.6"]),
        ("0.5.7rc2", ["lmcache==0.5.7rc2"]),
    ],
)
def test_a_release_the_table_knows_is_pinned_with_its_own_cli_dependencies(
    lmcache: str, expected: list[str]
) -> None:
    assert lmcache_requirements(lmcache) == expected


@pytest.mark.parametrize(
    ("lmcache", "expected"),
    [
        ("0.9.0", ["lmcache==0.9.0"]),
        ("pre", ["--upgrade", "--pre", "lmcache"]),
        ("lmcache @ git+https://x/y", ["--upgrade", "lmcache @ git+https://x/y"]),
    ],
)
def test_an_lmcache_the_table_does_not_know_gets_every_cli_dependency_it_lists(
    lmcache: str, expected: list[str]
) -> None:
    every = sorted({extra for extras in CLI_EXTRAS.values() for extra in extras})
    assert every, "the table lists no dependency: this test would prove nothing"
    assert lmcache_requirements(lmcache) == expected + every


def test_torch_comes_first_then_lmcache_then_the_kit_the_wheel_and_the_emulator(
    project: Path,
) -> None:
    steps = environment_steps(["torch", "--index-url", "https://i"], "0.5.6")
    steps += plugin_steps(project, "w.whl", ["kit-dir"], "emu")
    assert steps == [
        ("torch", ["torch", "--index-url", "https://i"]),
        ("lmcache", ["lmcache==0.5.6"]),
        ("kit", ["kit-dir"]),
        ("test extra", ["w.whl[test]"]),
        ("wheel", ["--force-reinstall", "--no-deps", "w.whl"]),
        ("emulator", ["--force-reinstall", "--no-deps", "emu"]),
    ]


def test_past_the_pin_only_the_test_extra_resolves_so_lmcache_stays(
    project: Path,
) -> None:
    """The wheel's own lmcache range would replace an lmcache outside it (the
    canary)."""
    steps = dict(plugin_steps(project, "w.whl", past_pin=True))
    assert "kit" not in steps and "emulator" not in steps
    assert steps["test extra"] == ["pytest>=8", "lmcache-device-kit==0.1.0"]


def test_the_command_line_prints_the_steps_as_json_splitting_pip_arguments(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--torch=torch --index-url https://i", "--lmcache", "pre", "--wheel", "w"]
    assert main([*argv, "--project", str(project), "--past-pin"]) == 0
    steps = json.loads(capsys.readouterr().out)
    assert [what for what, _ in steps] == ["torch", "lmcache", "test extra", "wheel"]
    assert steps[0][1] == ["torch", "--index-url", "https://i"]
