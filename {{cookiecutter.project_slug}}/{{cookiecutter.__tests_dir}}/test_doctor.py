# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The doctor command: right answers in a healthy setup, the named fix in broken ones.

Each case runs the installed command in a fresh interpreter (LMCache builds its
registry once per process); broken setups come from environment variables and
from fake plugins installed into a temporary directory on ``PYTHONPATH``, as
LMCache's own registry tests do with fake entry points.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import os
import shutil
import sys
import time

# Third Party
from _support import RIVAL_SPEC, child_env, fake_plugin, run_python
{%- if cookiecutter.emulator == 'no' %}
from conftest import DEVICE_PRESENT
{%- endif %}
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.servers import (
    CHUNK,
    LMCacheServer,
    free_port,
    running_server,
)
import pytest

PACKAGE = "{{ cookiecutter.import_package }}"
BACKEND = "{{ cookiecutter.backend_name }}"
DEVICE = "{{ cookiecutter.device_name }}"
SCRIPT = "{{ cookiecutter.import_package | replace('_', '-') }}-doctor"
DISTRIBUTION = "{{ cookiecutter.project_slug }}"
EMULATOR = "{{ cookiecutter.__emulator_env_var }}"
#: What the torch extension check's fix names: the module to install.
EXTENSION = "{{ cookiecutter.torch_extension_module or cookiecutter.__torch_module_name }}"
#: Worst case allowed for any failure to be reported.
DEADLINE_S = 30
#: The doctor's --timeout where only a timeout can end the live check (no server, wrong
#: mode).
TIMEOUT = "1"


def doctor(
    *args: str, env: dict[str, str | None] | None = None, pythonpath: Path | None = None
) -> tuple[int, str, float]:
    """Run ``python -m <pkg>.doctor *args``; (exit status, stdout, seconds)."""
    overrides: dict[str, str | None] = {
        "LMCACHE_DEVICE_BACKEND": None,
        "DEVICE_TYPE": None,
        **(env or {}),
    }
    if pythonpath is not None:
        overrides["PYTHONPATH"] = str(pythonpath)
    started = time.monotonic()
    done = spawn.run(
        [sys.executable, "-m", f"{PACKAGE}.doctor", *args],
        env=child_env(overrides),
        timeout=DEADLINE_S + 30,
        cwd=Path(__file__).resolve().parent.parent.parent,
    )
    return done.returncode, done.stdout, time.monotonic() - started


def line(output: str, name: str) -> str:
    """The report line of check ``name`` (with its fix line, if any)."""
    lines = [*output.splitlines(), ""]
    for i, text in enumerate(lines[:-1]):
        if text[2:].startswith(f"{name}:"):
            return (
                f"{text}\n{lines[i + 1]}"
                if lines[i + 1].startswith("    fix:")
                else text
            )
    raise AssertionError(f"no {name!r} line in:\n{output}")


# ------------------------------------------------------------- healthy --


def test_doctor_passes_every_check_on_a_healthy_install() -> None:
    """Every line is ✓, the exit status is 0, and the report names backend, device and
    ops."""
    status, out, _ = doctor()
    assert status == 0, out
    assert "✗" not in out and "all checks passed" in out
    checks = (
        "import lmcache",
        "lmcache version",
        "torch extension",
        "torch.{{ cookiecutter.__torch_module_name }}",
        "entry point",
        "registered",
        "device type",
        "selection",
        "ops",
        "transfer modes",
    )
    for name in checks:
        assert line(out, name).startswith("✓"), out
    assert f"backend {BACKEND!r}, device type {DEVICE!r}" in line(out, "selection")
    assert "{{ cookiecutter.class_prefix }}DeviceOps" in line(out, "ops")


def test_doctor_json_lists_the_same_checks_for_machines() -> None:
    """--json gives ok plus one object per check, with name, ok, detail and fix."""
    status, out, _ = doctor("--json")
    report = json.loads(out)
    assert status == 0 and report["ok"] is True
    assert all(
        set(check) == {"name", "ok", "detail", "fix"} for check in report["checks"]
    )
    assert "selection" in [check["name"] for check in report["checks"]]


def test_doctor_is_installed_as_a_console_script() -> None:
    """The wheel installs the command next to this interpreter."""
    script = shutil.which(SCRIPT, path=os.path.dirname(sys.executable))
    assert script is not None, f"{SCRIPT} is not installed next to {sys.executable}"
    done = spawn.run([script, "--help"], timeout=60, env=child_env({}))
    assert done.returncode == 0 and "--server" in done.stdout


def test_doctor_without_the_kit_names_the_pip_command_that_brings_it() -> None:
    """The wheel does not require lmcache-device-kit, whose checks the doctor runs:
    without it the command exits 1 with the extra to install, not a traceback."""
    done = run_python(
        "import sys\n"
        "sys.modules['lmcache_device_kit'] = None  # as if not installed\n"
        f"from {PACKAGE}.doctor import main\n"
        "main([])\n"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f'pip install "{DISTRIBUTION}[doctor]"' in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


# -------------------------------------------------------------- broken --


@pytest.mark.without_device
def test_doctor_reports_a_missing_device_extension_with_the_fix() -> None:
    """No vendor extension{% if cookiecutter.emulator == 'yes' %} (emulator off){% endif %}: ✗ torch extension, fix names it, exit 1."""
{%- if cookiecutter.emulator == 'yes' %}
    status, out, _ = doctor(env={EMULATOR: "0"})
{%- else %}
    if DEVICE_PRESENT:
        pytest.skip(f"the {DEVICE} extension is installed on this host")
    status, out, _ = doctor()
{%- endif %}
    assert status == 1
    report = line(out, "torch extension")
    assert report.startswith("✗") and "fix:" in report
    assert EXTENSION in report


def test_doctor_reports_an_unknown_backend_choice_with_the_fix() -> None:
    """LMCACHE_DEVICE_BACKEND=no_such_backend fails ``import lmcache``: ✗ 'unset it'."""
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": "no_such_backend"})
    assert status == 1
    report = line(out, "import lmcache")
    assert (
        report.startswith("✗") and "no_such_backend" in report and "unset it" in report
    )


def test_doctor_reports_a_rival_backend_for_the_same_device_type(
    tmp_path: Path,
) -> None:
    """Another available backend for this device type, unless LMCACHE_DEVICE_BACKEND
    picks ours: ✗, fix exports it."""
    root = fake_plugin(
        tmp_path,
        "rival",
        "rival = rival_plugin:RivalSpec",
        "rival_plugin",
        RIVAL_SPEC.replace("__BACKEND__", "rival"),
    )
    # LMCache's auto-detection refuses to choose
    status, out, _ = doctor(pythonpath=root)
    assert status == 1
    report = line(out, "import lmcache")
    assert (
        report.startswith("✗")
        and "rival" in report
        and f"export LMCACHE_DEVICE_BACKEND={BACKEND}" in report
    )
    # the other one chosen
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": "rival"}, pythonpath=root)
    assert status == 1
    report = line(out, "device type")
    assert (
        report.startswith("✗")
        and "rival" in report
        and f"export LMCACHE_DEVICE_BACKEND={BACKEND}" in report
    )
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": BACKEND}, pythonpath=root)
    assert status == 0, out


def test_doctor_reports_a_second_plugin_claiming_the_backend_name(
    tmp_path: Path,
) -> None:
    """A second entry point with this backend name: ✗ entry point, naming the other
    plugin."""
    root = fake_plugin(
        tmp_path,
        "impostor",
        f"{BACKEND} = impostor_plugin:RivalSpec",
        "impostor_plugin",
        RIVAL_SPEC.replace("__BACKEND__", BACKEND),
    )
    status, out, _ = doctor(pythonpath=root)
    assert status == 1
    report = line(out, "entry point")
    assert (
        report.startswith("✗")
        and "impostor_plugin:RivalSpec" in report
        and "fix:" in report
    )


# ---------------------------------------------------------------- live --


@pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
def test_doctor_round_trips_through_a_live_server_and_names_the_sub_path(
    server: LMCacheServer,
) -> None:
    """--server stores, finds and retrieves identical bytes, and says which transfer
    path ran."""
    status, out, _ = doctor(
        "--server", server.url, "--mode", "engine_driven", "--tokens", str(2 * CHUNK)
    )
    assert status == 0, out + server.log_tail()
    report = line(out, f"server {server.url}")
    # KV bytes in the messages: pickled up to lmcache 0.5.6, inline from 0.5.7
    messages = ("engine-driven pickle:", "engine-driven inline:")
    assert report.startswith("✓") and "identical" in report, report
    assert any(sub_path in report for sub_path in messages), report


def test_doctor_reports_an_absent_server_within_the_deadline() -> None:
    """Nothing listens at the URL: ✗ within 30 s, and the fix asks whether a server is
    listening."""
    url = f"tcp://127.0.0.1:{free_port()}"
    status, out, seconds = doctor(
        "--server",
        url,
        "--mode",
        "engine_driven",
        "--timeout",
        TIMEOUT,
        "--tokens",
        "64",
    )
    assert status == 1 and seconds < DEADLINE_S, (seconds, out)
    report = line(out, f"server {url}")
    assert report.startswith("✗") and "is an lmcache server listening" in report


@pytest.mark.own_server
def test_doctor_explains_a_transfer_mode_mismatch_that_lmcache_only_times_out_on(
    tmp_path: Path,
) -> None:
    """An engine-driven doctor against an lmcache_driven-only server: ✗ within 30 s
    naming the mode fix."""
    log = tmp_path / "server.log"
    with running_server(log, transfer_mode="lmcache_driven") as server:
        args = (
            "--server",
            server.url,
            "--mode",
            "engine_driven",
            "--timeout",
            TIMEOUT,
            "--tokens",
            "64",
        )
        status, out, seconds = doctor(*args)
    assert status == 1 and seconds < DEADLINE_S, (seconds, out)
    report = line(out, f"server {server.url}")
    assert report.startswith("✗") and "--supported-transfer-mode" in report


@pytest.mark.parametrize("server", ["lmcache-driven"], indirect=True)
def test_doctor_round_trips_lmcache_driven_through_a_server_running_this_plugin(
    server: LMCacheServer,
) -> None:
    """--mode lmcache_driven against a server that runs this plugin: ✓ with the
    lmcache-driven path named."""
    status, out, _ = doctor(
        "--server", server.url, "--mode", "lmcache_driven", "--tokens", str(2 * CHUNK)
    )
    assert status == 0, out + server.log_tail()
    report = line(out, f"server {server.url}")
    assert (
        report.startswith("✓") and "lmcache-driven" in report and "identical" in report
    )
