# SPDX-License-Identifier: Apache-2.0
"""The doctor's report: one line per check, ✓ or ✗ (or ○ not ported yet), and the
fix for a ✗.

Why a module of its own: the checks (``checks``, ``discovery``, ``paths``,
``api``), the live round trip (``live``) and the command line (``cli``) all add
to and print the same report, so it sits below all of them. It imports only the
standard library: never LMCache, the plugin, or another module of the doctor
(they import it, never the other way round).
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass


@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    #: Not ported yet: the plugin still gives the sample's answer here.
    pending: bool = False

    def render(self) -> str:
        if self.pending:
            line = f"○ {self.name}: not ported yet: {_one_line(self.detail)}"
            return f"{line}\n    todo: {self.fix}" if self.fix else line
        line = f"{'✓' if self.ok else '✗'} {self.name}: {_one_line(self.detail)}"
        return line if self.ok or not self.fix else f"{line}\n    fix: {self.fix}"


class Report:
    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(self, name: str, ok: bool, detail: str, fix: str = "") -> bool:
        self.checks.append(Check(name, ok, detail, fix))
        return ok

    def pending(self, name: str, detail: str, fix: str) -> bool:
        """A check the plugin has not been ported for yet: not ✓, and not ok."""
        self.checks.append(Check(name, False, detail, fix, pending=True))
        return False

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def _one_line(text: str, limit: int = 400) -> str:
    """Multi-line messages (LMCache's include advice) folded into one report line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
