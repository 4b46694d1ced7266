# SPDX-License-Identifier: {{ cookiecutter.license }}
"""The doctor command: right answers in a healthy setup, the named fix in broken ones.

Each case runs the installed command in a fresh interpreter (LMCache builds its
registry once per process); broken setups come from environment variables and
from fake plugins installed into a temporary directory on ``PYTHONPATH``, as
LMCache's own registry tests do with fake entry points.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _support import RIVAL_SPEC, LMCacheServer, child_env, fake_plugin, free_port, running_server

PACKAGE = "{{ cookiecutter.import_package }}"
BACKEND = "{{ cookiecutter.backend_name }}"
DEVICE = "{{ cookiecutter.device_name }}"
SCRIPT = "{{ cookiecutter.import_package | replace('_', '-') }}-doctor"
EMULATOR = "{{ cookiecutter.__emulator_env_var }}"
#: Worst case allowed for any failure to be reported.
DEADLINE_S = 30
#: The servers' chunk size; the doctor stores two chunks.
CHUNK_TOKENS = 64


def doctor(
    *args: str, env: dict[str, str | None] | None = None, pythonpath: Path | None = None
) -> tuple[int, str, float]:
    """Run ``python -m <pkg>.doctor *args``; (exit status, stdout, seconds)."""
    overrides: dict[str, str | None] = {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None, **(env or {})}
    if pythonpath is not None:
        overrides["PYTHONPATH"] = str(pythonpath)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.doctor", *args],
        env=child_env(overrides),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + 30,
        cwd=Path(__file__).resolve().parent.parent.parent,
    )
    return done.returncode, done.stdout, time.monotonic() - started


def line(output: str, name: str) -> str:
    """The report line of check ``name`` (with its fix line, if any)."""
    lines = [*output.splitlines(), ""]
    for i, text in enumerate(lines[:-1]):
        if text[2:].startswith(f"{name}:"):
            return f"{text}\n{lines[i + 1]}" if lines[i + 1].startswith("    fix:") else text
    raise AssertionError(f"no {name!r} line in:\n{output}")


# ------------------------------------------------------------- healthy --


def test_doctor_passes_every_check_on_a_healthy_install() -> None:
    """Every line is ✓, the exit status is 0, and the report names backend, device and ops."""
    status, out, _ = doctor()
    assert status == 0, out
    assert "✗" not in out and "all checks passed" in out
    for name in ("import lmcache", "lmcache version", "torch extension", "torch.{{ cookiecutter.__torch_module_name }}",
                 "entry point", "registered", "device type", "selection", "ops", "transfer modes"):  # fmt: skip
        assert line(out, name).startswith("✓"), out
    assert f"backend {BACKEND!r}, device type {DEVICE!r}" in line(out, "selection")
    assert "{{ cookiecutter.class_prefix }}DeviceOps" in line(out, "ops")


def test_doctor_json_lists_the_same_checks_for_machines() -> None:
    """--json gives ok plus one object per check, with name, ok, detail and fix."""
    status, out, _ = doctor("--json")
    report = json.loads(out)
    assert status == 0 and report["ok"] is True
    assert all(set(check) == {"name", "ok", "detail", "fix"} for check in report["checks"])
    assert "selection" in [check["name"] for check in report["checks"]]


def test_doctor_is_installed_as_a_console_script() -> None:
    """The wheel installs the command next to this interpreter."""
    script = shutil.which(SCRIPT, path=os.path.dirname(sys.executable))
    assert script is not None, f"{SCRIPT} is not installed next to {sys.executable}"
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, env=child_env({}))
    assert done.returncode == 0 and "--server" in done.stdout


def test_doctor_names_match_the_spec_module() -> None:
    """The doctor's copy of the backend names equals device.py's (it may not import device.py early)."""
    code = (
        "import lmcache; from {{ cookiecutter.import_package }} import device, doctor; "
        "print(all(getattr(device, n) == getattr(doctor, n) for n in "
        "('BACKEND_NAME', 'DEVICE_TYPE', 'TORCH_MODULE_NAME', 'TORCH_EXTENSION_MODULE', 'EMULATOR_ENV_VAR')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_env({}))
    assert done.stdout.strip().endswith("True"), done.stderr[-2000:]


# -------------------------------------------------------------- broken --


def test_doctor_reports_a_missing_device_extension_with_the_fix() -> None:
    """Without the vendor extension (emulator off): ✗ torch extension, the fix names it, exit 1."""
    status, out, _ = doctor(env={EMULATOR: "0"})
    assert status == 1
    report = line(out, "torch extension")
    assert report.startswith("✗") and "fix:" in report
    assert "{{ cookiecutter.torch_extension_module or cookiecutter.__torch_module_name }}" in report


def test_doctor_reports_an_unknown_backend_choice_with_the_fix() -> None:
    """LMCACHE_DEVICE_BACKEND naming no backend makes ``import lmcache`` fail: ✗ with 'unset it'."""
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": "no_such_backend"})
    assert status == 1
    report = line(out, "import lmcache")
    assert report.startswith("✗") and "no_such_backend" in report and "unset it" in report


def test_doctor_reports_a_rival_backend_for_the_same_device_type(tmp_path: Path) -> None:
    """Another available backend for this device type, unless LMCACHE_DEVICE_BACKEND picks ours: ✗, fix exports it."""
    root = fake_plugin(tmp_path, "rival", "rival = rival_plugin:RivalSpec", "rival_plugin",
                       RIVAL_SPEC.replace("__BACKEND__", "rival"))  # fmt: skip
    status, out, _ = doctor(pythonpath=root)  # LMCache's auto-detection refuses to choose
    assert status == 1
    report = line(out, "import lmcache")
    assert report.startswith("✗") and "rival" in report and f"export LMCACHE_DEVICE_BACKEND={BACKEND}" in report
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": "rival"}, pythonpath=root)  # the other one chosen
    assert status == 1
    report = line(out, "device type")
    assert report.startswith("✗") and "rival" in report and f"export LMCACHE_DEVICE_BACKEND={BACKEND}" in report
    status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": BACKEND}, pythonpath=root)
    assert status == 0, out


def test_doctor_reports_a_second_plugin_claiming_the_backend_name(tmp_path: Path) -> None:
    """A second entry point with this backend name: ✗ entry point, naming the other plugin."""
    root = fake_plugin(tmp_path, "impostor", f"{BACKEND} = impostor_plugin:RivalSpec", "impostor_plugin",
                       RIVAL_SPEC.replace("__BACKEND__", BACKEND))  # fmt: skip
    status, out, _ = doctor(pythonpath=root)
    assert status == 1
    report = line(out, "entry point")
    assert report.startswith("✗") and "impostor_plugin:RivalSpec" in report and "fix:" in report


# ---------------------------------------------------------------- live --


@pytest.fixture(scope="module")
def engine_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LMCacheServer]:
    log = tmp_path_factory.mktemp("doctor-server") / "server.log"
    with running_server(log, transfer_mode="engine_driven", shm_name=None, chunk_size=CHUNK_TOKENS) as server:
        yield server


def test_doctor_round_trips_through_a_live_server_and_names_the_sub_path(engine_server: LMCacheServer) -> None:
    """--server stores, finds and retrieves identical bytes, and says which transfer path ran."""
    status, out, _ = doctor("--server", engine_server.url, "--mode", "engine_driven", "--tokens", str(2 * CHUNK_TOKENS))
    assert status == 0, out + engine_server.log_tail()
    report = line(out, f"server {engine_server.url}")
    assert report.startswith("✓") and "engine-driven pickle" in report and "identical" in report


def test_doctor_reports_an_absent_server_within_the_deadline() -> None:
    """Nothing listens at the URL: ✗ within 30 s, and the fix asks whether a server is listening."""
    url = f"tcp://127.0.0.1:{free_port()}"
    status, out, seconds = doctor("--server", url, "--mode", "engine_driven", "--timeout", "5", "--tokens", "64")
    assert status == 1 and seconds < DEADLINE_S, (seconds, out)
    report = line(out, f"server {url}")
    assert report.startswith("✗") and "is an lmcache server listening" in report


def test_doctor_explains_a_transfer_mode_mismatch_that_lmcache_only_times_out_on(tmp_path: Path) -> None:
    """An engine-driven doctor against an lmcache_driven-only server: ✗ within 30 s naming the mode fix."""
    log = tmp_path / "server.log"
    with running_server(log, transfer_mode="lmcache_driven", shm_name=None, chunk_size=CHUNK_TOKENS) as server:
        args = ("--server", server.url, "--mode", "engine_driven", "--timeout", "5", "--tokens", "64")
        status, out, seconds = doctor(*args)
    assert status == 1 and seconds < DEADLINE_S, (seconds, out)
    report = line(out, f"server {server.url}")
    assert report.startswith("✗") and "--supported-transfer-mode" in report


def test_doctor_round_trips_lmcache_driven_through_a_server_running_this_plugin(spec, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--mode lmcache_driven against a server that runs this plugin: ✓ with the lmcache-driven path named."""
    if not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    server_env = {"LMCACHE_DEVICE_BACKEND": BACKEND, EMULATOR: os.environ.get(EMULATOR, "1")}
    log = tmp_path / "server.log"
    with running_server(log, transfer_mode="lmcache_driven", shm_name=None, chunk_size=CHUNK_TOKENS,
                        env=server_env) as server:  # fmt: skip
        args = ("--server", server.url, "--mode", "lmcache_driven", "--tokens", str(2 * CHUNK_TOKENS))
        status, out, _ = doctor(*args)
        assert status == 0, out + server.log_tail()
    report = line(out, f"server {server.url}")
    assert report.startswith("✓") and "lmcache-driven" in report and "identical" in report
