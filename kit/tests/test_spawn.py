# SPDX-License-Identifier: Apache-2.0
"""The harness's process launcher (``harness/spawn.py``): a forked program sees what
``python`` would give it.

A backend's tests trust it with every server, worker rank and fresh registry, so
here a forked program and a new interpreter run the same probe and must agree.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import os
import signal
import subprocess
import sys
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.spawn import child_env

PROBE = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "main": __name__,
    "mine": os.environ.get("LMCACHE_SPAWN_PROBE"), "lmcache": "lmcache" in sys.modules,
    "stdin": sys.stdin.read(), "torch_preloaded": "torch" in sys.modules,
}))
sys.stderr.write("to stderr\\n")
sys.exit(3)
"""


@pytest.mark.parametrize("launch", ["-c", "-m", "script"])
def test_a_forked_program_sees_what_a_new_interpreter_sees(
    tmp_path: Path, launch: str
) -> None:
    """The same probe, as code, a module (the harness runs its workers so) or a
    script, forked and fresh: identical argv, cwd, sys.path (PYTHONPATH included),
    variables, stdin, stderr and exit status; only the forked one finds torch already
    imported (the zygote's)."""
    extra = tmp_path / "on-pythonpath"
    extra.mkdir()
    probe = tmp_path / "spawn_probe.py"
    probe.write_text(PROBE)
    program = {"-c": ["-c", PROBE], "-m": ["-m", probe.stem], "script": [str(probe)]}
    env = child_env({"LMCACHE_SPAWN_PROBE": "seen", "PYTHONPATH": str(extra)})
    seen = {}
    for fresh in (False, True):
        streams = [
            (tmp_path / f"{name}-{fresh}").open("w+") for name in ("in", "out", "err")
        ]
        streams[0].write("from stdin")
        streams[0].seek(0)
        process = spawn.popen(
            [sys.executable, *program[launch], "a", "b"],
            env=env,
            cwd=tmp_path,
            stdin=streams[0],
            stdout=streams[1],
            stderr=streams[2],
            fresh=fresh,
        )
        assert process.wait(timeout=120) == 3
        for stream in streams:
            stream.close()
        seen[fresh] = json.loads((tmp_path / f"out-{fresh}").read_text())
        assert (tmp_path / f"err-{fresh}").read_text() == "to stderr\n"
    assert seen[False].pop("torch_preloaded") is True, (
        "the program was not forked from the zygote"
    )
    assert seen[True].pop("torch_preloaded") is False
    assert seen[False] == seen[True]
    argv0 = "-c" if launch == "-c" else str(probe)
    assert (
        seen[True]["argv"] == [argv0, "a", "b"]
        and seen[True]["main"] == "__main__"
        and seen[True]["mine"] == "seen"
        and not seen[True]["lmcache"]
    )
    assert str(extra) in seen[True]["path"]


#: Programs that end each way Python ends one; every run also leaves work for the exit
#: (a thread that is not a daemon, an idle executor, an atexit function, unflushed
#: output).
ENDINGS = {
    "returns": "",
    "exits-with-a-status": "sys.exit(5)",
    "exits-with-a-message": "sys.exit('stopped: a message')",
    "raises": "raise ValueError('uncaught')",
    "is-interrupted": "raise KeyboardInterrupt",
}
EXIT_WORK = """
import atexit, concurrent.futures, sys, threading, time
def late():
    time.sleep(0.2)
    print("from a thread", flush=True)
threading.Thread(target=late).start()
concurrent.futures.ThreadPoolExecutor(1).submit(int).result()
atexit.register(lambda: sys.stdout.write("from atexit\\n"))
sys.stdout.write("unflushed")
"""


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_forked_program_ends_as_a_new_interpreter_ends_it(ending: str) -> None:
    """Forked and fresh: the same exit status (a signal's too), and the same output,
    each thread joined, each atexit function run and every stream flushed first."""
    argv = [sys.executable, "-c", EXIT_WORK + ENDINGS[ending]]
    forked = spawn.run(argv, env=child_env(), timeout=60)
    fresh = spawn.run(argv, env=child_env(), timeout=60, fresh=True)
    ended = [(run.returncode, run.stdout, run.stderr) for run in (forked, fresh)]
    assert ended[0] == ended[1]
    assert forked.stdout.startswith("unflushedfrom a thread\nfrom atexit")


def test_a_forked_program_is_killed_and_waited_for_by_pid_as_a_popen_is(
    tmp_path: Path,
) -> None:
    """kill() ends it with -SIGKILL, wait() times out while it runs, a pipe carries
    lines both ways."""
    code = (
        "import sys\n"
        "for line in sys.stdin:\n"
        "    print(line.upper(), end='', flush=True)\n"
    )
    process = spawn.popen(
        [sys.executable, "-c", code],
        env=child_env({}),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert isinstance(process, spawn.ForkedProcess)
    process.stdin.write("ping\n")
    assert process.stdout.readline() == "PING\n"
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    assert process.poll() is None
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL


def test_signalling_a_program_that_has_just_exited_is_a_no_op_as_with_popen(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch
) -> None:
    """The zygote reaps a program before it reports the exit status: a kill() in between
    must not raise."""
    process = spawn.popen(
        [sys.executable, "-c", "pass"], env=child_env({}), cwd=tmp_path
    )
    assert isinstance(process, spawn.ForkedProcess)
    deadline = time.monotonic() + 30
    # until the zygote has reaped it (it is not our child)
    while time.monotonic() < deadline:
        try:
            os.kill(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    # its exit status not read yet: the window
    monkeypatch.setattr(process, "poll", lambda: None)
    process.kill()
    monkeypatch.undo()
    assert process.wait(timeout=30) == 0


def test_a_program_whose_environment_preloaded_modules_read_starts_fresh(
    tmp_path: Path,
) -> None:
    """A variable torch may read at import (OMP_NUM_THREADS) differs from the zygote's:
    a new interpreter."""
    started = time.monotonic()
    process = spawn.popen(
        [sys.executable, "-c", "pass"],
        env=child_env({"OMP_NUM_THREADS": "2"}),
        cwd=tmp_path,
    )
    assert isinstance(process, subprocess.Popen)
    assert process.wait(timeout=60) == 0 and time.monotonic() - started < 60


def test_a_variable_set_after_the_zygote_started_sends_the_program_to_a_new_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The zygote imported its modules with the environment it started with: a variable
    the suite sets later (outside the ones LMCache reads) means a new interpreter, not a
    fork."""
    warm = spawn.popen([sys.executable, "-c", "pass"], env=child_env({}), cwd=tmp_path)
    assert isinstance(warm, spawn.ForkedProcess) and warm.wait(timeout=60) == 0
    monkeypatch.setenv("TORCH_SPAWN_PROBE_SET_LATER", "1")
    process = spawn.popen(
        [sys.executable, "-c", "pass"], env=child_env({}), cwd=tmp_path
    )
    assert isinstance(process, subprocess.Popen)
    assert process.wait(timeout=60) == 0
