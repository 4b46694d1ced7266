# SPDX-License-Identifier: Apache-2.0
"""A plugin's doctor, on its slow-path checks: transfers that work, on a slower path
than asked.

Each case runs the installed command in a fresh interpreter, as ``doctor.py``'s do
(its helpers run it here too). An in-tree backend has no doctor of its own: skipped
there.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.doctor import doctor, line
from lmcache_device_kit.harness.servers import LMCacheServer


class BaseDoctorPathsTests(ConformanceTests):
    """``--expect-shm`` against pickle and SHM servers; pinned host memory."""

    requires = frozenset({"wheel"})
    starts_servers = True

    @pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
    def test_doctor_fails_a_worker_served_by_pickle_when_shm_is_expected(
        self, server: LMCacheServer, runtime: Any
    ) -> None:
        """--expect-shm: identical bytes by pickle are a ✗ (the lazy-L1 trap), with the
        server options that serve SHM."""
        status, out, _ = doctor(
            "--server", server.url, "--mode", "engine_driven", "--expect-shm"
        )
        report = line(out, f"server {server.url}")
        assert status == 1 and report.startswith("✗"), out
        assert "not SHM" in report and "--no-l1-use-lazy" in report

    @pytest.mark.parametrize("server", ["engine-shm"], indirect=True)
    def test_doctor_passes_a_worker_served_by_shm_when_shm_is_expected(
        self, server: LMCacheServer, runtime: Any
    ) -> None:
        """--expect-shm against a server with an SHM pool: ✓, the SHM sub-path, no slow
        path."""
        status, out, _ = doctor(
            "--server", server.url, "--mode", "engine_driven", "--expect-shm"
        )
        assert status == 0, out + server.log_tail()
        assert "engine-driven SHM" in line(out, f"server {server.url}")

    def test_doctor_tells_pinned_host_memory_from_pageable(
        self, runtime: Any, lmcache_driven: Any
    ) -> None:
        """The pin backend pins, and the ops can tell pinned buffers from pageable
        ones (a backend offering LMCache-driven transfer: it has a pin backend)."""
        status, out, _ = doctor()
        assert status == 0, out
        assert line(out, "pinned memory").startswith("✓")
