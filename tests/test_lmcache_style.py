# SPDX-License-Identifier: Apache-2.0
"""The runner of LMCache's pre-commit hooks (tasks/lmcache_style.py) fails as pre-commit would.

It stands in for pre-commit on in-tree renders, so it must not pass what pre-commit fails:
a hook that exits non-zero, a hook that changes a file, files chosen by each hook's own
filters. Checked here on a small tree with a config of LMCache's shape, without the network.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tasks.lmcache_style import extract, load_config, requirements, run_hooks

CONFIG = r"""
exclude: 'generated/.*'
repos:
- repo: local
  hooks:
  - id: ban-word
    name: Ban a word outside the platform folder
    entry: bash -c 'if grep -HnE "BANNED" "$@"; then exit 1; fi' --
    language: system
    types: [python]
    files: ^pkg/
    exclude: ^pkg/platform/
  - id: rewrite-tabs
    name: A hook that fixes files in place
    entry: sed -i s/tab/TAB/
    language: system
    types: [python]
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: v0.11.7
  hooks:
  - id: ruff
  - id: ruff-format
- repo: https://github.com/pre-commit/mirrors-mypy
  rev: 'v1.17.1'
  hooks:
  - id: mypy
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / ".pre-commit-config.yaml").write_text(CONFIG)
    for name in ("pkg/good.py", "pkg/platform/allowed.py", "generated/skipped.py", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    return tmp_path


def outcomes(tree: Path, names: list[str]) -> dict[str, tuple[str, str]]:
    return {hook: (outcome, said) for hook, outcome, said in run_hooks(tree, names) if not hook.startswith("ruff")}


def test_a_banned_word_fails_where_the_hook_looks_and_passes_where_its_filters_exclude(tree: Path) -> None:
    names = ["pkg/good.py", "pkg/platform/allowed.py", "generated/skipped.py", "notes.txt"]
    for name in names[1:]:
        (tree / name).write_text("BANNED = 1\n")
    assert outcomes(tree, names)["ban-word"][0] == "passed"
    (tree / "pkg/good.py").write_text("BANNED = 1\n")
    outcome, said = outcomes(tree, names)["ban-word"]
    assert outcome == "failed" and "pkg/good.py:1:BANNED" in said and "allowed" not in said


def test_a_hook_that_changes_a_file_fails_shows_the_diff_and_leaves_the_file_as_it_was(tree: Path) -> None:
    (tree / "pkg/good.py").write_text("tab = 1\n")
    outcome, said = outcomes(tree, ["pkg/good.py"])["rewrite-tabs"]
    assert outcome == "failed" and "-tab = 1" in said and "+TAB = 1" in said
    assert (tree / "pkg/good.py").read_text() == "tab = 1\n"


def test_files_the_config_excludes_globally_are_never_given_to_a_hook(tree: Path) -> None:
    (tree / "generated/skipped.py").write_text("tab = 1\n")
    assert outcomes(tree, ["generated/skipped.py"])["rewrite-tabs"] == ("skipped", "no files")


def test_hooks_without_files_and_hooks_not_run_here_are_reported_as_skipped_with_the_reason(tree: Path) -> None:
    found = outcomes(tree, ["notes.txt"])
    assert found["ban-word"] == ("skipped", "no files")
    assert found["mypy"][0] == "skipped" and "mypy inside a checkout" in found["mypy"][1]


def test_the_tools_are_pinned_to_the_revisions_the_config_names() -> None:
    assert requirements({"repos": [{"repo": "https://github.com/astral-sh/ruff-pre-commit", "rev": "v0.11.7"},
                                   {"repo": "https://github.com/PyCQA/isort", "rev": "6.0.1"},
                                   {"repo": "local"}]}) == ["ruff==0.11.7", "isort==6.0.1"]  # fmt: skip


def test_the_config_is_read_from_the_tree(tree: Path) -> None:
    assert load_config(tree)["exclude"] == "generated/.*"


def sdist(path: Path, members: dict[str, bytes | None], link: str | None = None) -> Path:
    """A gzipped tar of ``members`` (None: a directory), plus a symbolic link named ``link`` if given."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return path


def test_an_sdist_unpacks_its_files_and_directories_on_every_supported_python(tmp_path: Path) -> None:
    """No ``extractall(filter=...)``: Python 3.11 has it only from 3.11.4 (Debian 12 ships 3.11.2)."""
    archive = sdist(tmp_path / "a.tar.gz", {"lmcache-1/": None, "lmcache-1/tools/hook.sh": b"exit 0\n",
                                             "lmcache-1/setup.cfg": b"[x]\n"})  # fmt: skip
    extract(archive, tmp_path / "out")
    assert (tmp_path / "out/lmcache-1/setup.cfg").read_bytes() == b"[x]\n"
    assert (tmp_path / "out/lmcache-1/tools/hook.sh").stat().st_mode & 0o111, "executable bits are kept"


@pytest.mark.parametrize("member", ["../escaped.txt", "/tmp/absolute.txt"])
def test_an_sdist_member_outside_its_directory_is_refused(tmp_path: Path, member: str) -> None:
    with pytest.raises(RuntimeError, match="refusing"):
        extract(sdist(tmp_path / "a.tar.gz", {member: b"x"}), tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists()


def test_an_sdist_with_a_link_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="refusing 'lmcache-1/passwd'"):
        extract(sdist(tmp_path / "a.tar.gz", {"lmcache-1/a": b"x"}, link="lmcache-1/passwd"), tmp_path / "out")
