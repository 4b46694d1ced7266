# SPDX-License-Identifier: Apache-2.0
"""A render takes its harness from the kit (kit/, lmcache-device-kit): from where the vendor says, else at the
version it pins from the index, else from the template it was rendered from (cruft's record, or the hook's)."""

from __future__ import annotations

import json
import os
import re
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
from tasks.variants import LMCACHE_RELEASES, PRERELEASES, ROOT

#: Where a render made by these tests says the template is (its .template.json: the template's directory).
TEMPLATE_ROOT = ROOT.resolve()


#: A stand-in for nox's session, running the rendered noxfile's ``install_kit`` or ``install_plugin`` (argv[1]:
#: which, and its arguments): ``install`` and pip under ``run_install`` are recorded (pip answering with the exit
#: codes $PIP_CODES gives, in turn); ``run`` runs its command with the kit from this checkout on the path (the
#: installed-kit probe, ``python -m lmcache_device_kit.install``); ``error`` exits with the message.
SESSION = """
import json, os, runpy, subprocess, sys
noxfile = runpy.run_path("noxfile.py")
installs, codes = [], json.loads(os.environ.get("PIP_CODES", "[0]"))
class Session:
    name, venv_backend = "tests(0.5.6)", "virtualenv"
    def install(self, *args):
        installs.append(list(args))
    def run_install(self, *args, **kwargs):
        installs.append(list(args[args.index("install") + 1:]))
        return f"ERROR: pip said no\\n{codes.pop(0)}"
    def run(self, *args, silent=False, log=True):
        env = {**os.environ, "PYTHONPATH": os.environ["KIT_SOURCE"]}
        return subprocess.run([sys.executable, *args[1:]], env=env, check=True, capture_output=True,
                              text=True).stdout
    def log(self, *args):
        print(*args, file=sys.stderr)
    def error(self, *args):
        sys.exit(" ".join(args))
noxfile["install_plugin"].__globals__["build_wheel"] = lambda session: "dist/w.whl"
function, *arguments = json.loads(sys.argv[1])
noxfile[function](Session(), *arguments)
print(json.dumps(installs))
"""


def session_installs(project: Path, function: str, *arguments: object, codes: tuple[int, ...] = (0,),
                     kit_env: str | None = None) -> tuple[int, list[list[str]], str]:  # fmt: skip
    """Run the render's noxfile ``function`` on the stand-in session, in a process of its own (a noxfile registers
    its sessions when it runs): (exit code, what it installed, what it said)."""
    env = {k: v for k, v in os.environ.items() if k != "LMCACHE_DEVICE_KIT"}
    env |= {"KIT_SOURCE": str(KIT / "src"), "TORCH_REQUIREMENT": "torch --index-url https://i",
            "PIP_CODES": json.dumps(codes)} | ({"LMCACHE_DEVICE_KIT": kit_env} if kit_env is not None else {})  # fmt: skip
    done = subprocess.run([sys.executable, "-c", SESSION, json.dumps([function, *arguments])], cwd=project, env=env,
                          capture_output=True, text=True)  # fmt: skip
    installs = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else []
    return done.returncode, installs, done.stderr


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
def test_the_rendered_noxfile_takes_the_kit_from_the_index_then_from_the_template_cruft_recorded(
    render: Callable[..., Path], template: str, expected: str
) -> None:
    project = render()
    commit = "0123456789abcdef0123456789abcdef01234567"
    (project / ".cruft.json").write_text(json.dumps({"template": template, "commit": commit}))
    code, installs, said = session_installs(project, "install_kit", codes=(1, 0))
    assert code == 0, said
    pinned = f"lmcache-device-kit[test]=={kit_version()}"
    assert installs == [[pinned], [f"lmcache-device-kit[test] @ {expected.format(commit=commit)}#subdirectory=kit"]]
    assert "lmcache-device-kit from the template (.cruft.json)" in said


def test_the_rendered_noxfile_takes_the_kit_from_the_template_directory_it_was_rendered_from(
    render: Callable[..., Path],
) -> None:
    """No .cruft.json: the .template.json the hook wrote (a local template: its directory); the pin first."""
    project = render()
    code, installs, said = session_installs(project, "install_kit", codes=(1, 0))
    assert code == 0, said
    assert installs == [[f"lmcache-device-kit[test]=={kit_version()}"], [f"lmcache-device-kit[test] @ {KIT.as_uri()}"]]


def test_the_rendered_noxfile_takes_the_kit_from_the_environment_alone_when_it_is_set(
    render: Callable[..., Path],
) -> None:
    project = render()
    assert session_installs(project, "install_kit", kit_env=f"{KIT} --no-build-isolation")[1] == [
        [str(KIT), "--no-build-isolation"]]  # fmt: skip
    code, installs, said = session_installs(project, "install_kit", codes=(1,), kit_env=str(KIT))
    assert code != 0 and installs == [] and "1. LMCACHE_DEVICE_KIT: ERROR: pip said no" in said
    assert "2. the package index" not in said


def test_the_rendered_noxfile_stops_naming_every_source_when_none_gives_the_kit(render: Callable[..., Path]) -> None:
    project = render()
    code, _, said = session_installs(project, "install_kit", codes=(1, 1))
    assert code != 0
    for line in ("could not be installed; tried, in order:", "1. LMCACHE_DEVICE_KIT: not set",
                 "2. the package index: ERROR: pip said no", "3. the template (.template.json): ERROR: pip said no",
                 f'LMCACHE_DEVICE_KIT="{TEMPLATE_ROOT}/kit" nox -s "tests(0.5.6)"'):  # fmt: skip
        assert line in said, said


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


@pytest.mark.parametrize(
    ("emulator", "arguments"), [("yes", ["0.5.4"]), ("no", ["0.5.6"]), ("yes", ["pre", True])]
)
def test_the_rendered_noxfile_installs_what_the_kit_says_in_its_order(
    render: Callable[..., Path], emulator: str, arguments: list[str | bool]
) -> None:
    """torch, lmcache with its command line's undeclared dependencies, the kit first of all (it says the rest),
    then the wheel with its test extra (past the pin: the extra alone), the wheel itself, the emulator."""
    project = render(emulator=emulator)
    code, installs, said = session_installs(project, "install_plugin", *arguments)
    assert code == 0, said
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


def test_the_rendered_readme_and_the_kits_install_command_list_the_kits_sources_in_the_order_the_sessions_try_them(
    render: Callable[..., Path],
) -> None:
    """The README's "Where the kit comes from" names, item by item, the sources of kit_source.ORDER (which
    ``python -m lmcache_device_kit.install --help`` prints and the sessions try), and the message's fix."""
    sys.path.insert(0, str(KIT / "src"))
    from lmcache_device_kit.kit_source import ORDER

    readme = (render() / "README.md").read_text()
    section = readme[readme.index("### Where the kit comes from") :].split("\n## ")[0]
    items = [item.replace("`", "").split(":")[0] for item in re.findall(r"^\d\. (.+)$", section, re.M)]
    assert items == [source.split(":")[0] for source in ORDER]
    assert 'LMCACHE_DEVICE_KIT="$PWD/lmcache-device-template/kit" nox -s <the session>' in section
