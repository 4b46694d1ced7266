# SPDX-License-Identifier: Apache-2.0
"""Render a variant, check it statically, build its wheel and install it into a release environment.

Builds go through one persistent tree per environment (``sync_tree``): a new
render replaces only the files whose content changed, so unchanged sources keep
their timestamps and an unchanged native extension is not compiled again. A
wheel depends on its sources, torch and Python, not on the LMCache release it is
installed beside, so it is built once per such key and that same wheel is
installed into every release's environment (``WHEELS``), as a vendor ships one.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

from hooks.post_gen_project import remove_empty_directories
from tasks.checks import (
    RENDER_SESSION_ENV,
    context,
    emulator_wheel_problems,
    render_sessions,
    rendered_text_problems,
    structure_problems,
    wheel_problems,
)
from tasks.envs import ReleaseEnv
from tasks.kit import kit_wheel_problems
from tasks.kit_source import KIT, KIT_DISTRIBUTION, plugin_steps
from tasks.lmcache_style import check_contribution
from tasks.readme import bash, runs
from tasks.variants import NEWEST, PRERELEASES, ROOT, answers

#: Wheels by what they are built from (sources, torch, Python): ``<key>/<wheel>``.
WHEELS = ROOT / ".nox" / "wheels"
#: Build products that must not outlive a render (stale modules would end up in the next wheel).
STALE_BUILD_PRODUCTS = ("build/lib*", "build/bdist*", "src/*.egg-info", "*.egg-info")


def render(session: nox.Session, env: ReleaseEnv, out: Path, variant: dict[str, str], complete: bool = True) -> Path:
    """Render the template with --no-input and the variant's answers into an empty ``out``; the project. ``complete``
    gives every option (the template's default where the variant has none); else only the variant's answers, as a
    vendor types them."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pairs = [f"{key}={value}" for key, value in (answers(variant) if complete else variant).items()]
    pairs.append(f"_torch_version={env.torch_version()}")  # the torch a native wheel is built against and pins
    env.run(session, "cookiecutter", "--no-input", "-o", str(out), str(ROOT), *pairs, silent=True)
    (project,) = out.iterdir()
    return project


def own_sessions(env: ReleaseEnv, project: Path, cache: Path, *sessions: str) -> tuple[list[str], dict[str, str]]:
    """The command that runs a wheel render's own ``sessions`` (``lint``, ``typecheck``) as it ships them, with
    ``env``'s tools (nothing installed, no environment made), and what its environment adds: mypy's cache in
    ``cache``, nothing written into the render."""
    return render_sessions(project, *sessions, nox=env.command("nox")), {**RENDER_SESSION_ENV, "MYPY_CACHE_DIR": str(cache)}


@contextmanager
def typechecked_meanwhile(session: nox.Session, env: ReleaseEnv, project: Path, cache: Path) -> Iterator[None]:
    """The render's own ``typecheck`` session (mypy with its settings) while the block runs (the native build: a
    cold mypy takes 40 s, the build as long, and neither needs the other); after the block, its failure fails
    the session with its output."""
    if context(project)["ownership"] != "wheel":
        yield
        return
    install_kit(session, env)  # the render imports the kit's shims: mypy reads this very kit
    command, extra = own_sessions(env, project, cache, "typecheck")
    process = subprocess.Popen(command, cwd=project, env={**os.environ, **env.tools(), **extra}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        yield
    finally:
        output, _ = process.communicate()
    if process.returncode:
        session.error(f"the typecheck session failed on {project.name}:\n{output[-3000:]}")
    session.log(f"typecheck session OK: {project.name}")


def check_statically(session: nox.Session, env: ReleaseEnv, project: Path, cache: Path, *, types: bool = True) -> None:
    """No leftover template syntax, Python compiles, TOML/JSON parse, no import circle, no file over a screen;
    a wheel passes its own ``lint`` session (ruff, ruff format, isort) and (unless ``types`` is off:
    ``typechecked_meanwhile``) its ``typecheck`` session; an in-tree contribution LMCache's own pre-commit hooks
    (tasks/lmcache_style.py)."""
    problems = rendered_text_problems(project) + structure_problems(project)
    if problems:
        session.error("rendered project check failed:\n  " + "\n  ".join(problems))
    ctx = context(project)
    if ctx["ownership"] == "wheel":
        sessions = ["lint"]
        if types:
            install_kit(session, env)  # the render imports the kit's shims: mypy reads this very kit
            sessions.append("typecheck")
        command, extra = own_sessions(env, project, cache, *sessions)
        env.run(session, *command, env=extra, silent=True)
    else:
        passed, report = check_contribution(project, NEWEST, ROOT / ".nox" / f"lmcache-style-{NEWEST}")
        session.log(f"LMCache {NEWEST}'s pre-commit hooks on the contribution:\n{report}")
        if not passed:
            session.error(f"{project.name} fails LMCache {NEWEST}'s own pre-commit hooks (above)")
    session.log(f"static checks OK: {project.name} ({ctx['ownership']})")


def sync_tree(source: Path, target: Path) -> None:
    """Make ``target`` hold exactly ``source``'s files, copying only those whose content differs.

    Build intermediates under ``target/build/temp*`` stay (unchanged sources keep
    their timestamps, so the compiler skips them); build products that could
    carry another render's modules are removed.
    """
    target.mkdir(parents=True, exist_ok=True)
    for pattern in STALE_BUILD_PRODUCTS:
        for stale in target.glob(pattern):
            shutil.rmtree(stale)
    wanted = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        relative = path.relative_to(target)
        if relative not in wanted and relative.parts[0] != "build":
            path.unlink()
    # and the directories that left empty: setuptools finds an empty src/<package>/ as a namespace package and
    # names it in the next render's top_level.txt (seen: a wheel of lmcache_acme_... claiming lmcache_foo)
    remove_empty_directories(target, keep=lambda path: path.relative_to(target).parts[0] == "build")
    for relative in sorted(wanted):
        src, dst = source / relative, target / relative
        if not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def build_wheel(session: nox.Session, env: ReleaseEnv, project: Path) -> Path:
    """Build the render's wheel with a PEP 517 frontend through the environment's build tree, and check it."""
    # One persistent tree per kind of build, so building a pure-Python variant in between does not
    # delete the native sources and force the next native build to compile everything again.
    tree = env.path / ("build-tree-native" if context(project)["native_ops"] == "yes" else "build-tree")
    readme = runs((project / "README.md").read_text())["build"].text  # as a vendor builds it
    wheel = built_and_checked(session, env, project, tree, env.path / "dist", lambda w: wheel_problems(w, project),
                              commands=readme)  # fmt: skip
    session.log(f"wheel OK: {wheel.name}")
    return wheel


def built_and_checked(
    session: nox.Session, env: ReleaseEnv, source: Path, tree: Path, dist: Path, problems: Callable[[Path], list[str]],
    commands: str | None = None,
) -> Path:  # fmt: skip
    """The wheel of ``source``, in an emptied ``dist``; ``problems`` stop the session.

    Built through ``tree`` (``sync_tree``) with a PEP 517 frontend, without isolation
    (native ops compile against this environment's torch, and nothing is downloaded),
    unless a wheel of the same sources, torch and Python was built before (``WHEELS``).
    ``commands``: the shell commands that build it into ``tree``'s ``dist/`` (the README's
    build block, run as written in ``tree``, a copy of the render).
    """
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    built = WHEELS / wheel_key(env, source)
    if built.is_dir():
        (cached,) = built.glob("*.whl")
        wheel = Path(shutil.copy2(cached, dist))
        session.log(f"{wheel.name}: built earlier from the same sources, torch and Python ({built.name})")
    else:
        sync_tree(source, tree)
        if commands is None:
            env.run(session, "python", "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(tree),
                    silent=True)  # fmt: skip
        else:
            begun = time.monotonic()
            with session.chdir(tree):
                env.run(session, bash(), "-euo", "pipefail", "-c", commands, silent=True)
            (built_here,) = (tree / "dist").glob("*.whl")
            shutil.copy2(built_here, dist)
            session.log(f"README build block: ran as written in {tree} in {time.monotonic() - begun:.0f} s")
        (wheel,) = dist.glob("*.whl")
        partial = built.with_name(built.name + ".partial")  # kept whole or not at all
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        shutil.copy2(wheel, partial)
        partial.rename(built)
    found = problems(wheel)
    if found:
        session.error(f"{wheel.name} check failed:\n  " + "\n  ".join(found))
    return wheel


#: Files of a render no build reads: its recorded answers and template name the directories it came from and went to.
NOT_BUILT_FROM = (".cookiecutter.json", ".template.json")


def wheel_key(env: ReleaseEnv, source: Path) -> str:
    """What a wheel is built from: the files under ``source`` (bytecode and NOT_BUILT_FROM aside), the
    environment's torch, and Python."""
    digest = hashlib.sha256()
    built_from = (p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in sorted(p for p in built_from if str(p.relative_to(source)) not in NOT_BUILT_FROM):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    torch = env.torch_dist_info()
    return f"{torch.name.removesuffix('.dist-info')}-{torch.parent.parent.name}-{digest.hexdigest()[:20]}"


def build_emulator(session: nox.Session, env: ReleaseEnv, project: Path) -> Path:
    """Build the render's CPU emulator (its own distribution) with a PEP 517 frontend and check it; its wheel.
    Built through a tree of its own, so the render keeps no build products."""
    source = project / context(project)["__emulator_dir"]
    return built_and_checked(session, env, source, env.path / "build-tree-emulator", env.path / "dist-emulator",
                             lambda w: emulator_wheel_problems(w, project))  # fmt: skip


def install_emulator(session: nox.Session, env: ReleaseEnv, project: Path) -> None:
    """Build, check and install the render's emulator alone (beside an in-tree contribution), without its
    dependencies (torch and ninja are there already: a resolver could only replace the CPU torch)."""
    wheel = build_emulator(session, env, project)
    env.pip(session, "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel))
    session.log(f"emulator installed: {wheel.name}")


def emulator_distribution(ctx: dict) -> str:
    """The emulator's distribution name (what ``uninstall_plugins`` removes with the plugin)."""
    return ctx["__emulator_package"].replace("_", "-")


def build_kit(session: nox.Session, env: ReleaseEnv) -> Path:
    """Build (or reuse) and check the kit's wheel; a render's test extra pins it."""
    return built_and_checked(session, env, KIT, env.path / "build-tree-kit", env.path / "dist-kit", kit_wheel_problems)


def install_kit(session: nox.Session, env: ReleaseEnv) -> Path:
    """Build (or reuse), check and install the kit into ``env`` (the suite's harness, without a wheel's test extra),
    unless this very wheel is installed there already (a render's typecheck needs it before its wheel is
    installed, and a variant's install after); the wheel."""
    wheel = build_kit(session, env)
    marker = env.path / "kit-installed"  # the installed wheel's name and digest
    stamp = f"{wheel.name} {hashlib.sha256(wheel.read_bytes()).hexdigest()}"
    installed = any(env.path.glob(f"lib/python*/site-packages/{KIT_DISTRIBUTION.replace('-', '_')}-*.dist-info"))
    if installed and marker.is_file() and marker.read_text() == stamp:
        return wheel
    marker.unlink(missing_ok=True)
    env.pip(session, "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel))
    marker.write_text(stamp)
    session.log(f"kit installed: {wheel.name}")
    return wheel


def install_wheel(session: nox.Session, env: ReleaseEnv, wheel: Path, project: Path, emulator: Path | None = None) -> Path:
    """Install the wheel (never editable), the kit built here before it and the emulator after it, in the kit's
    order (``lmcache_device_kit.install``, which the rendered noxfile follows too), then ``pip check``.

    Steps that resolve go through ``ReleaseEnv.install`` (uv when it is there, 0.8 s where pip's resolver takes
    4.5 s), with the kit's wheel found beside it; our own builds are forced in by pip without dependencies.
    On a pre-release the wheel's own lmcache requirement (tested finals only) would replace it, so only its test
    extra is resolved (the kit's ``past_pin``, as the rendered canary does); ``pip check`` would report exactly
    that requirement and is not run. Returns the kit's wheel (the one the README's install block names).
    """
    kit = install_kit(session, env)  # the kit's first step, unless this very kit is in already
    emulated = str(emulator) if emulator else None
    past_pin = env.release in PRERELEASES
    for what, arguments in plugin_steps(project, str(wheel), (), emulated, past_pin):
        if "--no-deps" in arguments:
            env.pip(session, "install", "--quiet", *arguments)
        else:
            env.install(session, "--find-links", str(kit.parent), *arguments)
        session.log(f"{what} installed")
    if not past_pin:
        env.pip(session, "check")
    return kit


def install_render(session: nox.Session, env: ReleaseEnv, project: Path) -> None:
    """Build, check and install a wheel render, and its emulator when it has one."""
    emulator = build_emulator(session, env, project) if context(project)["emulator"] == "yes" else None
    install_wheel(session, env, build_wheel(session, env, project), project, emulator)
