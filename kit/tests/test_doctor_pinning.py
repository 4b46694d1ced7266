# SPDX-License-Identifier: Apache-2.0
"""The doctor's pinning check: pages as large as the host's, and a pin backend that
does not pin read as "not ported yet" unless its module declares so."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
import importlib
import os

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.doctor.paths import check_pinning
from lmcache_device_kit.doctor.report import Report

#: A pin module whose runtime, as some do, refuses ranges that are not whole pages.
PIN_MEMORY = """
import os

PINS_HOST_MEMORY = __DECLARED__
_pinned = {}


class Backend:
    is_pin_supported = __SUPPORTED__

    def pin_memory(self, ptr, size, flags=0):
        page = os.sysconf("SC_PAGE_SIZE")
        if ptr % page or size % page:
            return False
        _pinned[ptr] = size
        return True

    def unpin_memory(self, ptr):
        return _pinned.pop(ptr, None) is not None


def host_range_is_pinned(ptr, size):
    return any(b <= ptr and ptr + size <= b + n for b, n in _pinned.items())
"""


@pytest.fixture
def pin_check(
    fake_plugin: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Report]:
    """``pin_check(supported, declared)``: the pinning check's report on a plugin
    whose pin backend pins (or not) and whose module declares ``PINS_HOST_MEMORY``."""
    made = iter(range(100))

    def check(supported: bool = True, declared: bool | None = None) -> Report:
        source = PIN_MEMORY.replace("__DECLARED__", repr(declared))
        name = fake_plugin(
            f"kit_test_pins{next(made)}",
            {"pin_memory.py": source.replace("__SUPPORTED__", repr(supported))},
        )
        monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, name)
        kit_backend.current.cache_clear()
        module = importlib.import_module(f"{name}.pin_memory")
        report = Report()
        check_pinning(report, SimpleNamespace(pin_memory_backend=module.Backend))
        return report

    return check


def test_the_pinning_check_uses_the_hosts_page_size_not_4_kib(
    pin_check: Callable[..., Report], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host with 64 KiB pages (many aarch64 NPU hosts), a runtime that pins
    whole pages only still passes: the check asks the OS for the page size. The
    host buffers start 4 KiB past a 64 KiB boundary, so a check that aligned them
    to 4 KiB pages would hand the runtime a range it refuses."""
    page, sysconf, empty = 1 << 16, os.sysconf, torch.empty
    monkeypatch.setattr(
        os, "sysconf", lambda n: page if n == "SC_PAGE_SIZE" else sysconf(n)
    )

    def off_a_large_page(size: int, **kwargs: Any) -> torch.Tensor:
        whole = empty(size + 2 * page, **kwargs)
        start = (-whole.data_ptr()) % page + 4096 + 1
        return whole[start : start + size]

    monkeypatch.setattr(torch, "empty", off_a_large_page)
    (check,) = pin_check().checks
    assert check.ok, check.render()


def test_a_pin_backend_that_does_not_pin_is_not_ported_yet_unless_declared(
    pin_check: Callable[..., Report],
) -> None:
    """Not pinning is the sample's answer on any runtime but the emulator: not a ✓
    until the pin module declares ``PINS_HOST_MEMORY = False``."""
    (undecided,) = pin_check(supported=False).checks
    assert not undecided.ok and undecided.pending
    assert undecided.render().startswith("○ pinned memory: not ported yet:")
    assert "PINS_HOST_MEMORY = False" in undecided.fix
    (declared,) = pin_check(supported=False, declared=False).checks
    assert declared.ok and "does not pin" in declared.detail, declared.render()


def test_a_declaration_of_no_pinning_that_the_backend_contradicts_fails(
    pin_check: Callable[..., Report],
) -> None:
    (check,) = pin_check(supported=True, declared=False).checks
    assert not check.ok and not check.pending and "PINS_HOST_MEMORY" in check.fix
