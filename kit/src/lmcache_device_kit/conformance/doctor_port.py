# SPDX-License-Identifier: Apache-2.0
"""A plugin's ``doctor --port``: the porting ladder, each step proven, failed or not
ported yet, on this install.

Each case runs the installed command in a fresh interpreter, as ``doctor.py``'s do
(its helpers run it here too); no server. Which steps apply, and which still hold
the sample's code, the test reads from the kit's ladder and the plugin's installed
sources (``doctor.port``), never from the template's answers. An in-tree backend
has no doctor of its own: skipped there.

Imports neither lmcache nor the plugin at import time; torch inside the tests.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from typing import Any
import importlib
import json

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.doctor import doctor
from lmcache_device_kit.conformance.support import run_python
from lmcache_device_kit.doctor import port
from lmcache_device_kit.doctor.ladder import STEPS
from lmcache_device_kit.runtime_calls import EMULATOR_ONLY


def ladder(*env: tuple[str, str]) -> tuple[int, dict[str, dict[str, Any]]]:
    """``doctor --port --json`` (with ``env``): its status, and its steps by key."""
    status, out, _ = doctor("--port", "--json", env=dict(env))
    report = json.loads(out)
    assert report["ok"] == (status == 0), out
    keys = [step.key for step in STEPS if port.applies(step)]
    names = [check["name"].split(". ", 1)[-1] for check in report["checks"]]
    assert names == [s.title for s in STEPS if s.key in keys], out
    return status, dict(zip(keys, report["checks"], strict=True))


def state(check: dict[str, Any]) -> str:
    return "not ported" if check["pending"] else "✓" if check["ok"] else "✗"


class BaseDoctorPortTests(ConformanceTests):
    """The ladder's steps, their states and the exit status."""

    requires = frozenset({"wheel"})

    def test_doctor_port_lists_the_ladder_in_order_and_passes_only_when_all_are_proven(
        self, runtime: Any
    ) -> None:
        """Every step that applies to this plugin, in the ladder's order; a ✗ with its
        fix, a step not ported yet with what to port; exit 0 only if all are ✓. On the
        CPU emulator, every step whose sample code makes calls this emulator has (its
        runtime rules may leave some out) is proven, and none fails."""
        status, steps = ladder()
        assert (status == 0) == all(c["ok"] for c in steps.values()), steps
        assert all(c["fix"] for c in steps.values() if not c["ok"]), steps
        if getattr(runtime, "is_emulator", False):
            proves = [
                key
                for key in steps
                if port.holds_sample(_step(key))
                and all(hasattr(runtime, call) for _, call in _step(key).sample)
            ]
            assert {k: state(steps[k]) for k in proves} == dict.fromkeys(proves, "✓")
            assert [k for k, c in steps.items() if state(c) == "✗"] == [], steps

    def test_doctor_port_reads_the_device_numbers_of_the_project_it_runs_in(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Run in the project's directory, the last step reads its pyproject.toml's
        ``[tool.lmcache-device-kit.device]``: a described device is ✓, a number that
        is not one ✗ with what to write, the kit's defaults not ported yet, and run
        elsewhere, the step says where to run (its proof, in this process)."""
        # First Party
        from lmcache_device_kit.doctor import project_probes

        package = kit_backend.current().package
        project = importlib.import_module(f"{package}._lmcache_compat").PROJECT
        table = '[project]\nname = "{}"\n[tool.lmcache-device-kit.device]\n{}\n'
        seen = {}
        monkeypatch.chdir(tmp_path)
        for case, line in (("described", "launch_us = 3.0"), ("wrong", "sync_us = 0")):
            (tmp_path / "pyproject.toml").write_text(table.format(project, line))
            seen[case] = project_probes.device_numbers(None)
        (tmp_path / "pyproject.toml").write_text(table.format(project, ""))
        seen["defaults"] = project_probes.device_numbers(None)
        (tmp_path / "pyproject.toml").write_text(table.format("another", ""))
        seen["elsewhere"] = project_probes.device_numbers(None)
        assert {case: outcome.ok for case, outcome in seen.items()} == {
            "described": True,
            "wrong": False,
            "defaults": None,
            "elsewhere": None,
        }, seen
        assert "sync_us" in seen["wrong"].detail and seen["wrong"].fix, seen

    def test_doctor_port_without_the_emulator_reads_the_samples_steps_not_ported_yet(
        self, emulator: Any
    ) -> None:
        """With the emulator off, the runtime has none of its calls: each step whose
        installed code still calls them reads "not ported yet", none reads ✓, exit 1
        (what an untouched render shows on a device of its own)."""
        backend = kit_backend.current()
        status, steps = ladder((backend.emulator_env_var, "0"))
        sample = {k for k in steps if port.holds_sample(_step(k))}
        pending = {k for k, c in steps.items() if c["pending"]}
        assert status == 1 and sample and sample <= pending, steps
        assert [k for k, c in steps.items() if c["ok"]] == [], steps

    def test_doctor_port_reads_a_launcher_the_runtime_lacks_as_not_ported_yet(
        self, emulator: Any, lmcache_driven: Any
    ) -> None:
        """The emulator without host functions (``..._HOST_FUNCS=0``): a plugin whose
        launcher still asks the emulator for one gives the sample's None, which reads
        "not ported yet", not ✓ "none"; a plugin that ported it is proven either
        way."""
        host_functions = _step("host-functions")
        backend = kit_backend.current()
        env = (f"{backend.emulator_env_var}_HOST_FUNCS", "0")
        _, steps = ladder(env)
        expected = "not ported" if port.holds_sample(host_functions) else "✓"
        assert state(steps["host-functions"]) == expected, steps["host-functions"]

    def test_a_runtime_without_ipc_export_is_offered_engine_driven_only_saying_why(
        self, emulator: Any, lmcache_driven: Any
    ) -> None:
        """Day one on a device: its IPC memory not ported yet (the emulator without
        it, ``..._IPC=0``). The spec offers engine-driven transfer only and ``auto``
        means it (fail closed, as LMCache's MUSA and SUPA backends do), the plugin
        says so once with its slow-path mark, and ``doctor --port`` reads the IPC step
        and the offer "not ported yet", the offer with the probe's reason."""
        backend = kit_backend.current()
        env = (f"{backend.emulator_env_var}_IPC", "0")
        _, steps = ladder(env)
        offer = steps["lmcache-driven"]
        assert state(steps["ipc-memory"]) == state(offer) == "not ported", steps
        assert state(steps["thread-context"]) == "✓", steps["thread-context"]
        assert "LMCache-driven transfer is not offered here" in offer["detail"]
        assert "ipc_export_handle" in offer["detail"], offer
        code = (
            "import lmcache; from lmcache.v1.platform import get_device_spec; "
            f"s = get_device_spec({backend.device_type!r}); "
            "print(s.is_lmcache_driven_available(), s.is_handle_transfer_available(), "
            "getattr(s.default_mp_transfer_mode(), 'value', 'engine_driven'))"
        )
        done = run_python(code, env={env[0]: env[1], backend.emulator_env_var: "1"})
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-3:] == ["False", "False", "engine_driven"]
        assert f"{backend.backend_name} slow path:" in done.stderr + done.stdout

    def test_every_call_only_the_emulator_has_is_on_the_ladder(
        self, emulator: Any
    ) -> None:
        """What the CPU emulator's ``torch.<device>`` has beyond torch's own device
        modules (``torch.cuda``), test facilities aside, is a runtime call a vendor
        ports: each is a sample call of a ladder step."""
        # Third Party
        import torch

        module = getattr(torch, kit_backend.current().torch_module_name)
        only_here = set(vars(module)) - set(dir(torch.cuda)) - set(EMULATOR_ONLY)
        on_ladder = {call for step in STEPS for _, call in step.sample}
        assert sorted(only_here - on_ladder) == []


def _step(key: str) -> Any:
    return next(step for step in STEPS if step.key == key)
