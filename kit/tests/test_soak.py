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
