# SPDX-License-Identifier: Apache-2.0
"""The zygote of ``spawn.py``: a Python process that has imported ``PRELOAD`` and
forks the suite's programs.

Run as ``python -m lmcache_device_kit.harness.zygote DIRECTORY`` by ``spawn.py``
(never imported). It reads requests (argv, environment, working directory, and
three file descriptors for the child's standard streams, passed with SCM_RIGHTS)
on the Unix socket named after DIRECTORY, answers each with the child's PID and,
once the child has exited, its exit status as ``subprocess`` reports it. It is
single-threaded (forking is safe), exits when the suite closes its stdin and its
children are gone (killing them after 60 s), and never imports lmcache, the
plugin under test or a device extension.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn
import json
import os
import selectors
import shutil
import signal
import socket
import sys
import time

# First Party
from lmcache_device_kit.harness.spawn import PRELOAD, socket_address


def _serve(address: str) -> dict[str, Any] | None:
    """Import ``PRELOAD``, then fork a child per request until the suite's end of our
    stdin and our children are gone. Returns only in a child: its request, with the
    child's streams in place."""
    # Standard
    import gc
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112
            continue  # absent or broken here: the programs import it themselves
    # Out of the collector's sight: otherwise each child's collections, and its
    # shutdown, walk (and so copy-on-write fault in) every preloaded object, about a
    # second of CPU per program.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    for fd in (wake_read, wake_write):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    # Ctrl-C is the suite's to handle: it stops its programs
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    events = selectors.DefaultSelector()
    events.register(listener, selectors.EVENT_READ, "request")
    events.register(wake_read, selectors.EVENT_READ, "exited")
    events.register(0, selectors.EVENT_READ, "suite")
    children: dict[int, socket.socket] = {}
    suite_gone_at: float | None = None
    print("ready", flush=True)
    while suite_gone_at is None or children:
        timeout = (
            None
            if suite_gone_at is None
            else max(0.0, suite_gone_at + 60 - time.monotonic())
        )
        if timeout == 0:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
        for key, _ in events.select(timeout):
            if key.data == "suite" and not os.read(0, 4096):
                events.unregister(0)
                suite_gone_at = time.monotonic()
            elif key.data == "exited":
                while os.read(wake_read, 4096) == 4096:
                    pass
                _reap(children)
            elif key.data == "request":
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                # the child: nothing of the zygote's stays open, the request's
                # streams are 0, 1, 2
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGINT, signal.default_int_handler)
                    events.close()
                    for sock in (listener, conn, *children.values()):
                        sock.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    for target, fd in enumerate(fds):
                        os.dup2(fd, target)
                    for fd in set(fds) - {0, 1, 2}:
                        os.close(fd)
                    return request
                for fd in set(fds):
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                children[pid] = conn
    return None


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(data[:8], "big")
    while len(data) < 8 + size:
        data += conn.recv(1 << 16)
    return json.loads(data[8:]), fds


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each exited child's client its exit status (negative: the signal that ended
    it)."""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass  # the client went away first
            conn.close()


def _autoload_device_backends() -> None:
    """What ``import torch`` does last and the zygote skipped (``NO_AUTOLOAD``): call
    each ``torch.backends`` entry point (a vendor's extension, or the CPU emulator,
    which reads its variables now)."""
    # Standard
    from importlib.metadata import entry_points

    for entry_point in entry_points(group="torch.backends"):
        entry_point.load()()


def _run(request: dict[str, Any], base_path: list[str]) -> None:
    """In the child: become the program ``python <argv>`` would run, and run it."""
    # Standard
    import importlib
    import runpy
    import types

    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = (
        request["argv"][1:] if request["argv"][0] == sys.executable else request["argv"]
    )
    # sys.path[0] as python sets it: "" for -c, the working directory for -m
    if argv[0] in ("-c", "-m"):
        first = "" if argv[0] == "-c" else os.getcwd()
    else:  # a script: its own directory
        first = os.path.dirname(os.path.realpath(argv[0]))
    extra = [
        entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry
    ]
    sys.path[:] = [first, *extra, *base_path]
    importlib.invalidate_caches()
    if (
        "torch" in sys.modules
        and os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") == "1"
    ):
        _autoload_device_backends()
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    sys.argv = ["-c", *argv[2:]] if argv[0] == "-c" else argv
    source, filename = (
        (argv[1], "<string>")
        if argv[0] == "-c"
        else (Path(argv[0]).read_bytes(), argv[0])
    )
    if argv[0] != "-c":
        main.__file__ = argv[0]
    # the program, as python runs it
    exec(compile(source, filename, "exec"), main.__dict__)  # noqa: S102


def _print_uncaught() -> None:
    """The traceback python prints for an uncaught exception: the program's frames, not
    the zygote's."""
    kind, error, trace = sys.exc_info()
    while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
        trace = trace.tb_next
    if error is not None:  # python's printer reads the exception's own traceback
        error.__traceback__ = trace
    sys.excepthook(kind, error, trace)  # type: ignore[arg-type]


def _exit_as_python_does(run: Callable[[], None]) -> NoReturn:
    """Run the program, then end the process as Python's own exit would, up to its last
    step: end and join the threads that are not daemons, run the ``atexit``
    functions (the emulator's leak reports among them), flush the standard streams,
    and exit with the program's status. The last step, tearing down every module and
    object, is left out (``os._exit``, as ``multiprocessing`` ends its forked
    children): in a child of the zygote it touches, and so copies, each preloaded
    page (about 0.35 s of CPU and 40,000 page faults per program)."""
    # Standard
    import atexit
    import threading

    status, interrupted = 0, False
    try:
        run()
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:  # python prints any other exit value and exits with 1
            print(stop.code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        _print_uncaught()
        interrupted = True
    except BaseException:  # noqa: BLE001 (python's own handling of the uncaught)
        _print_uncaught()
        status = 1
    # What python's exit runs first: the functions of threading._register_atexit (an
    # idle ThreadPoolExecutor's workers end there), then a join of the non-daemons.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # closed by the program, or its reader has gone
    if interrupted:  # as python ends on an uncaught Ctrl-C: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    _suite_path = [
        entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry
    ]
    _base_path = [entry for entry in sys.path[1:] if entry not in _suite_path]
    _request = _serve(socket_address(sys.argv[1]))
    # the suite and every child are gone: so is the zygote's directory
    if _request is None:
        shutil.rmtree(sys.argv[1], ignore_errors=True)
    else:
        _served: dict[str, Any] = _request
        _exit_as_python_does(lambda: _run(_served, _base_path))
