# SPDX-License-Identifier: Apache-2.0
"""The order a plugin's test environment is installed in, and what LMCache's command
line needs beside lmcache: ``python -m lmcache_device_kit.install`` prints it.

Why it exists: a project's noxfile (its tests, contract, soak and canary sessions) and
the template's own sessions install the same things in the same order; this is the one
place that says which and why. It only says what to install: each caller installs with
its own tool (nox's ``session.install``, the template's uv) and chooses where the kit,
the wheel and the emulator come from.

The kit itself comes first, from the first source that gives it
(``kit_source.ORDER``: ``LMCACHE_DEVICE_KIT``, the package index, the template the
project was rendered from); ``--kit-sources`` prints that plan for a project, as its
sessions try it (they run the same module, copied beside the noxfile).

Must not import lmcache, torch or the plugin: it runs before they are installed (its
only dependency is ``packaging``, none of theirs).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from pathlib import Path
import argparse
import json
import os
import sys

# First Party
from lmcache_device_kit import kit_source

if sys.version_info >= (3, 11):
    # Standard
    import tomllib
else:  # pragma: no cover - Python 3.10
    # Third Party
    import tomli as tomllib

#: Undeclared dependencies of each release's ``lmcache`` command line: the end-to-end
#: tests start ``lmcache server``, which imports them (0.5.4 and 0.5.5 import openai
#: without requiring it). A release with none is listed too: one the table does not
#: know (untested, a pre-release, a git checkout) gets every dependency listed here.
CLI_EXTRAS: dict[str, tuple[str, ...]] = {
    "0.5.4": ("openai",),
    "0.5.5": ("openai",),
    "0.5.6": (),
    "0.5.7rc2": (),
}

#: One step: what it installs, and its ``pip install`` arguments.
Step = tuple[str, list[str]]


def cli_extras(lmcache: str) -> list[str]:
    """The undeclared dependencies of ``lmcache``'s command line at ``lmcache`` (a
    release; anything else: every one the table lists)."""
    if lmcache in CLI_EXTRAS:
        return list(CLI_EXTRAS[lmcache])
    return sorted({extra for extras in CLI_EXTRAS.values() for extra in extras})


def lmcache_requirements(lmcache: str) -> list[str]:
    """``pip install`` arguments for lmcache and its command line's undeclared
    dependencies. ``lmcache``: a release (``0.5.6``, pinned), ``pre`` (the newest
    release or pre-release) or any requirement (``lmcache @ git+https://...``); the
    last two upgrade what is installed."""
    if lmcache[:1].isdigit():
        return [f"lmcache=={lmcache}", *cli_extras(lmcache)]
    if lmcache == "pre":
        return ["--upgrade", "--pre", "lmcache", *cli_extras(lmcache)]
    return ["--upgrade", lmcache, *cli_extras(lmcache)]


def environment_steps(torch: Sequence[str], lmcache: str) -> list[Step]:
    """torch first (lmcache requires an unpinned torch: without it pip pulls a
    multi-GB CUDA build), then lmcache with its command line's dependencies."""
    return [("torch", list(torch)), ("lmcache", lmcache_requirements(lmcache))]


def project_test_extra(project: Path) -> list[str]:
    """The project's test extra (its pyproject.toml): what its tests need."""
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    return list(pyproject["project"]["optional-dependencies"]["test"])


def plugin_steps(
    project: Path,
    wheel: str,
    kit: Sequence[str] = (),
    emulator: str | None = None,
    past_pin: bool = False,
) -> list[Step]:
    """After ``environment_steps``: the kit (``kit``: its pip arguments; none when it
    is installed already), then the wheel with its test extra, resolved against that
    lmcache and kit (the wheel requires the kit and the extra pins it, so the kit comes
    first: a checkout or a git commit, not the index), then this very build forced in,
    then the emulator
    (its dependencies, torch and ninja, are in by then). ``past_pin``: the test extra
    alone, as the wheel's own lmcache range would move an lmcache outside it (the
    canary, a pre-release)."""
    steps: list[Step] = [("kit", list(kit))] if kit else []
    extra = project_test_extra(project) if past_pin else [f"{wheel}[test]"]
    steps += [("test extra", extra)]
    steps += [("wheel", ["--force-reinstall", "--no-deps", wheel])]
    if emulator:
        steps += [("emulator", ["--force-reinstall", "--no-deps", emulator])]
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    order = "\n".join(f"  {n}. {where}" for n, where in enumerate(kit_source.ORDER, 1))
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_device_kit.install",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Prints the steps as JSON: [[what, [pip install arguments]], ...].\n"
        f"The kit comes from the first of:\n{order}",
    )
    parser.add_argument("--torch", help="pip arguments for torch (one string)")
    parser.add_argument("--lmcache", help="a release, 'pre' or a requirement")
    parser.add_argument("--project", type=Path, default=Path.cwd())
    parser.add_argument("--wheel", help="the plugin's wheel")
    parser.add_argument("--kit", default="", help="pip arguments for the kit")
    parser.add_argument("--emulator", help="the emulator (a directory or a wheel)")
    parser.add_argument("--past-pin", action="store_true")
    parser.add_argument(
        "--kit-sources",
        action="store_true",
        help="print where the project's sessions take the kit from, in order",
    )
    args = parser.parse_args(argv)
    if args.kit_sources:
        try:
            print(kit_source.describe(args.project, os.environ))
        except kit_source.Unavailable as unavailable:
            parser.error(str(unavailable))
        return 0
    missing = [f"--{n}" for n in ("torch", "lmcache", "wheel") if not getattr(args, n)]
    if missing:
        parser.error(f"the steps need {', '.join(missing)} (or ask --kit-sources)")
    steps = environment_steps(args.torch.split(), args.lmcache) + plugin_steps(
        args.project, args.wheel, args.kit.split(), args.emulator, args.past_pin
    )
    print(json.dumps(steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
