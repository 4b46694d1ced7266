# SPDX-License-Identifier: Apache-2.0
"""The doctor's report: one line per check, the fix under a ✗, one status."""

# Future
from __future__ import annotations

# First Party
from lmcache_device_kit.doctor.report import Report


def test_a_failed_check_prints_its_fix_and_fails_the_report() -> None:
    report = Report()
    assert report.add("entry point", True, "found", "never shown")
    assert not report.add("selection", False, "LMCache uses\n  'cpu'", "export X=foo")
    lines = [check.render() for check in report.checks]
    assert lines == [
        "✓ entry point: found",
        "✗ selection: LMCache uses 'cpu'\n    fix: export X=foo",
    ]
    assert not report.ok


def test_a_long_message_is_folded_into_one_line_of_bounded_width() -> None:
    report = Report()
    report.add("import lmcache", False, "word " * 200)
    (line,) = report.checks[0].render().splitlines()
    assert len(line) <= 400 + len("✗ import lmcache: ") and line.endswith("…")
