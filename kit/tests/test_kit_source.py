# SPDX-License-Identifier: Apache-2.0
"""Where a render's sessions take the kit from: LMCACHE_DEVICE_KIT, the package index,
the template it was rendered from (cruft's record first), in that order, and the one
message, naming each source and the fix, when none gives it."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import subprocess
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit import install as install_cli
from lmcache_device_kit import kit_source
from lmcache_device_kit.kit_source import Unavailable, install, sources, template

PYPROJECT = """
[project]
name = "lmcache-bar-device"

[project.optional-dependencies]
test = ["pytest>=8", "lmcache-device-kit[test]==0.2.0"]
"""
COMMIT = "0123456789abcdef0123456789abcdef01234567"
GIT = {"template": "gh:acme/lmcache-device-template", "commit": COMMIT}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "lmcache-bar-device"
    root.mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


def record(project: Path, name: str, content: dict[str, str]) -> None:
    (project / name).write_text(json.dumps(content))


class Pip:
    """pip, as a session runs it: each call's arguments kept, the exit codes given."""

    def __init__(self, *codes: int, version: str = "") -> None:
        self.codes, self.calls, self.version = list(codes), [], version

    def __call__(self, arguments: tuple[str, ...]) -> tuple[int, str]:
        self.calls.append(arguments)
        code = self.codes.pop(0)
        said = "ERROR: No matching distribution found for lmcache-device-kit==0.2.0"
        return code, "" if code == 0 else f"Looking in indexes: x\n{said}\n"

    def installed(self) -> str:
        return self.version


def test_a_git_template_recorded_by_the_hook_gives_its_kit_at_the_recorded_commit(
    project: Path,
) -> None:
    url = "file:///srv/lmcache-device-template.git"
    record(project, ".template.json", {"template": url, "url": url, "commit": COMMIT})
    (env, index, source) = sources(project, {})
    assert env.arguments == () and env.absent == "not set"
    assert index.arguments == ("lmcache-device-kit[test]==0.2.0",)
    assert source.name == "the template (.template.json)"
    assert source.arguments == (
        f"lmcache-device-kit[test] @ git+{url}@{COMMIT}#subdirectory=kit",
    )


def test_a_local_template_directory_gives_its_kit_directory(project: Path) -> None:
    record(project, ".template.json", {"template": "..", "directory": "/srv/tpl"})
    assert sources(project, {})[2].arguments == (
        "lmcache-device-kit[test] @ file:///srv/tpl/kit",
    )


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("gh:acme/t", "https://github.com/acme/t"),
        ("git@github.com:acme/t.git", "ssh://git@github.com/acme/t.git"),
        ("git+https://example.com/t.git", "https://example.com/t.git"),
    ],
)
def test_cruft_is_honoured_first_with_its_template_as_pip_clones_it(
    project: Path, given: str, url: str
) -> None:
    record(project, ".template.json", {"url": "file:///other", "commit": "f" * 40})
    record(project, ".cruft.json", {"template": given, "commit": COMMIT})
    found = template(project)
    assert found is not None and (found.record, found.location) == (".cruft.json", url)
    assert found.commit == COMMIT


def test_the_index_comes_before_the_template_and_the_first_that_gives_the_kit_wins(
    project: Path,
) -> None:
    record(project, ".cruft.json", GIT)
    pip = Pip(1, 0)
    said = install(project, {}, pip, pip.installed, 'nox -s "tests(0.5.6)"')
    assert pip.calls[0] == ("lmcache-device-kit[test]==0.2.0",)
    assert "git+https://github.com/acme/lmcache-device-template@" in pip.calls[1][0]
    assert said.startswith("lmcache-device-kit from the template (.cruft.json): pip ")
    assert install(project, {}, Pip(0), Pip().installed, "nox").startswith(
        "lmcache-device-kit from the package index"
    )


def test_lmcache_device_kit_is_tried_first_and_alone(project: Path) -> None:
    record(project, ".cruft.json", GIT)
    pip = Pip(1)
    with pytest.raises(Unavailable) as refused:
        install(project, {"LMCACHE_DEVICE_KIT": "/x/kit"}, pip, pip.installed, "nox")
    assert pip.calls == [("/x/kit",)]
    assert "1. LMCACHE_DEVICE_KIT: ERROR: No matching distribution" in str(
        refused.value
    )
    assert "  2. " not in str(refused.value)


def test_a_kit_installed_at_the_pinned_version_is_kept(project: Path) -> None:
    pip = Pip(version="0.2.0")
    assert install(project, {}, pip, pip.installed, "nox").endswith("installed already")
    assert pip.calls == []


def test_with_no_source_the_message_names_each_one_tried_and_the_exact_fix(
    project: Path,
) -> None:
    """Index without the kit, a template whose clone fails: one message, every
    source with why it gave nothing, then the commands that fix it."""
    url = "https://example.com/lmcache-device-template.git"
    record(project, ".template.json", {"template": url, "url": url, "commit": COMMIT})
    pip = Pip(1, 1)
    with pytest.raises(Unavailable) as refused:
        install(project, {}, pip, pip.installed, 'nox -s "tests(0.5.6)"')
    lines = str(refused.value).splitlines()
    assert lines[0].endswith("could not be installed; tried, in order:")
    assert lines[1] == "  1. LMCACHE_DEVICE_KIT: not set"
    assert lines[2].startswith("  2. the package index: ERROR: No matching")
    assert lines[3] == "     (pip install 'lmcache-device-kit[test]==0.2.0')"
    assert lines[4].startswith("  3. the template (.template.json): ERROR:")
    clone = f"  git clone {url} lmcache-device-template && git -C "
    assert lines[7] == clone + f"lmcache-device-template checkout {COMMIT}"
    fix = 'LMCACHE_DEVICE_KIT="$PWD/lmcache-device-template/kit" nox -s "tests(0.5.6)"'
    assert lines[8] == f"  {fix}"


def test_with_nothing_recorded_the_message_says_so_and_names_a_checkout(
    project: Path,
) -> None:
    pip = Pip(1)
    with pytest.raises(Unavailable) as refused:
        install(project, {}, pip, pip.installed, "nox -s build")
    said = str(refused.value)
    assert (
        "3. the template: nothing recorded: no .cruft.json, no .template.json" in said
    )
    assert 'LMCACHE_DEVICE_KIT="<a checkout of lmcache-device-template>/kit"' in said


def test_bad_input_is_refused_with_what_to_do(tmp_path: Path, project: Path) -> None:
    with pytest.raises(Unavailable, match="has no pyproject.toml: run this in a"):
        sources(tmp_path, {})
    (project / "pyproject.toml").write_text(PYPROJECT.replace("==0.2.0", ">=0.2"))
    with pytest.raises(Unavailable, match="test extra pins no lmcache-device-kit=="):
        sources(project, {})


def test_the_install_command_and_the_renders_copy_print_the_same_plan(
    project: Path,
) -> None:
    """``python -m lmcache_device_kit.install --kit-sources`` and ``python
    kit_source.py`` in a render say the same, in ORDER; its --help lists ORDER."""
    record(project, ".cruft.json", GIT)
    copy = project / "kit_source.py"
    copy.write_bytes(Path(kit_source.__file__).read_bytes())
    env = {"PATH": "/usr/bin:/bin"}
    run = [sys.executable, str(copy)]
    printed = subprocess.run(run, capture_output=True, text=True, env=env, check=True)
    module = ["-m", "lmcache_device_kit.install", "--kit-sources", "--project"]
    listed = subprocess.run(
        [sys.executable, *module, str(project)], capture_output=True, text=True
    )
    assert printed.stdout == listed.stdout
    assert printed.stdout.splitlines()[1:] == [
        "  1. LMCACHE_DEVICE_KIT: not set",
        "  2. the package index: pip install 'lmcache-device-kit[test]==0.2.0'",
        "  3. the template (.cruft.json): pip install 'lmcache-device-kit[test] @ "
        f"git+https://github.com/acme/lmcache-device-template@{COMMIT}"
        "#subdirectory=kit'",
    ]
    helped = subprocess.run(
        [sys.executable, "-m", "lmcache_device_kit.install", "--help"],
        capture_output=True,
        text=True,
    ).stdout
    assert all(
        " ".join(line.split()) in " ".join(helped.split()) for line in kit_source.ORDER
    )
    with pytest.raises(SystemExit):
        install_cli.main(["--kit-sources", "--project", str(project.parent)])
