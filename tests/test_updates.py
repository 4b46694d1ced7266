# SPDX-License-Identifier: Apache-2.0
"""A rendered project can be regenerated and updated: replay, config files, and ``cruft update``."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE

#: What a template repository holds (the rest of this checkout is tooling and caches).
TEMPLATE_CONTENT = ("cookiecutter.json", "hooks", "templates", "kit", "{{cookiecutter.project_slug}}")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **GIT_ENV})
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def commit_all(repo: Path, message: str) -> None:
    run("git", "add", "-A", cwd=repo)
    run("git", "commit", "-q", "-m", message, cwd=repo)


@pytest.fixture
def template_repo(tmp_path: Path) -> Path:
    """This template, as a git repository with one commit (cruft records the commit it rendered from)."""
    repo = tmp_path / "lmcache-device-template"
    repo.mkdir()
    for name in TEMPLATE_CONTENT:
        source = TEMPLATE / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, repo / name)
    run("git", "init", "-q", cwd=repo)
    commit_all(repo, "template at the vendor's first render")
    return repo


def cruft(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run(Path(sys.executable).parent / "cruft", *args, cwd=cwd)


def test_cruft_update_brings_in_a_template_change_without_clobbering_vendor_code(template_repo: Path, tmp_path: Path) -> None:
    """Render at commit A, add vendor code, change the template (commit B), ``cruft update``: both survive."""
    out = tmp_path / "projects"
    cruft("create", "--no-input", "--extra-context", json.dumps({"device_name": "acme"}), "--output-dir", out, template_repo, cwd=tmp_path)
    project = out / "lmcache-acme-device"
    recorded = json.loads((project / ".cruft.json").read_text())
    assert recorded["context"]["cookiecutter"]["device_name"] == "acme"
    run("git", "init", "-q", cwd=project)
    commit_all(project, "rendered")

    # Vendor work: code where the TODO marker was, and a module the template knows nothing about.
    ops = project / "src/lmcache_acme/device_ops.py"
    ops.write_text(ops.read_text().replace("TODO(vendor): call your device kernel here", "acme: calls acme_dma here", 1)
                   + "\n\ndef acme_tuned_copy() -> str:\n    return 'vendor code'\n")  # fmt: skip
    (project / "src/lmcache_acme/acme_kernels.py").write_text('"""Vendor-only module."""\n')
    commit_all(project, "vendor code")

    # A later template commit changes a rendered file.
    readme = template_repo / "{{cookiecutter.project_slug}}" / "README.md"
    readme.write_text(readme.read_text() + "\n## Added by a later template commit\n")
    commit_all(template_repo, "template change")

    cruft("update", "--skip-apply-ask", cwd=project)
    assert "## Added by a later template commit" in (project / "README.md").read_text()
    updated_ops = ops.read_text()
    assert "acme: calls acme_dma here" in updated_ops and "def acme_tuned_copy() -> str:" in updated_ops
    assert (project / "src/lmcache_acme/acme_kernels.py").read_text() == '"""Vendor-only module."""\n'
    new_commit = run("git", "rev-parse", "HEAD", cwd=template_repo).stdout.strip()
    assert json.loads((project / ".cruft.json").read_text())["commit"] == new_commit
    assert cruft("check", cwd=project).returncode == 0


def test_a_new_kit_release_reaches_a_project_as_a_pin_bump_and_a_recorded_commit(
    template_repo: Path, tmp_path: Path
) -> None:
    """A template commit that releases a new kit: ``cruft update`` changes the project's pin to it and its wheel's
    range to that kit's minor series, and the commit the project's sessions take the kit from (.cruft.json, and the
    hook's .template.json: cruft renders from a clone) to that commit; no other file changes but the recorded
    answers (.cookiecutter.json: where cruft rendered them)."""
    out = tmp_path / "projects"
    cruft("create", "--no-input", "--output-dir", out, template_repo, cwd=tmp_path)
    project = out / "lmcache-foo-device"
    run("git", "init", "-q", cwd=project)
    commit_all(project, "rendered")
    kit = template_repo / "kit" / "pyproject.toml"
    old = re.search(r'^version = "([^"]+)"$', kit.read_text(), re.MULTILINE).group(1)  # type: ignore[union-attr]
    kit.write_text(kit.read_text().replace(f'version = "{old}"', 'version = "99.0.0"', 1))
    commit_all(template_repo, "kit 99.0.0")

    cruft("update", "--skip-apply-ask", cwd=project)
    changed = run("git", "status", "--porcelain", cwd=project).stdout.split()
    assert sorted(changed[1::2]) == [".cookiecutter.json", ".cruft.json", ".template.json", "pyproject.toml"]
    assert json.loads((project / ".template.json").read_text())["commit"] == run(
        "git", "rev-parse", "HEAD", cwd=template_repo).stdout.strip()  # fmt: skip
    assert '"lmcache-device-kit[test]==99.0.0"' in (project / "pyproject.toml").read_text()
    assert '"lmcache-device-kit>=99.0.0,<99.1"' in (project / "pyproject.toml").read_text()  # the wheel's own range
    new_commit = run("git", "rev-parse", "HEAD", cwd=template_repo).stdout.strip()
    assert json.loads((project / ".cruft.json").read_text())["commit"] == new_commit


def render_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cookiecutter", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def same_tree(left: Path, right: Path) -> list[str]:
    """Files that differ between two renders, ignoring the recorded output directory."""
    differ = []
    for path in sorted(p for p in left.rglob("*") if p.is_file()):
        other = right / path.relative_to(left)
        if path.name == ".cookiecutter.json":
            a, b = json.loads(path.read_text()), json.loads(other.read_text())
            a.pop("_output_dir"), b.pop("_output_dir")
            equal = a == b
        else:
            equal = other.is_file() and filecmp.cmp(path, other, shallow=False)
        if not equal:
            differ.append(str(path.relative_to(left)))
    return differ + sorted(str(p.relative_to(right)) for p in right.rglob("*") if p.is_file() and not (left / p.relative_to(right)).exists())


def test_no_input_with_a_config_file_renders_its_answers_and_replay_renders_them_again(tmp_path: Path) -> None:
    """``--no-input --config-file`` takes its default_context; ``--replay`` reproduces that render file for file."""
    config = tmp_path / "vendor.yaml"
    config.write_text(
        "default_context:\n"
        "  device_name: acme\n"
        "  lmcache_driven: opt_in\n"
        '  author_name: "Acme \\"Chips\\" Inc."\n'
        f"replay_dir: {tmp_path / 'replay'}\n"
        f"cookiecutters_dir: {tmp_path / 'cookiecutters'}\n"
    )
    first = render_cli("--no-input", "--config-file", config, "-o", tmp_path / "first", TEMPLATE, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    project = tmp_path / "first" / "lmcache-acme-device"
    answers = json.loads((project / ".cookiecutter.json").read_text())
    assert (answers["device_name"], answers["lmcache_driven"], answers["author_name"]) == ("acme", "opt_in", 'Acme "Chips" Inc.')
    assert (project / "src/lmcache_acme/ipc_wrapper.py").is_file()

    again = render_cli("--replay", "--config-file", config, "-o", tmp_path / "again", TEMPLATE, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert same_tree(project, tmp_path / "again" / "lmcache-acme-device") == []


def test_a_config_file_answer_with_jinja_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Config files are answers too: their values are data."""
    config = tmp_path / "vendor.yaml"
    config.write_text("default_context:\n  author_name: \"{{ 7 * 7 }}\"\n" f"replay_dir: {tmp_path / 'replay'}\n")
    done = render_cli("--no-input", "--config-file", config, "-o", tmp_path / "out", TEMPLATE, cwd=tmp_path)
    assert done.returncode != 0
    assert "contains Jinja syntax" in done.stdout + done.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_render_from_a_git_url_records_the_clone_and_commit_its_sessions_take_the_kit_from(
    template_repo: Path, tmp_path: Path
) -> None:
    """Plain ``cookiecutter <git URL>`` (cloned as ``gh:`` is): .template.json holds the URL and the commit the clone
    rendered from, kit_source.py is the kit's own module byte for byte, and the plan it prints takes the kit from the
    index, then from the kit/ of that very commit."""
    from hooks.manifest import KIT_SOURCE

    bare = tmp_path / "template.git"
    run("git", "clone", "-q", "--bare", template_repo, bare, cwd=tmp_path)
    env = {**os.environ, "HOME": str(tmp_path / "home")}  # cookiecutter clones into ~/.cookiecutters
    done = subprocess.run([sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(tmp_path / "out"), bare.as_uri(),
                           "device_name=acme"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    project = tmp_path / "out" / "lmcache-acme-device"
    commit = run("git", "rev-parse", "HEAD", cwd=template_repo).stdout.strip()
    assert json.loads((project / ".template.json").read_text()) == {"template": bare.as_uri(), "url": bare.as_uri(),
                                                                     "commit": commit}  # fmt: skip
    assert (project / "kit_source.py").read_bytes() == KIT_SOURCE[0].read_bytes()
    plan = run(sys.executable, project / "kit_source.py", cwd=tmp_path).stdout.splitlines()
    assert plan[2].startswith("  2. the package index: pip install 'lmcache-device-kit[test]==")
    assert plan[3] == (f"  3. the template (.template.json): pip install 'lmcache-device-kit[test] @ "
                       f"git+{bare.as_uri()}@{commit}#subdirectory=kit'")  # fmt: skip


def test_a_render_from_a_local_directory_records_its_absolute_path_and_an_in_tree_one_nothing(tmp_path: Path) -> None:
    """A template given as a relative directory is recorded as the absolute directory (the hook runs in the
    project, where the relative path means nothing); an in-tree contribution has no sessions and records none."""
    out = tmp_path / "out"
    done = render_cli("--no-input", "-o", out, os.path.relpath(TEMPLATE, tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "lmcache-foo-device" / ".template.json").read_text())
    assert record["directory"] == str(TEMPLATE.resolve()) and "commit" not in record
    done = render_cli("--no-input", "-o", tmp_path / "in-tree", TEMPLATE, "ownership=in_tree", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list((tmp_path / "in-tree").rglob(".template.json")) and not list((tmp_path / "in-tree").rglob("kit_source.py"))
