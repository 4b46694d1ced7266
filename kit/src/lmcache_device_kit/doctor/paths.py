# SPDX-License-Identifier: Apache-2.0
"""The doctor's slow-path checks: transfers that work, but on a slower path.

Why a module of its own: each of these passes every functional check and costs
a deployment many times its transfer time: host buffers that are not pinned
although the device pins, native ops built but not bound (``checks.check_ops``),
a transfer that took another sub-path than the one asked for (pickle instead of
SHM, engine-driven instead of LMCache-driven), an op that fell back to the
baseline. Imported by ``cli`` and ``live``; imports the kit's ``backend`` and
``report`` at module level, LMCache and the plugin's modules (``_lmcache_compat``,
its binding to the shims, with the slow-path counts; ``pin_memory``) inside the
functions, after ``import lmcache``.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import importlib
import importlib.util
import os

# Local
from ..backend import current
from .report import Report


def plugin_module(name: str) -> Any:
    """The plugin's module ``name`` (``_lmcache_compat``, ``pin_memory``, ...)."""
    return importlib.import_module(f"{current().package}.{name}")


def expected_path(mode: str, spec: Any, expect_shm: bool) -> str:
    """The transfer path a worker in ``mode`` must take: ``lmcache-driven``,
    ``engine-driven SHM`` or ``engine-driven`` (SHM or pickle)."""
    if mode == "auto":
        mode = plugin_module("_lmcache_compat").auto_transfer_mode(spec)
    if mode == "lmcache_driven":
        return "lmcache-driven"
    return "engine-driven SHM" if expect_shm else "engine-driven"


def path_problem(path: str, expected: str) -> tuple[str, str]:
    """(what is wrong, the fix) when a round trip took ``path`` instead of
    ``expected``; empty when it did not."""
    if path.startswith(expected):
        return "", ""
    if expected == "engine-driven SHM":
        return (
            f"took {path}, not SHM: KV bytes travelled in the messages",
            "give the server an SHM pool it can serve: --shm-name NAME with "
            "--no-l1-use-lazy (a lazy L1 serves SHM workers by pickle, silently)",
        )
    return (
        f"took {path}, not {expected}",
        "start the server with --supported-transfer-mode auto or the mode asked for",
    )


def slow_path_problem(path: str) -> str:
    """The slow paths this process's ops reported during the round trip, if any.

    A pageable copy is what KV bytes in the messages ask for (pickled, or inline
    from lmcache 0.5.7: the chunks are not pinned), so it counts only on the other
    paths.
    """
    kinds = [
        kind
        for kind, count in plugin_module("_lmcache_compat").slow_paths.items()
        if count
        and not (path.endswith(("pickle", "inline")) and kind == "pageable host memory")
    ]
    return ", ".join(kinds)


def pins_host_memory() -> bool:
    """Whether the plugin has LMCache-driven transfer's pin module (``pin_memory``):
    only then does it pin host memory for LMCache."""
    return importlib.util.find_spec(f"{current().package}.pin_memory") is not None


def host_page_size() -> int:
    """This host's page size, as the OS reports it: 4 KiB on most x86_64 hosts,
    64 KiB on many aarch64 ones (NPU hosts among them)."""
    return os.sysconf("SC_PAGE_SIZE")


def check_pinning(report: Report, spec: Any) -> bool:
    """Host memory pinned through the spec's pin backend reads as pinned, and
    pageable memory does not: the ops can tell LMCache's slow copies apart.

    A pin backend that does not pin reads "not ported yet" unless its module
    declares ``PINS_HOST_MEMORY = False``: not pinning is the sample's answer on any
    runtime but the emulator, and only the vendor knows whether it is theirs."""
    # Third Party
    import torch

    pin_module = plugin_module("pin_memory")
    declared = getattr(pin_module, "PINS_HOST_MEMORY", None)
    backend = spec.pin_memory_backend()
    if not backend.is_pin_supported:
        if declared is False:
            return report.add(
                "pinned memory",
                True,
                "this device does not pin host memory (PINS_HOST_MEMORY = False): "
                "LMCache copies from pageable buffers (its L1 is not lazy)",
            )
        return report.pending(
            "pinned memory",
            "the pin backend does not pin (is_pin_supported is False), the sample's "
            "answer on a runtime without the emulator's host_register",
            "port pin_memory.py to your runtime's host registration, or declare "
            "PINS_HOST_MEMORY = False there if it has none",
        )
    if declared is False:
        return report.add(
            "pinned memory",
            False,
            "PINS_HOST_MEMORY is False, but the pin backend pins",
            "declare PINS_HOST_MEMORY = True (or None) in pin_memory.py",
        )
    size, page = 1 << 20, host_page_size()
    buffers = [torch.empty(size + page, dtype=torch.uint8) for _ in range(2)]
    pinned, pageable = (b.data_ptr() + (-b.data_ptr()) % page for b in buffers)
    if not backend.pin_memory(pinned, size):
        return report.add(
            "pinned memory",
            False,
            "the pin backend refused a 1 MiB page-aligned range: LMCache keeps its "
            "host buffers pageable, and every copy is slow",
            "fix pin_memory() in pin_memory.py (your runtime's host registration)",
        )
    try:
        answers = tuple(
            pin_module.host_range_is_pinned(b, size) for b in (pinned, pageable)
        )
    finally:
        backend.unpin_memory(pinned)
    if answers != (True, False):
        return report.add(
            "pinned memory",
            False,
            f"host_range_is_pinned says {answers[0]} for pinned memory and "
            f"{answers[1]} for pageable memory: slow copies would go unnoticed",
            "implement host_range_is_pinned() in pin_memory.py with your runtime's "
            "pointer query",
        )
    return report.add(
        "pinned memory", True, "pinning works, and pinned memory is told from pageable"
    )
