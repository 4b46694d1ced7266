# SPDX-License-Identifier: Apache-2.0
"""The wheel check: a plugin's wheel, read against its own pyproject.toml."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import textwrap
import zipfile

# Third Party
from packaging.requirements import Requirement
import pytest

# First Party
from lmcache_device_kit.wheel_check import main, plugin_wheel_problems

PYPROJECT = """
[project]
name = "lmcache-bar-device"
license = "Apache-2.0"
dependencies = ["lmcache>=0.5.4,<=0.5.6", "lmcache-device-kit>=0.2.0,<0.3"]
scripts = {lmcache-bar-doctor = "lmcache_bar.doctor:main"}

[project.optional-dependencies]
test = ["lmcache-device-kit==0.2.0"]

[project.entry-points."lmcache.device_plugins"]
bar = "lmcache_bar.device:BarDeviceSpec"
"""
INFO = "lmcache_bar_device-0.1.0.dist-info"
METADATA = [
    "Metadata-Version: 2.4",
    "Name: lmcache-bar-device",
    "License-Expression: Apache-2.0",
    "License-File: LICENSE",
    "Requires-Dist: lmcache<=0.5.6,>=0.5.4",
    "Requires-Dist: lmcache-device-kit<0.3,>=0.2.0",
    'Requires-Dist: lmcache-device-kit==0.2.0; extra == "test"',
]
ENTRY_POINTS = """
[console_scripts]
lmcache-bar-doctor = lmcache_bar.doctor:main

[lmcache.device_plugins]
bar = lmcache_bar.device:BarDeviceSpec
"""
FILES = ["lmcache_bar/device.py", "lmcache_bar/py.typed", f"{INFO}/licenses/LICENSE"]


def make(
    tmp_path: Path,
    metadata: list[str] = METADATA,
    entry_points: str = ENTRY_POINTS,
    files: list[str] = FILES,
    pyproject: str = PYPROJECT,
) -> Path:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    wheel = tmp_path / "lmcache_bar_device-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{INFO}/METADATA", "\n".join(metadata) + "\n")
        archive.writestr(f"{INFO}/entry_points.txt", entry_points)
        for name in files:
            archive.writestr(name, "")
    return wheel


def test_a_wheel_as_its_pyproject_declares_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plugin_wheel_problems(make(tmp_path), tmp_path) == []
    assert main([str(make(tmp_path)), "--project", str(tmp_path)]) == 0
    assert "wheel OK" in capsys.readouterr().out


def test_a_wheel_without_its_lmcache_entry_point_fails(tmp_path: Path) -> None:
    wheel = make(tmp_path, entry_points=ENTRY_POINTS.split("[lmcache")[0])
    problems = plugin_wheel_problems(wheel, tmp_path)
    assert problems == [
        "entry point [lmcache.device_plugins] bar = lmcache_bar.device:BarDeviceSpec "
        "missing"
    ]


def test_a_wheel_requiring_more_than_lmcache_and_the_kit_or_losing_an_extra_fails(
    tmp_path: Path,
) -> None:
    metadata = [*METADATA[:-1], "Requires-Dist: torch"]
    problems = plugin_wheel_problems(make(tmp_path, metadata=metadata), tmp_path)
    assert (
        "the production wheel requires torch (lmcache and lmcache-device-kit alone: "
        "the rest comes with extras)" in problems
    )
    assert (
        "METADATA lacks 'lmcache-device-kit==0.2.0' under the 'test' extra" in problems
    )


@pytest.mark.parametrize(
    "kit",
    [
        "lmcache-device-kit==0.2.0",
        "lmcache-device-kit>=0.2.0",
        "lmcache-device-kit>=0.2.0,<1",
        "lmcache-device-kit>=0.2.0,<0.4",
        "lmcache-device-kit<0.3",
    ],
)
def test_a_wheel_requiring_the_kit_outside_one_minor_series_fails(
    tmp_path: Path, kit: str
) -> None:
    """A pin would keep two plugins from one environment, an open or wider range
    would let in a kit with other shims."""
    metadata = [METADATA[-3], f"Requires-Dist: {kit}", *METADATA[:-3], METADATA[-1]]
    problems = plugin_wheel_problems(make(tmp_path, metadata=metadata), tmp_path)
    assert problems == [
        f"the production wheel requires {Requirement(kit)}: require the kit in a "
        "compatible range, lmcache-device-kit>=X.Y.Z,<X.(Y+1) (one minor series), so "
        "that plugins made from other template commits share an environment"
    ]


def test_a_wheel_without_the_kit_or_whose_test_extra_pins_a_kit_outside_it_fails(
    tmp_path: Path,
) -> None:
    without = [line for line in METADATA if line != METADATA[-2]]
    problems = plugin_wheel_problems(make(tmp_path, metadata=without), tmp_path)
    assert problems == [
        "the production wheel does not require lmcache-device-kit: the release shims "
        "it runs on (lmcache_device_kit.compat) would be missing where it is installed"
    ]
    older = [*METADATA[:-2], "Requires-Dist: lmcache-device-kit<0.2,>=0.1.0"]
    (tmp_path / "old").mkdir()
    wheel = make(tmp_path / "old", metadata=[*older, METADATA[-1]])
    text = (tmp_path / "old" / "pyproject.toml").read_text()
    (tmp_path / "old" / "pyproject.toml").write_text(
        text.replace(">=0.2.0,<0.3", ">=0.1.0,<0.2")
    )
    assert plugin_wheel_problems(wheel, tmp_path / "old") == [
        "the 'test' extra pins lmcache-device-kit==0.2.0, outside the wheel's own "
        "requirement lmcache-device-kit<0.2,>=0.1.0"
    ]


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ("lmcache_bar/_kernels.cpp", "the wheel ships C++ sources"),
        ("lmcache_bar_emulator/_streams.py", "the production wheel ships emulator"),
        ("lmcache_bar/emulator/csrc/memory.h", "the production wheel ships emulator"),
    ],
)
def test_a_wheel_shipping_sources_or_the_emulator_fails(
    tmp_path: Path, member: str, problem: str
) -> None:
    wheel = make(tmp_path, files=[*FILES, member])
    assert any(p.startswith(problem) for p in plugin_wheel_problems(wheel, tmp_path))


def test_a_wheel_without_licence_or_py_typed_fails_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = make(tmp_path, metadata=METADATA[:2], files=FILES[:1])
    assert main([str(wheel), "--project", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for missing in (
        "License-Expression: Apache-2.0",
        "lmcache_bar/py.typed",
        f"{INFO}/licenses/LICENSE",
    ):
        assert missing in err


#: A wheel with native ops: its compiled module, the torch it pins, the build's pin.
KERNELS = "lmcache_bar/_kernels.cpython-311-x86_64-linux-gnu.so"
NATIVE_PYPROJECT = (
    '[build-system]\nrequires = ["setuptools>=77", "torch==2.13.0"]\n'
    + PYPROJECT.replace('<0.3"]', '<0.3", "torch==2.13.0"]')
)


@pytest.mark.parametrize(
    ("torch", "build", "problem"),
    [
        ("torch==2.13.0", "torch==2.13.0", None),
        (None, "torch==2.13.0", "the wheel ships native ops (lmcache_bar/_kernels"),
        ("torch>=2.13", "torch==2.13.0", "the wheel ships native ops (lmcache_bar/_ke"),
        ("torch==2.13.*", "torch==2.13.0", "the wheel ships native ops (lmcache_bar/_"),
        ("torch==2.13.0", "torch", "the wheel requires torch==2.13.0, but pyproject"),
        ("torch==2.13.0", "torch==2.12.0", "the wheel requires torch==2.13.0, but py"),
    ],
)
def test_a_wheel_with_native_ops_pins_the_torch_it_is_built_against(
    tmp_path: Path, torch: str | None, build: str, problem: str | None
) -> None:
    """A native module is built for one torch's C++ ABI: the wheel requires exactly
    that torch, the one the build requires; a pure wheel requires no torch."""
    metadata = METADATA + ([f"Requires-Dist: {torch}"] if torch else [])
    pyproject = NATIVE_PYPROJECT.replace('"torch==2.13.0"]\n', f'"{build}"]\n', 1)
    wheel = make(tmp_path, metadata, files=[*FILES, KERNELS], pyproject=pyproject)
    found = plugin_wheel_problems(wheel, tmp_path)
    if problem is None:
        assert found == []
    else:
        assert [p for p in found if p.startswith(problem)] == found, found
        assert len(found) == 1


def test_a_pure_wheel_requiring_torch_fails(tmp_path: Path) -> None:
    """Without native ops the wheel leaves torch to lmcache (and the deployment)."""
    metadata = [*METADATA, "Requires-Dist: torch==2.13.0"]
    found = plugin_wheel_problems(make(tmp_path, metadata), tmp_path)
    assert found == [
        "the production wheel requires torch==2.13.0 (lmcache and lmcache-device-kit "
        "alone: the rest comes with extras)"
    ]


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        ('"torch==2.13.0", "torch-fooext==1.2.0"', None),
        ('"torch==2.13.0"', "the wheel requires torch-fooext==1.2.0 (an exact pin"),
        ('"torch==2.13.0", "torch-fooext==1.1.0"', "the wheel requires torch-fooext"),
    ],
)
def test_a_native_wheel_may_pin_its_torch_extension_built_against_the_same(
    tmp_path: Path, build: str, problem: str | None
) -> None:
    """The vendor's torch extension, whose libraries the native ops link, is a
    requirement of the wheel pinned as torch is, and the build requires the same
    release (an isolated build compiles against it)."""
    metadata = [*METADATA, "Requires-Dist: torch==2.13.0"]
    metadata += ["Requires-Dist: torch-fooext==1.2.0"]
    pyproject = NATIVE_PYPROJECT.replace('"torch==2.13.0"]\n', f"{build}]\n", 1)
    wheel = make(tmp_path, metadata, files=[*FILES, KERNELS], pyproject=pyproject)
    found = plugin_wheel_problems(wheel, tmp_path)
    assert found == ([] if problem is None else [found[0]]), found
    if problem is not None:
        assert found[0].startswith(problem), found
