# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The doctor's slow-path checks: transfers that work, on a slower path than asked.

Each case runs the installed command in a fresh interpreter, as ``test_doctor.py``
does (its helpers run it here too).
"""

# Future
from __future__ import annotations

# Third Party
from lmcache_device_kit.harness.servers import LMCacheServer
from test_doctor import doctor, line
import pytest


@pytest.mark.parametrize("server", ["engine-pickle"], indirect=True)
def test_doctor_fails_a_worker_served_by_pickle_when_shm_is_expected(  # type: ignore[no-untyped-def]
    server: LMCacheServer, runtime
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
def test_doctor_passes_a_worker_served_by_shm_when_shm_is_expected(  # type: ignore[no-untyped-def]
    server: LMCacheServer, runtime
) -> None:
    """--expect-shm against a server with an SHM pool: ✓, the SHM sub-path, no slow
    path."""
    status, out, _ = doctor(
        "--server", server.url, "--mode", "engine_driven", "--expect-shm"
    )
    assert status == 0, out + server.log_tail()
    assert "engine-driven SHM" in line(out, f"server {server.url}")
{%- if cookiecutter.lmcache_driven != 'no' %}


def test_doctor_tells_pinned_host_memory_from_pageable(runtime) -> None:  # type: ignore[no-untyped-def]
    """The pin backend pins, and the ops can tell pinned buffers from pageable ones."""
    status, out, _ = doctor()
    assert status == 0, out
    assert line(out, "pinned memory").startswith("✓")
{%- endif %}
