# SPDX-License-Identifier: Apache-2.0
"""The guide's debugging checklist, run for you: the doctor's command line.

Run ``lmcache-device-doctor [--backend NAME]`` (the kit's command, for any
installed plugin made from the template; without ``--backend``, the only one
installed), or the plugin's own ``lmcache-<device>-doctor`` (``python -m
<package>.doctor``), whose ``doctor.py`` calls ``main(package=...)``.

It prints one line per check, ``✓`` or ``✗``, and for every ``✗`` the fix. With
``--server tcp://HOST:PORT`` it also stores, looks up and retrieves a small KV
cache through that running ``lmcache server`` and compares the bytes (``live``).
``--api`` checks, instead, every LMCache name, base-class member and call the
plugin depends on against the installed lmcache, supported or not (``api``). Slow
paths (host memory not pinned, native ops not bound, a round trip on another
sub-path than asked, ``--expect-shm`` for SHM) fail too (``paths``). ``--json``
prints the same results for machines. ``--port`` prints, instead, the porting
ladder: every ``TODO(vendor)`` step, proven, failed or not ported yet (``port``).
Exit status 0 when every check passes, 1 otherwise, 2 when there is no plugin to
examine.

Why a module of its own: it must ``import lmcache`` before it imports anything of
the plugin (LMCache skips a plugin that was imported before it), and it keeps
LMCache's log lines out of the report (``--verbose`` shows them). At module level
it imports the standard library and the doctor's modules, which import neither
LMCache nor the plugin there.
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import asdict
from typing import Any
import argparse
import contextlib
import io
import json
import os
import sys

# Local
from .. import backend as kit_backend
from .api import check_api
from .checks import (
    check_import_lmcache,
    check_lmcache_version,
    check_ops,
    check_runtime_calls,
    check_selection,
    check_torch_device,
    check_transfer_modes,
)
from .discovery import check_entry_point, check_registered
from .paths import check_pinning, pins_host_memory
from .plugin import NoPlugin, select
from .port import climb
from .report import Report
from .runtime_detect import check_vendor_runtime


def run(
    server: str | None,
    mode: str,
    tokens: int,
    timeout: float,
    log: io.StringIO,
    api: bool = False,
    expect_shm: bool = False,
    port: bool = False,
) -> Report:
    report = Report()
    try:
        if api:
            check_api(report)
        elif port:
            report = climb(run_checks(report, None, mode, 0, 0.0, log), report)
        else:
            run_checks(report, server, mode, tokens, timeout, log, expect_shm)
    except Exception as exc:  # noqa: BLE001 - a doctor that crashes helps nobody
        report.add(
            "doctor",
            False,
            f"a check crashed: {type(exc).__name__}: {exc}",
            "rerun with --verbose, report it",
        )
    return report


def run_checks(
    report: Report,
    server: str | None,
    mode: str,
    tokens: int,
    timeout: float,
    log: io.StringIO,
    expect_shm: bool = False,
) -> Any:
    """The checklist; the plugin's spec, once LMCache selected it (else None)."""
    if not check_import_lmcache(report):
        return None
    compat = check_lmcache_version(report)
    device_ok = check_torch_device(report)
    device_ok = check_vendor_runtime(report) and device_ok
    entry_ok = check_entry_point(report)
    spec = (
        check_registered(report, log, compat)
        if entry_ok and compat is not None
        else None
    )
    if spec is None or not device_ok or not check_selection(report, spec, compat):
        return None
    check_ops(report, spec, compat)
    if pins_host_memory():
        check_pinning(report, spec)
    check_transfer_modes(report, spec, compat)
    check_runtime_calls(report, spec)
    if server:
        # Local
        from .live import check_server
        from .paths import expected_path

        expected = expected_path(mode, spec, expect_shm)
        check_server(report, server, mode, tokens, timeout, log, expected)
    return spec


def argument_parser(prog: str, choose_backend: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check that LMCache finds, selects and drives a device "
        "plugin's backend.",
    )
    if choose_backend:
        parser.add_argument(
            "--backend",
            metavar="NAME",
            help="the plugin backend to examine (default: the only one installed)",
        )
    parser.add_argument(
        "--server",
        metavar="tcp://HOST:PORT",
        help="also store, look up and retrieve through it",
    )
    parser.add_argument(
        "--mode", default="auto", choices=["auto", "engine_driven", "lmcache_driven"]
    )
    parser.add_argument(
        "--tokens",
        type=int,
        default=256,
        help="tokens to store: a multiple of the chunk size",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds LMCache may wait for one server reply",
    )
    parser.add_argument(
        "--api",
        action="store_true",
        help="check what the plugin takes from LMCache against the installed lmcache",
    )
    parser.add_argument(
        "--expect-shm",
        action="store_true",
        help="the server has an SHM pool: a worker served by pickle fails",
    )
    parser.add_argument(
        "--port",
        action="store_true",
        help="the porting ladder: each TODO(vendor) step, proven, failed or not "
        "ported yet",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print LMCache's own log lines afterwards",
    )
    return parser


def main(
    argv: list[str] | None = None,
    package: str | None = None,
    prog: str = "lmcache-device-doctor",
) -> int:
    """Examine the plugin in ``package`` (None: the one ``--backend`` names, or the
    only one installed), print the report, and exit with its status."""
    parser = argument_parser(prog, choose_backend=package is None)
    args = parser.parse_args(argv)
    try:
        kit_backend.use(package or select(args.backend))
    except (NoPlugin, kit_backend.BackendNotConfigured) as exc:
        parser.error(str(exc))

    log = io.StringIO()
    # LMCache's handlers bind the stream they find at creation
    with contextlib.redirect_stderr(log):
        report = run(
            args.server,
            args.mode,
            args.tokens,
            args.timeout,
            log,
            args.api,
            args.expect_shm,
            args.port,
        )
    if args.json:
        print(
            json.dumps(
                {"ok": report.ok, "checks": [asdict(c) for c in report.checks]},
                indent=2,
            )
        )
    else:
        print("\n".join(check.render() for check in report.checks))
        print(verdict(report, args.port))
    if args.verbose:
        sys.stderr.write(log.getvalue())
    sys.stdout.flush()
    # A live check against a silent server may leave LMCache's threads and sockets
    # waiting; the report is out, so leave without joining them.
    os._exit(0 if report.ok else 1)


def verdict(report: Report, port: bool) -> str:
    """The report's last line."""
    if not port:
        verdict = "all checks passed" if report.ok else "some checks failed"
        return f"{verdict} ({len(report.checks)} checks)"
    proven = sum(check.ok for check in report.checks)
    pending = sum(check.pending for check in report.checks)
    failed = len(report.checks) - proven - pending
    return (
        f"porting ladder: {proven} of {len(report.checks)} steps proven on this "
        f"device, {pending} not ported yet, {failed} failed"
    )
