# SPDX-License-Identifier: Apache-2.0
"""Progress a person can follow: each long step says what it is and how far along the session is,
and every session ends with its timing table (also when a step fails)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import nox


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    result: str = ""


class Timings:
    """Wall time per step of one session."""

    def __init__(self, session: nox.Session, title: str) -> None:
        self.session, self.title = session, title
        self.started = time.monotonic()
        self.steps: list[Step] = []

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Announce ``name``, time it, and keep it (with the result the caller sets) for the table."""
        self.session.log(f"[{self.elapsed()}] {name}")
        step = Step(name)
        begun = time.monotonic()
        try:
            yield step
        except BaseException:
            step.result = step.result or "FAILED"
            raise
        finally:
            step.seconds = time.monotonic() - begun
            self.steps.append(step)

    def table(self) -> None:
        width = max([len(s.name) for s in self.steps] + [4])
        lines = [f"{'step':<{width}}  {'s':>6}  result", f"{'-' * width}  {'-' * 6}  ------"]
        lines += [f"{s.name:<{width}}  {s.seconds:6.1f}  {s.result}" for s in self.steps]
        lines.append(f"{'total':<{width}}  {time.monotonic() - self.started:6.1f}")
        self.session.log(f"{self.title} timings:\n" + "\n".join(lines))


@contextmanager
def timed(session: nox.Session, title: str) -> Iterator[Timings]:
    """A session's Timings, whose table is printed when the session ends, passed or failed."""
    timings = Timings(session, title)
    try:
        yield timings
    finally:
        timings.table()
