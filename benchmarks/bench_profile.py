# SPDX-License-Identifier: Apache-2.0
"""Where the time goes, for a missed target of ``nox -s bench``: py-spy profiles.

An end-to-end target is re-run for its cell alone (native foo, its transfer
mode), with py-spy sampling the server and every worker rank, native frames
included. py-spy samples Python threads only: the emulator's stream threads,
which run the kernels, show as the ranks waiting on ``Event.synchronize``
(and in a stack only where a kernel touched Python). An op-level target
re-runs the op benchmark under py-spy. Each profile is kept as collapsed
stacks (``<out>/profiles/*.txt``, for flamegraph tools) and summarized as the
frames holding the most samples, printed with the figures.
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import bench_e2e
from bench_plan import BASE, MODES, SETUPS, SWEEPS, cell_id

PY_SPY = str(Path(sys.executable).with_name("py-spy"))


@contextmanager
def sampling(pids: dict[str, int], out: Path, tag: str):  # type: ignore[no-untyped-def]
    """py-spy record on each process until the block ends; collapsed stacks to files."""
    recorders = {}
    for role, pid in pids.items():
        path = out / f"{tag}-{role}.txt"
        argv = [PY_SPY, "record", "--pid", str(pid), "--format", "raw", "--output", str(path), "--native",
                "--threads", "--idle", "--rate", "200"]  # fmt: skip
        recorders[path] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield list(recorders)
    finally:
        for process in recorders.values():
            process.send_signal(signal.SIGINT)
        for process in recorders.values():
            process.wait(timeout=60)


#: Frames of threads waiting for work (poll loops, idle pools, a rank reading its next
#: command): their samples say nothing about a transfer.
IDLE = ("PeriodicThread._run_loop", "ClientPollingLoop._main_loop", "_queue_SimpleQueue_get",
        "condition_variable", "pthread_cond_wait", "pthread_cond_timedwait", "Poller.poll", "zmq_poll", "epoll_wait",
        "eviction_loop", "_prefetch_loop", "_store_loop", "select (selectors.py", "serve_forever",
        "Queue.get (queue.py", "EventBus._run")  # fmt: skip
#: Frames that only wait on behalf of their caller: a sample is charged to the caller.
WAITING = ("threading.py:", "selectors.py:", "futures/_base.py:")


def where(stack: str) -> str | None:
    """The frame a sample is charged to: the deepest Python frame, else (native threads
    such as the emulator's stream workers) the deepest named native one; None if idle."""
    frames = stack.split(";")
    if any(marker in stack for marker in IDLE):
        return None
    python = [f for f in frames if ".py:" in f and not any(w in f for w in WAITING)]
    if python:
        leaf = python[-1]
        # The benchmark's own frames (a rank waiting for its requests' completions,
        # comparing bytes, reporting) are not the transfer's.
        return None if "(bench_worker.py:" in leaf or leaf.startswith("<module>") else leaf
    named = [f for f in frames[1:] if not f.startswith("0x")]
    return named[-1] if named else None


def top_frames(path: Path, count: int = 8) -> list[str]:
    """The frames holding the most busy samples, as shares of all busy samples."""
    own: collections.Counter[str] = collections.Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, samples = line.rpartition(" ")
        frame = where(stack) if samples.isdigit() else None
        if frame:
            own[frame] += int(samples)
    total = sum(own.values())
    return [f"{n / total:5.1%} {frame}" for frame, n in own.most_common(count)] if total else ["(no busy samples)"]


def profile(args, missed: list[dict], child_env, progress) -> list[str]:  # type: ignore[no-untyped-def]
    out = args.out / "profiles"
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    jobs = set()
    for row in missed:
        mode = next((m for m in MODES if row["name"].startswith(m)), None)
        if mode is None:
            jobs.add(("op level", ""))
        else:
            chunks = max(SWEEPS["chunks"]) if f"{max(SWEEPS['chunks'])} chunks" in row["name"] else BASE["chunks"]
            jobs.add((mode, cell_id({**BASE, "chunks": chunks})))
    for mode, cell in sorted(jobs):
        progress(f"profiling native foo / {mode} {cell}")
        tag = re.sub(r"[^a-z0-9]+", "-", f"{mode} {cell}".lower()).strip("-")
        if mode == "op level":
            path = out / f"{tag}.txt"
            argv = [PY_SPY, "record", "--format", "raw", "--output", str(path), "--native", "--threads", "--",
                    sys.executable, str(Path(__file__).with_name("bench_ops.py")), "400", args.package, "foo"]  # fmt: skip
            subprocess.run(argv, env=child_env(SETUPS["native foo"][0]), capture_output=True, timeout=600)
            paths = [path]
        else:
            chosen = {**BASE, "chunks": int(cell.split()[0])}
            paths = bench_e2e.run_mode(args.package, ["native foo"], mode, [chosen], args.out / "logs",
                                       child_env, progress, profile=lambda pids, tag=tag: sampling(pids, out, tag))[3]  # fmt: skip
        for path in paths:
            if path.exists():
                print(f"\n  where the time goes: {path}")
                print("\n".join(f"    {line}" for line in top_frames(path)))
                written.append(str(path))
    return written
