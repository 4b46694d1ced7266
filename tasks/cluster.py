# SPDX-License-Identifier: Apache-2.0
"""The cluster session: the representative render's ``tests/test_cluster.py`` (two ``lmcache server`` processes
sharing one L2, ``fs`` and ``resp`` against a real Redis, or P2P through a coordinator, both transfer modes) on the
newest release.

Why a session of its own: the render's default run deselects those tests (``-m "not cluster"`` in its pyproject),
and they need the render's ``cluster`` and ``p2p`` extras (the kit's real Redis, nixl), which the main job does not
install. The representative variant has native ops and LMCache-driven transfer, so both modes run through the
plugin.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

from tasks.checks import context
from tasks.envs import ReleaseEnv
from tasks.progress import timed
from tasks.project import emulator_distribution, install_kit, install_render, render
from tasks.suite import run_suite
from tasks.variants import NEWEST, REPRESENTATIVE, VARIANTS


def prove_cluster(session: nox.Session) -> None:
    """Render the representative variant, install it with its cluster and p2p extras, run ``pytest -m cluster`` on its
    tests/test_cluster.py (its own pytest settings: in parallel, one L2 per xdist worker)."""
    env = ReleaseEnv(NEWEST)
    work = Path(session.create_tmp()).resolve()
    with timed(session, f"cluster on lmcache {NEWEST}") as timings:
        with timings.step(f"environment: CPU torch + lmcache {NEWEST}") as step:
            step.result = "created" if env.ensure(session) else "reused"
        with timings.step(f"render, build, install {REPRESENTATIVE} with its cluster and p2p extras"):
            project = render(session, env, work / "rendered", VARIANTS[REPRESENTATIVE])
            ctx = context(project)
            env.uninstall_plugins(session, ctx["project_slug"], emulator_distribution(ctx))  # another variant's
            install_render(session, env, project)
            extra = tomllib.loads((project / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            kit_wheels = str(install_kit(session, env).parent)
            env.install(session, "--find-links", kit_wheels, *extra["cluster"], *extra["p2p"])
        with timings.step("the cluster tests") as step:
            tests = project / ctx["__tests_dir"] / "test_cluster.py"
            outcome = run_suite(session, env, [tests], work, {ctx["__emulator_env_var"]: "1"}, device_present=True,
                                extra=("-m", "cluster"))  # fmt: skip
            step.result = str(outcome)
