# SPDX-License-Identifier: Apache-2.0
"""LMCache's own pre-commit checks, as a release's sdist defines them, run on an in-tree render.

Why: an in-tree render is an LMCache contribution, and LMCache's maintainers run their
pre-commit hooks on it. The hooks, their settings and the tool versions are the release's
own (``.pre-commit-config.yaml``, ``.isort.cfg``, ``pyproject.toml``, ``.clang-format``,
``tools/``), read from its sdist, never copied here. pre-commit itself cannot run here (it
clones every hook's repository from a git host), so each hook runs as pre-commit runs it:
its entry and arguments on the files its filters select, failing when it exits non-zero or
changes a file.

Imports only the standard library (and PyYAML, inside the tools' environment): the nox
sessions and the template's tests both use it, and the hook runner itself runs as
``python -m tasks.lmcache_style`` inside the environment that holds the pinned tools.
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import venv
from pathlib import Path

#: What each remote hook repository LMCache's config names runs (entry, file types, default
#: arguments: the repository's own .pre-commit-hooks.yaml), and the PyPI distribution that ships
#: the tool at the config's ``rev``.
Manifest = dict[str, tuple[str, tuple[str, ...], list[str]]]
REMOTE_HOOKS: dict[str, tuple[str, Manifest]] = {
    "https://github.com/PyCQA/isort": ("isort", {"isort": ("isort", ("python", "pyi", "cython"), ["--filter-files"])}),
    "https://github.com/astral-sh/ruff-pre-commit": ("ruff", {
        "ruff": ("ruff check --force-exclude", ("python", "pyi", "jupyter"), []),
        "ruff-format": ("ruff format --force-exclude", ("python", "pyi", "jupyter"), []),
    }),
    "https://github.com/codespell-project/codespell": ("codespell", {"codespell": ("codespell", ("text",), [])}),
    "https://github.com/pre-commit/mirrors-clang-format": ("clang-format", {
        "clang-format": ("clang-format -i", ("c++", "c", "cuda", "java", "javascript", "json", "proto"), []),
    }),
}  # fmt: skip
#: Remote hooks not run here, with the reason (the matrix sessions type-check in a checkout).
NOT_RUN = {"mypy": "needs LMCache's whole dependency set; the sessions run mypy inside a checkout"}
#: File types by suffix, as pre-commit's ``identify`` tags them (``text``: any UTF-8 file).
TYPES = {
    "python": (".py",), "pyi": (".pyi",), "cython": (".pyx",), "jupyter": (".ipynb",), "json": (".json",),
    "c++": (".cpp", ".cc", ".cxx", ".h", ".hpp"), "c": (".c", ".h"), "cuda": (".cu", ".cuh"),
    "java": (".java",), "javascript": (".js",), "proto": (".proto",),
}  # fmt: skip


def index_url() -> str:
    """The simple index pip installs from (PIP_INDEX_URL, pip's configuration, else PyPI)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    done = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return (done.stdout.strip() if done.returncode == 0 else "").rstrip("/") or "https://pypi.org/simple"


def sdist_tree(release: str, cache: Path) -> Path:
    """``lmcache-<release>``'s source tree, from its sdist on the index (PEP 691 JSON, sha256 checked); cached."""
    tree = cache / f"lmcache-{release}"
    if (tree / ".pre-commit-config.yaml").exists():
        return tree
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    request = urllib.request.Request(f"{index_url()}/lmcache/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60, context=context) as answer:
        listing = json.load(answer)
    name = f"lmcache-{release}.tar.gz"
    entry = next((f for f in listing["files"] if f["filename"] == name), None)
    if entry is None:
        raise RuntimeError(f"the index at {index_url()} offers no {name}")
    with urllib.request.urlopen(entry["url"], timeout=300, context=context) as answer:
        data = answer.read()
    if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
        raise RuntimeError(f"{name}: sha256 differs from the index's")
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / name
    archive.write_bytes(data)
    extract(archive, cache)
    return tree


def extract(archive: Path, into: Path) -> None:
    """Unpack ``archive``'s directories and regular files, each inside ``into``; refuse any other member.

    What tarfile's ``filter="data"`` does, which Python has only from 3.11.4 (and 3.10.12): Debian 12's
    python3 is 3.11.2. An sdist holds nothing else.
    """
    root = into.resolve()
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            target = (root / member.name).resolve()
            if not target.is_relative_to(root) or not (member.isdir() or member.isfile()):
                raise RuntimeError(f"{archive.name}: refusing {member.name!r} (not a file or directory inside it)")
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
            target.chmod(0o755 if member.mode & 0o111 else 0o644)


def tools_python(tree: Path, env_dir: Path) -> str:
    """An environment with the tools at the versions ``tree``'s pre-commit config pins; its python."""
    python = env_dir / "bin" / "python"
    stamp = env_dir / "installed.json"
    if not python.exists():
        venv.create(env_dir, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "pyyaml"], check=True)
    wanted = subprocess.run([str(python), "-m", "tasks.lmcache_style", "requirements", "--root", str(tree)],
                            cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, check=True)  # fmt: skip
    if not stamp.exists() or stamp.read_text() != wanted.stdout:
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *wanted.stdout.split()], check=True)
        stamp.write_text(wanted.stdout)
    return str(python)


#: What a render holds beside the contribution itself (not copied into the checkout).
NOT_CONTRIBUTED = (".cookiecutter.json", "PR_DESCRIPTION.md", "patches/")


def check_contribution(project: Path, release: str, cache: Path) -> tuple[bool, str]:
    """Run ``release``'s pre-commit hooks on an in-tree render applied to a copy of its sources.

    The render's files are copied into the tree and its patches applied, as a reviewer's
    checkout has them; the hooks check those files and the files the patches change.
    ``cache`` keeps the sdist and the tools' environment between runs. (passed, report)
    """
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "prepare.lock").open("w") as lock:  # parallel test workers prepare it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = sdist_tree(release, cache / "sdist")
        python = tools_python(tree, cache / "tools")
    names = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    names = [n for n in names if not n.startswith(NOT_CONTRIBUTED)]
    with tempfile.TemporaryDirectory(prefix="lmcache-checkout-") as scratch:
        checkout = Path(scratch) / tree.name
        shutil.copytree(tree, checkout, symlinks=True)
        for name in names:
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project / name, checkout / name)
        from tasks.envs import patched_files, wire_patches  # imports nox: not in the tools' environment

        for patch in wire_patches(project):
            subprocess.run(["patch", "-p1", "--forward", "--quiet", "-d", str(checkout), "-i", str(patch)], check=True)
            names += patched_files(patch)
        done = subprocess.run([python, "-m", "tasks.lmcache_style", "run", "--root", str(checkout), *names],
                              cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)  # fmt: skip
    return done.returncode == 0, (done.stdout + done.stderr).strip()


# ---- below: runs inside the tools' environment (PyYAML) ------------------------------------


def load_config(root: Path) -> dict:
    import yaml

    return yaml.safe_load((root / ".pre-commit-config.yaml").read_text())


def requirements(config: dict) -> list[str]:
    """The pinned tool of every remote hook repository the config names that this runner runs."""
    return [f"{REMOTE_HOOKS[repo['repo']][0]}=={repo['rev'].lstrip('v')}" for repo in config["repos"]
            if repo["repo"] in REMOTE_HOOKS]  # fmt: skip


def tags(path: Path) -> set[str]:
    found = {kind for kind, suffixes in TYPES.items() if path.suffix in suffixes}
    try:
        path.read_text(encoding="utf-8")
        found.add("text")
    except (UnicodeDecodeError, OSError):
        pass
    return found


def hooks(config: dict) -> list[dict]:
    """Every hook of the config with its entry, args, types and filters resolved as pre-commit resolves them."""
    resolved = []
    for repo in config["repos"]:
        manifest = REMOTE_HOOKS.get(repo["repo"], ("", {}))[1]
        for hook in repo["hooks"]:
            if repo["repo"] == "local":
                entry, default_types, default_args = hook["entry"], ("file",), []
            elif hook["id"] in manifest:
                entry, default_types, default_args = manifest[hook["id"]]
            else:
                resolved.append({"id": hook["id"], "skip": NOT_RUN.get(hook["id"], f"not run here ({repo['repo']})")})
                continue
            types = hook.get("types")
            resolved.append({
                "id": hook["id"], "entry": entry, "args": hook.get("args", default_args), "language": hook.get("language"),
                "types": types, "types_or": hook.get("types_or") or (None if types else default_types),
                "files": hook.get("files", ""), "exclude": hook.get("exclude", "^$"),
            })  # fmt: skip
    return resolved


def selected(hook: dict, names: list[str], root: Path, global_exclude: str) -> list[str]:
    chosen = []
    for name in names:
        if not re.search(hook["files"], name) or re.search(hook["exclude"], name) or re.search(global_exclude, name):
            continue
        found = tags(root / name) | {"file"}
        if hook["types"] and not set(hook["types"]) <= found:
            continue
        if hook["types_or"] and not set(hook["types_or"]) & found:
            continue
        chosen.append(name)
    return chosen


def run_hooks(root: Path, names: list[str]) -> list[tuple[str, str, str]]:
    """(hook id, "passed" | "failed" | "skipped", what it said) per hook of ``root``'s config, on ``names``."""
    config = load_config(root)
    # the tools of this environment first, as pre-commit puts each hook's environment first
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    results = []
    for hook in hooks(config):
        if "skip" in hook:
            results.append((hook["id"], "skipped", hook["skip"]))
            continue
        files = selected(hook, names, root, config.get("exclude", "^$"))
        if not files:
            results.append((hook["id"], "skipped", "no files"))
            continue
        command = shlex.split(hook["entry"])
        if hook["language"] == "python" and command[0] == "python":
            command[0] = sys.executable
        before = {name: (root / name).read_text() for name in files}
        done = subprocess.run([*command, *hook["args"], *files], cwd=root, env=env, capture_output=True, text=True)
        changed = [name for name in files if (root / name).read_text() != before[name]]
        said = (done.stdout + done.stderr).strip()
        for name in changed:  # pre-commit fails a hook that changes a file: say how
            diff = difflib.unified_diff(before[name].splitlines(), (root / name).read_text().splitlines(), name, name, lineterm="")
            said += "\n" + "\n".join(list(diff)[:40])
            (root / name).write_text(before[name])
        results.append((hook["id"], "failed" if done.returncode or changed else "passed", said))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.lmcache_style")
    parser.add_argument("command", choices=["requirements", "run"])
    parser.add_argument("--root", type=Path, required=True, help="an LMCache source tree")
    parser.add_argument("files", nargs="*", help="files to check, relative to --root")
    args = parser.parse_intermixed_args()
    if args.command == "requirements":
        print("\n".join(requirements(load_config(args.root))))
        return 0
    results = run_hooks(args.root, args.files)
    for hook, outcome, said in results:
        mark = {"passed": "✓", "failed": "✗", "skipped": "-"}[outcome]
        print(f"{mark} {hook}: {outcome}" + (f" ({said})" if outcome == "skipped" else ""))
        if outcome == "failed":
            print("    " + said.replace("\n", "\n    "))
    return 1 if any(outcome == "failed" for _, outcome, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
