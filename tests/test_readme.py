# SPDX-License-Identifier: Apache-2.0
"""The rendered README's instructions: every shell block run by the release sessions or marked, and true as written.

The release sessions run the ``runs:`` blocks as written (tasks/readme.py); these tests, which install nothing,
hold every combination's README to the markers, and to the facts a block states that a run on one variant
cannot see for the others (the transfer mode a default worker asks for, the wheel's file name).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from hooks.runtime_calls import kit_runtime_calls
from tasks.readme import RUNS, block_problems, blocks, runs
from tasks.variants import matrix

WHEEL_COMBINATIONS = [combo for combo in matrix() if combo[0] == "wheel"]


@pytest.mark.parametrize("combo", WHEEL_COMBINATIONS, ids="-".join)
def test_every_readme_shell_block_is_run_as_written_or_marked_as_an_example_that_says_why(
    render: Callable[..., Path], combo: tuple[str, ...]
) -> None:
    """Build, install and the suite run everywhere; the server by hand and a default worker through it run where
    there is a device (the emulator), and are marked as needing one where there is none."""
    _, lmcache_driven, native_ops, emulator = combo
    readme = (render(lmcache_driven=lmcache_driven, native_ops=native_ops, emulator=emulator) / "README.md").read_text()
    assert block_problems(readme) == []
    expected = set(RUNS) if emulator == "yes" else set(RUNS) - {"server", "worker"}
    assert set(runs(readme)) == expected
    examples = {block.what for block in blocks(readme) if block.kind == "example"}
    assert emulator == "yes" or "needs a foo device (this project has no emulator)" in examples
    print("\n".join(f"line {b.line}: {b.kind} {b.what}" for b in blocks(readme)))


@pytest.mark.parametrize("lmcache_driven", ["no", "default"])
def test_a_backend_that_extends_a_builtin_documents_its_selection_and_runs_its_blocks_or_says_why(
    render: Callable[..., Path], lmcache_driven: str
) -> None:
    """Its README names the value of ``LMCACHE_DEVICE_BACKEND`` to set where both backends are available, the test
    switch that makes a stand-in's device count, and what the built-in does that a look-alike may lack; build,
    install and the suite run as written, the stand-in run is an example that says it needs a device."""
    project = render(device_name="cuda", backend_name="maca", lmcache_driven=lmcache_driven)
    readme = (project / "README.md").read_text()
    assert block_problems(readme) == []
    assert set(runs(readme)) == {"build", "install", "tests"}
    (stand_in,) = [block for block in blocks(readme) if block.kind == "example" and "needs a cuda device" in block.what]
    assert "LMCACHE_MACA_STAND_IN=1 LMCACHE_DEVICE_BACKEND=maca pytest" in stand_in.text
    assert "| both available | nothing: it refuses" in readme and "`LMCACHE_DEVICE_BACKEND=maca` |" in readme
    assert "## What LMCache's cuda backend does that your runtime may not" in readme


@pytest.mark.parametrize("lmcache_driven", ["no", "opt_in", "default"])
def test_the_readme_server_accepts_the_transfer_mode_a_default_worker_of_the_render_asks_for(
    render: Callable[..., Path], lmcache_driven: str
) -> None:
    """A worker asks for ``auto``, which is LMCache-driven only where the render makes it the default: there the
    server selects the plugin and accepts LMCache-driven workers, elsewhere it accepts engine-driven ones (an
    ``lmcache server`` accepts only LMCache-driven workers unless asked); the worker block's doctor asks for the
    default (no ``--mode``) on the server's port."""
    readme = (render(lmcache_driven=lmcache_driven) / "README.md").read_text()
    server, worker = (shlex.split(runs(readme)[name].text, comments=True) for name in ("server", "worker"))
    mode = server[server.index("--supported-transfer-mode") + 1]
    assert mode == ("lmcache_driven" if lmcache_driven == "default" else "engine_driven"), server
    assert ("LMCACHE_DEVICE_BACKEND=foo" in server[: server.index("lmcache")]) == (lmcache_driven == "default")
    doctor = worker[worker.index("lmcache-foo-doctor") :]
    assert "--mode" not in doctor and doctor[doctor.index("--server") + 1].endswith(f":{server[server.index('--port') + 1]}")


@pytest.mark.parametrize(("native_ops", "wheel"), [
    ("yes", "lmcache_foo_device-0.1.0-cp311-cp311-linux_x86_64.whl"),
    ("no", "lmcache_foo_device-0.1.0-py3-none-any.whl"),
])  # fmt: skip
def test_the_readme_install_block_finds_the_wheel_the_build_block_makes_pure_or_platform(
    render: Callable[..., Path], native_ops: str, wheel: str
) -> None:
    """The wheel line's glob matches the wheel's name whatever its tags (native ops make a platform wheel), and
    the build block writes it to ``dist/``."""
    readme = (render(native_ops=native_ops) / "README.md").read_text()
    (pattern,) = re.findall(r'"\$\(ls (dist/[^)]+)\)\[test\]"', runs(readme)["install"].text)
    assert fnmatch.fnmatch(f"dist/{wheel}", pattern), pattern
    assert "python -m build --wheel --no-isolation" in runs(readme)["build"].text


def readme_runtime_calls(readme: str) -> tuple[list[str], list[str]]:
    """The calls the README's table lists (its first column), and those its sample sentence names."""
    lines = readme.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("| call on `torch.")) + 2
    end = next(n for n in range(start, len(lines)) if not lines[n].startswith("| "))
    table = [line.removeprefix("| `").split("`")[0] for line in lines[start:end]]
    sentence = readme[readme.index("The sample code also calls the emulator's own runtime calls") :].split("\n\n")[0]
    return table, re.findall(r"^`([^`]+)` \(", sentence, re.M)


@pytest.mark.parametrize(("lmcache_driven", "native_ops"), [("no", "no"), ("default", "yes")])
def test_the_readme_lists_exactly_the_kits_runtime_calls_for_the_renders_parts(
    render: Callable[..., Path], lmcache_driven: str, native_ops: str
) -> None:
    """The torch-backend calls a vendor's runtime must give are the kit's list (the one the emulator, the doctor
    and the recorded run are held to), for the parts this render has: an LMCache-driven render's include the base
    IPC wrapper's ``get_device_properties().uuid`` and the interprocess events, an engine-only render's do not."""
    calls = kit_runtime_calls().for_plugin(lmcache_driven != "no", native_ops == "yes")
    table, samples = readme_runtime_calls((render(lmcache_driven=lmcache_driven, native_ops=native_ops)
                                           / "README.md").read_text())  # fmt: skip
    assert table == [call.name for call in calls if call.kind != "sample"]
    assert samples == [call.name for call in calls if call.kind == "sample"]
    driven = {"get_device_properties().uuid", "Event(interprocess=True)", "Event.ipc_handle", "Event.from_ipc_handle"}
    assert driven <= set(table) if lmcache_driven != "no" else not driven & set(table)
    assert {"Stream", "device_count", "torch.empty(..., pin_memory=True)"} <= set(table)
