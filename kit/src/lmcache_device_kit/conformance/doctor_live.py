# SPDX-License-Identifier: Apache-2.0
"""A plugin's doctor command against live servers: ``--server`` round trips, an absent
server, a server in the other transfer mode.

Each case runs the installed command in a fresh interpreter, as ``doctor.py``'s do
(its helpers run it here too). An in-tree backend has no doctor of its own: skipped
there.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.doctor import DEADLINE_S, TIMEOUT, doctor, line
from lmcache_device_kit.harness.servers import (
    CHUNK,
    LMCacheServer,
    free_port,
    running_server,
)


class BaseDoctorLiveTests(ConformanceTests):
    """``doctor --server`` against real servers, absent ones and the wrong mode."""

    requires = frozenset({"wheel"})
    starts_servers = True

    @pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
    def test_doctor_round_trips_through_a_live_server_and_names_the_sub_path(
        self,
        server: LMCacheServer,
    ) -> None:
        """--server stores, finds and retrieves identical bytes, and says which transfer
        path ran."""
        status, out, _ = doctor(
            "--server",
            server.url,
            "--mode",
            "engine_driven",
            "--tokens",
            str(2 * CHUNK),
        )
        assert status == 0, out + server.log_tail()
        report = line(out, f"server {server.url}")
        # KV bytes in the messages: pickled up to lmcache 0.5.6, inline from 0.5.7
        messages = ("engine-driven pickle:", "engine-driven inline:")
        assert report.startswith("✓") and "identical" in report, report
        assert any(sub_path in report for sub_path in messages), report

    def test_doctor_reports_an_absent_server_within_the_deadline(self) -> None:
        """Nothing listens at the URL: ✗ within 30 s, and the fix asks whether a server
        is listening."""
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
        self,
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
        self,
        server: LMCacheServer,
    ) -> None:
        """--mode lmcache_driven against a server that runs this plugin: ✓ with the
        lmcache-driven path named."""
        status, out, _ = doctor(
            "--server",
            server.url,
            "--mode",
            "lmcache_driven",
            "--tokens",
            str(2 * CHUNK),
        )
        assert status == 0, out + server.log_tail()
        report = line(out, f"server {server.url}")
        assert (
            report.startswith("✓")
            and "lmcache-driven" in report
            and "identical" in report
        )
