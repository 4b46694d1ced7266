# SPDX-License-Identifier: Apache-2.0
"""Progress a person can follow: each long step says what it is and how far along the session is,
and every session ends with its timing table (also when a step fails).

The table gives each step's wall time, the CPU time its processes used (this process and every
descendant it has waited for: servers, workers and compilers included) and the share of the
cores' time in that step nobody computed: waits, not work."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import nox


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    cpu: float = 0.0
    result: str = ""

    def idle(self) -> float:
        """The share of the cores' time in this step that no process of it used."""
        return max(0.0, 1 - self.cpu / (self.seconds * CORES)) if self.seconds else 0.0

    def idle_text(self) -> str:
        return f"{self.idle():.0%}" if self.seconds >= 1 else ""


#: The cores this machine gives the session (what "idle" is a share of).
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_seconds() -> float:
    """CPU time (user and system) of this process and of every descendant it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class Timings:
    """Wall and CPU time per step of one session."""

    def __init__(self, session: nox.Session, title: str) -> None:
        self.session, self.title = session, title
        self.started = time.monotonic()
        self.cpu_started = cpu_seconds()
        self.steps: list[Step] = []

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"{seconds // 60}m{seconds % 60:02d}s"

    @contextmanager
    def step(self, name: str) -> Iterator[Step]:
        """Announce ``name``, time it, and keep it (with the result the caller sets) for the table."""
        self.session.log(f"[{self.elapsed()}] {name}")
        step = Step(name)
        begun, cpu_begun = time.monotonic(), cpu_seconds()
        try:
            yield step
        except BaseException:
            step.result = step.result or "FAILED"
            raise
        finally:
            step.seconds, step.cpu = time.monotonic() - begun, cpu_seconds() - cpu_begun
            self.steps.append(step)

    def table(self) -> None:
        total = Step("total", time.monotonic() - self.started, cpu_seconds() - self.cpu_started)
        width = max([len(s.name) for s in self.steps] + [5])
        lines = [f"{'step':<{width}}  {'wall s':>6}  {'CPU s':>6}  {'idle':>4}  result",
                 f"{'-' * width}  {'-' * 6}  {'-' * 6}  {'-' * 4}  ------"]  # fmt: skip
        lines += [f"{s.name:<{width}}  {s.seconds:6.1f}  {s.cpu:6.1f}  {s.idle_text():>4}  {s.result}"
                  for s in [*self.steps, total]]  # fmt: skip
        self.session.log(f"{self.title} timings ({CORES} cores; idle: the share of their time no process used):\n"
                         + "\n".join(lines))  # fmt: skip


@contextmanager
def timed(session: nox.Session, title: str) -> Iterator[Timings]:
    """A session's Timings, whose table is printed when the session ends, passed or failed."""
    timings = Timings(session, title)
    try:
        yield timings
    finally:
        timings.table()
