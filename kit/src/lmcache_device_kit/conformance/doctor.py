# SPDX-License-Identifier: Apache-2.0
"""A plugin's doctor command: right answers in a healthy setup, the named fix in broken
ones.

Each case runs the installed command in a fresh interpreter (LMCache builds its
registry once per process); broken setups come from environment variables and
from fake plugins installed into a temporary directory on ``PYTHONPATH``, as
LMCache's own registry tests do with fake entry points. An in-tree backend has no
doctor of its own: skipped there.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from pathlib import Path
import json
import os
import shutil
import sys
import tempfile
import time

# Third Party
from packaging.requirements import Requirement
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.discovery import distribution
from lmcache_device_kit.conformance.support import fake_plugin, rival_spec, run_python
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.spawn import child_env

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
        [sys.executable, "-m", f"{kit_backend.current().package}.doctor", *args],
        env=child_env(overrides),
        timeout=DEADLINE_S + 30,
        cwd=tempfile.gettempdir(),  # outside any source tree
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


def console_script() -> str:
    """The console script the plugin's distribution installs for its doctor."""
    doctor_module = f"{kit_backend.current().package}.doctor"
    scripts = [
        ep.name
        for ep in metadata.distribution(distribution()).entry_points
        if ep.group == "console_scripts" and ep.value.split(":")[0] == doctor_module
    ]
    assert len(scripts) == 1, f"one console script running {doctor_module}: {scripts}"
    return scripts[0]


class BaseDoctorTests(ConformanceTests):
    """The doctor's checks, healthy and broken, without a server."""

    requires = frozenset({"wheel"})

    # ----------------------------------------------------------- healthy --

    def test_doctor_passes_every_check_on_a_healthy_install(self) -> None:
        """Every line is ✓, the exit status is 0, and the report names backend, device
        and ops."""
        backend = kit_backend.current()
        status, out, _ = doctor()
        assert status == 0, out
        assert "✗" not in out and "all checks passed" in out
        checks = (
            "import lmcache",
            "lmcache version",
            "torch extension",
            f"torch.{backend.torch_module_name}",
            "entry point",
            "registered",
            "device type",
            "selection",
            "ops",
            "transfer modes",
        )
        for name in checks:
            assert line(out, name).startswith("✓"), out
        selected = (
            f"backend {backend.backend_name!r}, device type {backend.device_type!r}"
        )
        assert selected in line(out, "selection")
        assert registered_spec().ops_cls.__name__ in line(out, "ops")

    def test_doctor_json_lists_the_same_checks_for_machines(self) -> None:
        """--json gives ok plus one object per check, with name, ok, detail, fix and
        pending (not ported yet)."""
        status, out, _ = doctor("--json")
        report = json.loads(out)
        assert status == 0 and report["ok"] is True
        assert all(
            set(check) == {"name", "ok", "detail", "fix", "pending"}
            for check in report["checks"]
        )
        assert "selection" in [check["name"] for check in report["checks"]]

    def test_doctor_is_installed_as_a_console_script(self) -> None:
        """The wheel installs the command next to this interpreter."""
        name = console_script()
        script = shutil.which(name, path=os.path.dirname(sys.executable))
        assert script is not None, f"{name} is not installed next to {sys.executable}"
        done = spawn.run([script, "--help"], timeout=60, env=child_env({}))
        assert done.returncode == 0 and "--server" in done.stdout

    def test_doctor_without_the_kit_names_the_pip_command_that_restores_it(
        self,
    ) -> None:
        """The wheel requires lmcache-device-kit (its shims, the doctor's checks), but
        ``pip install --no-deps`` leaves it out: the command then exits 1 with the
        wheel's own requirement of the kit to install, not a traceback."""
        kit = [
            r
            for r in metadata.requires(distribution()) or []
            if r.startswith("lmcache-device-kit") and "extra ==" not in r
        ]
        assert len(kit) == 1, f"the wheel requires the kit once, not {kit}"
        done = run_python(
            "import sys\n"
            "sys.modules['lmcache_device_kit'] = None  # as if not installed\n"
            f"from {kit_backend.current().package}.doctor import main\n"
            "main([])\n"
        )
        assert done.returncode == 1, done.stdout + done.stderr
        wanted = Requirement(kit[0])
        said = done.stderr.split('pip install "', 1)[-1].split('"', 1)[0]
        assert (Requirement(said).name, Requirement(said).specifier) == (
            wanted.name,
            wanted.specifier,
        ), done.stderr
        assert "Traceback" not in done.stderr, done.stderr

    # ------------------------------------------------------------ broken --

    @pytest.mark.without_device
    def test_doctor_reports_a_missing_device_extension_with_the_fix(self) -> None:
        """No vendor extension (the emulator off, where there is one): ✗ torch
        extension, fix names it, exit 1."""
        backend = kit_backend.current()
        if backend.emulator_env_var:
            status, out, _ = doctor(env={backend.emulator_env_var: "0"})
        elif backend.device_present():
            pytest.skip(
                f"the {backend.device_type} extension is installed on this host"
            )
        else:
            status, out, _ = doctor()
        assert status == 1
        if backend.extends:  # torch.<device> is built in: the runtime is missing
            report = line(out, "vendor runtime")
            assert "LMCACHE_DEVICE_BACKEND=" + backend.backend_name in report
        else:
            report = line(out, "torch extension")
            extension = backend.torch_extension_module or backend.torch_module_name
            assert extension in report
        assert report.startswith("✗") and "fix:" in report

    def test_doctor_reports_an_unknown_backend_choice_with_the_fix(self) -> None:
        """LMCACHE_DEVICE_BACKEND=no_such_backend fails ``import lmcache``: ✗ 'unset
        it'."""
        status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": "no_such_backend"})
        assert status == 1
        report = line(out, "import lmcache")
        assert (
            report.startswith("✗")
            and "no_such_backend" in report
            and "unset it" in report
        )

    def test_doctor_reports_a_rival_backend_for_the_same_device_type(
        self,
        tmp_path: Path,
    ) -> None:
        """Another available backend for this device type, unless LMCACHE_DEVICE_BACKEND
        picks ours: ✗, fix exports it."""
        name = kit_backend.current().backend_name
        root = fake_plugin(
            tmp_path,
            "rival",
            "rival = rival_plugin:RivalSpec",
            "rival_plugin",
            rival_spec("rival", type(registered_spec())),
        )
        # LMCache's auto-detection refuses to choose
        status, out, _ = doctor(pythonpath=root)
        assert status == 1
        report = line(out, "import lmcache")
        assert (
            report.startswith("✗")
            and "rival" in report
            and f"export LMCACHE_DEVICE_BACKEND={name}" in report
        )
        # the other one chosen
        status, out, _ = doctor(
            env={"LMCACHE_DEVICE_BACKEND": "rival"}, pythonpath=root
        )
        assert status == 1
        report = line(out, "device type")
        assert (
            report.startswith("✗")
            and "rival" in report
            and f"export LMCACHE_DEVICE_BACKEND={name}" in report
        )
        status, out, _ = doctor(env={"LMCACHE_DEVICE_BACKEND": name}, pythonpath=root)
        assert status == 0, out

    def test_doctor_reports_a_second_plugin_claiming_the_backend_name(
        self,
        tmp_path: Path,
    ) -> None:
        """A second entry point with this backend name: ✗ entry point, naming the other
        plugin."""
        name = kit_backend.current().backend_name
        root = fake_plugin(
            tmp_path,
            "impostor",
            f"{name} = impostor_plugin:RivalSpec",
            "impostor_plugin",
            rival_spec(name, type(registered_spec())),
        )
        status, out, _ = doctor(pythonpath=root)
        assert status == 1
        report = line(out, "entry point")
        assert (
            report.startswith("✗")
            and "impostor_plugin:RivalSpec" in report
            and "fix:" in report
        )
