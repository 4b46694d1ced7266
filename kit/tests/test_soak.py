# SPDX-License-Identifier: Apache-2.0
"""The soak is a kit command a project runs on its own backend.

``python -m lmcache_device_kit.soak --package <import package>`` (a project's ``nox -s
soak``) chooses the backend as the kit's other commands do; its cycles run against
real servers, so only its command line is checked here (``nox -s soak`` runs it).
"""

# Future
from __future__ import annotations

# Third Party
import pytest

# First Party
from lmcache_device_kit import soak


def run(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr("sys.argv", ["soak", *argv])
    with pytest.raises(SystemExit) as exited:
        soak.main()
    return int(exited.value.code or 0)


def test_the_soak_takes_the_backend_by_its_package_as_the_kits_commands_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(monkeypatch, "--help") == 0
    assert "--package" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--cycles", "--warmup"])
def test_the_soak_refuses_a_run_without_cycles_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """No server starts for a run that could measure nothing."""
    assert run(monkeypatch, option, "0", "--package", "not_installed") == 2
    assert "--warmup and --cycles must be positive" in capsys.readouterr().err


def test_growth_per_cycle_tells_a_plateau_from_a_leak() -> None:
    """RSS that stops growing once the rings fill reads about 0 KiB per cycle; a leak
    reads its size per cycle, however large the process."""
    plateau = [(c, 300_000 + (40 if c % 50 else 0)) for c in range(1000, 2001, 25)]
    leak = [(c, 300_000 + 11 * c) for c in range(1000, 2001, 25)]
    assert abs(soak.kib_per_cycle(plateau)) < 0.1
    assert soak.kib_per_cycle(leak) == pytest.approx(11)
    assert soak.kib_per_cycle(leak[:1]) == 0.0


def test_only_the_shared_memory_the_soaks_own_processes_map_is_theirs() -> None:
    """A segment this process maps is listed; one another process made (a test
    running beside the soak) is not, so it is never counted as the soak's leak."""
    # Standard
    from multiprocessing import shared_memory
    import os
    import subprocess
    import sys

    mine = shared_memory.SharedMemory(create=True, size=4096)
    code = (
        "from multiprocessing import shared_memory as s, resource_tracker as r; "
        "m = s.SharedMemory(create=True, size=4096); r.unregister(m._name, "
        "'shared_memory'); print(m.name)"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        mapped = soak.shm_mapped(os.getpid())
        assert mine.name in mapped and other.lstrip("/") not in mapped
    finally:
        mine.close()
        mine.unlink()
        shared_memory.SharedMemory(name=other).unlink()


def test_the_soak_turns_off_lmcaches_kv_event_replay_where_a_release_has_it() -> None:
    """0.5.6+ retain every stored chunk's token ids for KV-event replay (32,768
    records, 65,536 bindings): bounded, but filling for tens of thousands of requests,
    which a leak check would read as a leak. The flag is declared from 0.5.6 on."""
    # Standard
    from importlib import metadata

    # Third Party
    from packaging.version import Version

    # First Party
    from lmcache_device_kit.harness import lmcache_calls, surface

    has_them = Version(metadata.version("lmcache")) >= Version("0.5.6")
    assert lmcache_calls.kv_events_off() == (
        ["--kv-event-log-size", "0"] if has_them else []
    )
    assert surface.SERVER_FLAGS["--kv-event-log-size"] == ("0.5.6", None)
