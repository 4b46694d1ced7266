# SPDX-License-Identifier: Apache-2.0
"""Run groups of nox sessions at once: CI's lanes (``nox -s ci``).

Why: a rendered suite spends much of its wall time waiting (deadlines, server
start-ups, fresh interpreters), and a whole CI run kept two cores about a third
busy (37 min of wall time, 26 min of CPU). Lanes fill those waits. Each lane runs
its sessions one after another in a ``nox`` process of its own, and no two lanes
share an environment (``ReleaseEnv``: one per release, and one more for the
overlay sessions), so nothing one lane installs or patches is seen by another.

Each lane's output goes to a log file; this prints a line as each session ends,
each lane's result and timing lines, and the tail of a failed lane's log.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import nox

#: nox's line for a session that ended.
ENDED = re.compile(r"nox > Session (.+) (was successful|failed|was skipped)")


def run_lanes(session: nox.Session, lanes: list[list[str]], logs: Path) -> None:
    """Run each lane's sessions in order, the lanes at once; fail when any session failed."""
    logs.mkdir(parents=True, exist_ok=True)
    begun = time.monotonic()
    running = []
    for number, sessions in enumerate(lanes, 1):
        log = logs / f"lane-{number}.log"
        session.log(f"lane {number}: {' '.join(sessions)} (log: {log})")
        command = [sys.executable, "-m", "nox", "--no-color", "-s", *sessions]
        with log.open("w") as out:
            running.append((number, log, subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)))
    reported: set[tuple[int, str]] = set()
    while True:
        for number, log, _ in running:
            for name, outcome in ENDED.findall(log.read_text(errors="replace")):
                if (number, name) not in reported:
                    reported.add((number, name))
                    minutes = (time.monotonic() - begun) / 60
                    session.log(f"[{minutes:4.1f} min] lane {number}: {name} {outcome}")
        if all(process.poll() is not None for _, _, process in running):
            break
        time.sleep(5)
    failed = []
    for number, log, process in running:
        text = log.read_text(errors="replace")
        summary = [line for line in text.splitlines() if line.startswith("nox > * ")]
        session.log(f"lane {number} (exit {process.returncode}):\n" + "\n".join(summary))
        if process.returncode:
            failed.append(number)
            session.log(f"lane {number} failed; the end of {log}:\n{text[-6000:]}")
    session.log(f"lanes done in {(time.monotonic() - begun) / 60:.1f} min")
    if failed:
        session.error(f"lane(s) {failed} failed: their logs are in {logs}")
