# SPDX-License-Identifier: Apache-2.0
"""A render takes its harness from the kit (kit/, lmcache-device-kit): at the kit's own version, from the
template commit cruft recorded, or from where the vendor says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hooks.kit_version import kit_requirement as kit_requirement_in_renders
from hooks.kit_version import kit_version as kit_version_in_renders
from tasks.kit import kit_structure_problems, kit_wheel_problems
from tasks.checks import import_circles, package_imports
from tasks.kit_source import CLI_EXTRAS, KIT, compatible_range, environment_steps, kit_test_requirements, kit_version
from tasks.variants import LMCACHE_RELEASES, PRERELEASES


def kit_requirement(project: Path, kit_env: str | None = None) -> list[str]:
    """What the rendered noxfile installs as the kit, asked in a process of its own (a noxfile registers its
    sessions when it runs)."""
    code = "import json, runpy; print(json.dumps(runpy.run_path('noxfile.py')['kit_requirement']()))"
    env = {k: v for k, v in os.environ.items() if k != "LMCACHE_DEVICE_KIT"}
    env |= {"LMCACHE_DEVICE_KIT": kit_env} if kit_env is not None else {}
    done = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_render_pins_the_kit_at_the_version_the_kit_declares_and_takes_pytest_from_its_test_extra(
    render: Callable[..., Path],
) -> None:
    """pytest and pytest-xdist are pinned once, in the kit's test extra (the reason beside it): a render's test
    extra takes them through ``lmcache-device-kit[test]`` and pins none of its own."""
    test_extra = tomllib.loads((render() / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert f"lmcache-device-kit[test]=={kit_version()}" in test_extra
    assert kit_version_in_renders() == kit_version()
    names = {Requirement(text).name for text in kit_test_requirements()}
    assert names == {"pytest", "pytest-xdist"}
    assert not names & {Requirement(text).name for text in test_extra}


@pytest.mark.parametrize(("version", "expected"), [("0.2.0", ">=0.2.0,<0.3"), ("0.2.7", ">=0.2.7,<0.3"), ("1.9.1", ">=1.9.1,<1.10")])
def test_the_kit_range_a_render_requires_is_the_compatible_range_the_kits_wheel_check_accepts(
    version: str, expected: str
) -> None:
    """The hook that renders the wheel's requirement of the kit and the kit's wheel check agree on what a compatible
    range is: the release the render was made with, up to the next minor one."""
    assert kit_requirement_in_renders(version) == f"lmcache-device-kit{expected}"
    assert compatible_range(version) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("gh:acme/lmcache-device-template", "git+https://github.com/acme/lmcache-device-template@{commit}"),
        ("https://example.com/t.git", "git+https://example.com/t.git@{commit}"),
    ],
)
def test_the_rendered_noxfile_takes_the_kit_from_the_template_commit_cruft_recorded(
    render: Callable[..., Path], template: str, expected: str
) -> None:
    project = render()
    commit = "0123456789abcdef0123456789abcdef01234567"
    (project / ".cruft.json").write_text(json.dumps({"template": template, "commit": commit}))
    assert kit_requirement(project) == [f"lmcache-device-kit @ {expected.format(commit=commit)}#subdirectory=kit"]


def test_the_rendered_noxfile_takes_the_kit_from_the_environment_first_and_else_from_its_pin(
    render: Callable[..., Path],
) -> None:
    project = render()
    assert kit_requirement(project) == [f"lmcache-device-kit[test]=={kit_version()}"]
    assert kit_requirement(project, f"{KIT} --no-build-isolation") == [str(KIT), "--no-build-isolation"]


def test_the_kit_has_no_import_circle_and_no_module_longer_than_a_screen() -> None:
    assert kit_structure_problems() == []


@pytest.mark.parametrize("package", ["tasks", "hooks"])
def test_the_templates_own_automation_has_no_import_circle(package: str) -> None:
    """Counting imports inside functions too: one there hides a circle from Python, not from a reader."""
    root = Path(__file__).resolve().parent.parent
    assert import_circles(package_imports(root / package, package)) == []


def test_a_kit_whose_version_is_not_written_out_is_refused_naming_the_fix(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "lmcache-device-kit"\ndynamic = ["version"]\n')
    with pytest.raises(RuntimeError, match="static version"):
        kit_version_in_renders(tmp_path / "pyproject.toml")


@pytest.mark.parametrize(("tool", "module"), [("contract", "contract.runner"), ("canary", "canary")])
def test_the_rendered_noxfile_runs_the_kits_tool_told_its_backend_and_project_as_the_kit_accepts(
    render: Callable[..., Path], tool: str, module: str
) -> None:
    """``nox -s lmcache_contract`` and ``nox -s canary`` run ``python -m lmcache_device_kit.<tool>`` with options
    the kit's own parser takes (the kit from this checkout), naming the render's backend and the render."""
    project = render()
    code = f"import json, runpy; print(json.dumps(runpy.run_path('noxfile.py')['kit']({tool!r})))"
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    command = json.loads(done.stdout.splitlines()[-1])
    assert command[:3] == ["python", "-m", f"lmcache_device_kit.{tool}"]
    parse = (f"import sys; from lmcache_device_kit.{module} import parse_args; "
             "o = parse_args(sys.argv[1:]); print(o.package, o.project)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(KIT / "src")}
    done = subprocess.run([sys.executable, "-c", parse, *command[3:]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["lmcache_foo", str(project.resolve())]


#: What the rendered noxfile's install_plugin installs, recorded by a stand-in for nox's session: its
#: ``run`` runs the command (``python -m lmcache_device_kit.install``, the kit from this checkout).
INSTALLS = """
import json, os, runpy, subprocess, sys
noxfile = runpy.run_path("noxfile.py")
installs = []
class Session:
    def install(self, *args):
        installs.append(list(args))
    def run(self, *args, silent=False):
        env = {**os.environ, "PYTHONPATH": os.environ["KIT_SOURCE"]}
        return subprocess.run([sys.executable, *args[1:]], env=env, check=True, capture_output=True,
                              text=True).stdout
noxfile["install_plugin"].__globals__["build_wheel"] = lambda session: "dist/w.whl"
noxfile["install_plugin"](Session(), *json.loads(sys.argv[1]))
print(json.dumps(installs))
"""


@pytest.mark.parametrize(
    ("emulator", "arguments"), [("yes", ["0.5.4"]), ("no", ["0.5.6"]), ("yes", ["pre", True])]
)
def test_the_rendered_noxfile_installs_what_the_kit_says_in_its_order(
    render: Callable[..., Path], emulator: str, arguments: list[str | bool]
) -> None:
    """torch, lmcache with its command line's undeclared dependencies, the kit first of all (it says the rest),
    then the wheel with its test extra (past the pin: the extra alone), the wheel itself, the emulator."""
    project = render(emulator=emulator)
    env = {**os.environ, "KIT_SOURCE": str(KIT / "src"), "TORCH_REQUIREMENT": "torch --index-url https://i"}
    env.pop("LMCACHE_DEVICE_KIT", None)
    done = subprocess.run([sys.executable, "-c", INSTALLS, json.dumps(arguments)], cwd=project, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    installs = json.loads(done.stdout.splitlines()[-1])
    lmcache, *past_pin = arguments
    test_extra = tomllib.loads((project / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    expected = [[f"lmcache-device-kit[test]=={kit_version()}"],
                *[args for _, args in environment_steps(["torch", "--index-url", "https://i"], str(lmcache))],
                test_extra if past_pin else ["dist/w.whl[test]"], ["--force-reinstall", "--no-deps", "dist/w.whl"]]  # fmt: skip
    if emulator == "yes":
        expected.append(["--force-reinstall", "--no-deps", str(project.resolve() / "emulator")])
    assert installs == expected
    if lmcache == "0.5.4":  # LMCache's fact, not only the kit's word: 0.5.4's command line imports openai
        assert ["lmcache==0.5.4", "openai"] in installs


def test_every_release_the_template_proves_has_its_command_lines_dependencies_in_the_kit() -> None:
    """Adding a release to cookiecutter.json means checking what its ``lmcache server`` imports undeclared (an
    lmcache the kit's table does not know gets every dependency it lists, which hides what the release needs)."""
    assert sorted(set(LMCACHE_RELEASES + PRERELEASES) - set(CLI_EXTRAS)) == []


def test_a_kit_wheel_without_the_doctor_command_is_refused_naming_it(tmp_path: Path) -> None:
    """A plugin's doctor command runs the kit's; the kit's own is its console script."""
    wheel = tmp_path / f"lmcache_device_kit-{kit_version()}-py3-none-any.whl"
    info = f"lmcache_device_kit-{kit_version()}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{info}/METADATA", f"Name: lmcache-device-kit\nVersion: {kit_version()}\n")
        archive.writestr(f"{info}/entry_points.txt", "[console_scripts]\n")
    script = "lmcache-device-doctor = lmcache_device_kit.doctor.cli:main"
    assert f"the kit's entry_points.txt lacks the console script {script}" in kit_wheel_problems(wheel)
