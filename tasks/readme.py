# SPDX-License-Identifier: Apache-2.0
"""The rendered README's shell blocks: each is run here as written, or marked as an example that says why not.

Every ```bash block of a wheel render's README.md follows a marker line (the nearest non-blank line above it):
``<!-- runs: NAME -->``, one of ``RUNS``, which the release sessions run as written in the release environment,
on the emulator (``run_blocks``, ``tests_command``; only the ``PLACEHOLDERS`` are filled in), or
``<!-- example: WHY -->``, which nothing runs. ``block_problems`` (the template's tests, every combination) finds
a block with neither, or an unknown ``runs:`` name. Each run says which blocks ran, in how long, and which are
examples and why.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nox

from tasks.envs import ReleaseEnv

#: The blocks run here, in a vendor's order: build the wheel, install, the suite, a server by hand, a default
#: worker's store/lookup/retrieve through it (the plugin's doctor).
RUNS = ("build", "install", "tests", "server", "worker")
MARKER = re.compile(r"<!-- (runs|example): (.+?) -->")
#: What a ``<...>`` placeholder of a block stands for, filled in by the caller.
PLACEHOLDERS = ("<your version>", "<the kit>", "<this project>")
#: The ports the README's server block uses as written (``--port``; LMCache's HTTP frontend's default): free
#: before it starts, held by one run per host at a time (SERVER_LOCK).
SERVER_PORTS = (5555, 8080)
SERVER_LOCK = Path("/tmp/lmcache-device-template-readme-server.lock")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    kind: str | None  # "runs", "example", None (unmarked)
    what: str  # the run's name, or the example's reason
    text: str


def blocks(readme: str) -> list[Block]:
    """The ```bash blocks of ``readme``, each with its marker."""
    lines = readme.splitlines()
    found = []
    for number, line in enumerate(lines):
        if line.strip() != "```bash":
            continue
        above = next((text.strip() for text in reversed(lines[:number]) if text.strip()), "")
        marker = MARKER.fullmatch(above)
        end = lines.index("```", number + 1)
        text = "\n".join(lines[number + 1 : end]) + "\n"
        kind, what = (marker.group(1), marker.group(2)) if marker else (None, "")
        found.append(Block(number + 1, kind, what, text))
    return found


def block_problems(readme: str) -> list[str]:
    """A block neither run nor marked as an example, an unknown or repeated run name, an example without a reason."""
    problems, seen = [], set()
    for block in blocks(readme):
        if block.kind is None:
            problems.append(f"line {block.line}: a shell block without a marker above it: put <!-- runs: NAME --> "
                            f"(NAME one of {RUNS}, run by tasks/readme.py) or <!-- example: WHY --> "
                            f"before it:\n{block.text}")  # fmt: skip
        elif block.kind == "runs" and (block.what not in RUNS or block.what in seen):
            problems.append(f"line {block.line}: <!-- runs: {block.what} --> is unknown or repeated; "
                            f"each of {RUNS} runs once (tasks/readme.py)")  # fmt: skip
        elif block.kind == "example" and len(block.what.split()) < 3:
            problems.append(f"line {block.line}: an example block must say why it is not run: {block.what!r}")
        seen.add(block.what)
    return problems


def runs(readme: str) -> dict[str, Block]:
    return {block.what: block for block in blocks(readme) if block.kind == "runs"}


def fill(text: str, values: dict[str, str]) -> str:
    """``text`` with its placeholders replaced; any other ``<...>`` left is an error (the block is not runnable)."""
    for placeholder, value in values.items():
        assert placeholder in PLACEHOLDERS, placeholder
        text = text.replace(placeholder, value)
    left = re.findall(r"<[a-z][a-z ]*>", text)
    assert not left, f"README block has placeholders nobody fills in: {left} (tasks/readme.py PLACEHOLDERS)"
    return text


def summary(readme: str, seconds: dict[str, float]) -> str:
    """Which blocks ran (and how long each took) and which are examples, and why: for the session's log."""
    rows = []
    for block in blocks(readme):
        if block.kind == "runs" and block.what in seconds:
            rows.append(f"  line {block.line}: ran '{block.what}' as written in {seconds[block.what]:.1f} s")
        elif block.what == "build":
            rows.append(f"  line {block.line}: 'build' runs as written when the wheel's sources change ('README build "
                        "block: ran ...' above); otherwise the wheel it built from the same sources is reused")  # fmt: skip
        elif block.kind == "runs":
            rows.append(f"  line {block.line}: '{block.what}' runs later in this session")
        else:
            rows.append(f"  line {block.line}: example, not run: {block.what}")
    return "README shell blocks:\n" + "\n".join(rows)


def bash() -> str:
    found = shutil.which("bash")
    assert found, "bash runs the README's blocks"
    return found


def port_taken(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def server_running(text: str, env: dict[str, str], log: Path, ready_timeout: float = 120) -> Iterator[None]:
    """The README's server block, as written, in the background (one per host at a time: its ports are fixed),
    until it accepts connections on its port; stopped (its whole process group) afterwards."""
    SERVER_LOCK.touch(exist_ok=True)
    with SERVER_LOCK.open() as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        taken = [port for port in SERVER_PORTS if port_taken(port)]
        assert not taken, (f"port(s) {taken} of 127.0.0.1 are in use: the README's server block runs as written on "
                           f"{SERVER_PORTS}; stop what listens there and run again")  # fmt: skip
        with log.open("wb") as out:
            server = subprocess.Popen([bash(), "-euo", "pipefail", "-c", text], env=env, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + ready_timeout
            while not port_taken(SERVER_PORTS[0]):
                assert server.poll() is None, f"the README's server block exited with {server.returncode}:\n" + (
                    log.read_text(errors="replace")[-3000:]
                )
                assert time.monotonic() < deadline, f"the README's server is not up after {ready_timeout} s: {log}"
                time.sleep(0.2)
            yield
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait(timeout=10)


def values(env: ReleaseEnv, project: Path, kit: Path) -> dict[str, str]:
    """What the placeholders stand for here: this environment's torch, the kit's wheel built here, the render."""
    version = env.torch_dist_info().name.removeprefix("torch-").removesuffix(".dist-info")
    return {"<your version>": version, "<the kit>": str(kit), "<this project>": str(project)}


def block_env(env: ReleaseEnv, env_vars: dict[str, str | None]) -> dict[str, str]:
    """A shell of the release environment (its bin/ first on PATH), on the emulator when the variant has one."""
    shell = {**os.environ, **env.tools(), "OMP_NUM_THREADS": "1"}
    shell.update({key: value for key, value in env_vars.items() if value is not None})
    for key in (key for key, value in env_vars.items() if value is None):
        shell.pop(key, None)
    return shell


def run_block(session: nox.Session, env: ReleaseEnv, project: Path, block: str, text: str, cwd: Path,
              shell: dict[str, str], work: Path, seconds: dict[str, float]) -> None:  # fmt: skip
    """One README block, as written (placeholders aside), in ``cwd``; its output in ``work/readme-<block>.log``."""
    log = work / f"readme-{block}.log"
    begun = time.monotonic()
    with session.chdir(cwd):
        env.run_logged(session, log, bash(), "-euo", "pipefail", "-c", text, env=shell)
    seconds[block] = time.monotonic() - begun


def run_install_and_server(
    session: nox.Session, env: ReleaseEnv, project: Path, wheel: Path, kit: Path, work: Path,
    env_vars: dict[str, str | None], seconds: dict[str, float],
) -> None:  # fmt: skip
    """The README's install block in the render (its ``dist/`` holding the wheel built here), then, where the
    README runs them (a device: the emulator), its server block in the background and its worker block against
    that server: a default worker's store, lookup and retrieve, through the plugin's doctor."""
    readme = (project / "README.md").read_text()
    blocks_run = runs(readme)
    filled = values(env, project, kit)
    shell = block_env(env, env_vars)
    (project / "dist").mkdir(exist_ok=True)
    shutil.copy2(wheel, project / "dist")
    run_block(session, env, project, "install", fill(blocks_run["install"].text, filled), project, shell, work,
              seconds)  # fmt: skip
    if "server" in blocks_run:
        begun = time.monotonic()
        with server_running(fill(blocks_run["server"].text, filled), shell, work / "readme-server.log"):
            seconds["server"] = time.monotonic() - begun
            run_block(session, env, project, "worker", fill(blocks_run["worker"].text, filled), work, shell, work,
                      seconds)  # fmt: skip
    session.log(summary(readme, seconds))


def tests_command(project: Path, kit: Path, env: ReleaseEnv) -> str:
    """The README's test block, as written (its placeholders filled in)."""
    return fill(runs((project / "README.md").read_text())["tests"].text, values(env, project, kit))
