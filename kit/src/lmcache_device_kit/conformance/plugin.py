# SPDX-License-Identifier: Apache-2.0
"""The pytest side of the conformance suite: markers, schedule, capability gates,
fixtures.

Why it exists: every project runs the kit's conformance classes the same way; its
``tests/conftest.py`` chooses the backend (``lmcache_device_kit.backend.use``), sets
the environment LMCache reads at ``import lmcache``, then star-imports this module
(hooks and fixtures are found by name in a conftest; a ``pytest_plugins`` entry would
not be allowed in LMCache's tree, where an in-tree backend's conftest is not
top-level).

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from importlib import metadata
from importlib.util import find_spec
import functools
import os

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import missing_reason
from lmcache_device_kit.conformance.fixtures import (
    emulator,
    lmcache_driven,
    native,
    offers_lmcache_driven,
    param,
    pytest_runtest_logreport,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_terminal_summary,
    record_transfer_times,
    runtime,
    server,
    servers,
    spec,
)

__all__ = [
    "MARKERS",
    "backend_capabilities",
    "emulator",
    "lmcache_driven",
    "native",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_logreport",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_terminal_summary",
    "record_transfer_times",
    "runtime",
    "server",
    "servers",
    "spec",
]

#: The markers the suite uses, with what they mean.
MARKERS = (
    "without_device: runs on hosts without the backend's device",
    "xdist_group(name): pytest-xdist runs a group's tests on one worker",
    "own_server: starts (and breaks) a server of its own; scheduled first",
    "servers: starts lmcache server processes (a class with starts_servers)",
    "e2e: drives a real `lmcache server` on 127.0.0.1",
    "cluster: two lmcache servers sharing one L2 (conformance/cluster.py); a "
    "project's default run deselects it, pytest -m cluster runs it",
    "host_memory_mapping: depends on how the device maps pinned host memory for its "
    "kernels; TestHostMemory runs it again in the other mapping",
    "publishes: publishes completions, events or callbacks after a stream's work; the "
    "template's CI runs it again under each host-function model (runtime.py)",
)


@functools.cache
def backend_capabilities() -> frozenset[str]:
    """The capabilities (``base.CAPABILITIES``) the backend under test has, here."""
    backend = kit_backend.current()
    found = set()
    if backend.device_present():
        found.add("device")
        if getattr(backend.torch_module(), "is_emulator", False):
            found.add("emulator")
    if find_spec(f"{backend.package}.native_ops") is not None and native_switched_on():
        found.add("native_ops")
    # an in-tree backend lives in LMCache's package; a plugin in a wheel of its own
    found.add("in_tree" if backend.in_tree else "wheel")
    # a backend that extends a built-in runs the built-in's ops and parts
    found.add("extends_builtin" if backend.extends else "own_ops")
    if "device" in found:
        # First Party
        from lmcache.v1.platform import get_device_spec

        found_spec = get_device_spec(backend.device_type)
        if found_spec is not None and offers_lmcache_driven(found_spec):
            found.add("lmcache_driven")
    return frozenset(found)


def native_switched_on() -> bool:
    """Whether the ops bind the native module: their switch (``NATIVE_ENV_VAR`` of the
    package's ``device_ops``, when it has one) is not ``0``."""
    # Standard
    import importlib

    ops = importlib.import_module(f"{kit_backend.current().package}.device_ops")
    switch = getattr(ops, "NATIVE_ENV_VAR", "")
    return not switch or os.environ.get(switch) != "0"


def pytest_report_header() -> list[str]:
    """Say which backend and LMCache are under test, and from where."""
    backend = kit_backend.current()
    spec_ = find_spec(backend.package)
    origin = spec_.origin if spec_ else "NOT INSTALLED"
    if backend.in_tree:
        plugin = f"{backend.package} (in-tree) from {origin}"
    else:
        dists = kit_backend.distributions_of(backend.package)
        version = metadata.version(dists[0]) if dists else "(not installed)"
        plugin = f"{backend.package} {version} from {origin}"
    emulator = (
        f"{backend.emulator_env_var}={os.environ.get(backend.emulator_env_var)} "
        if backend.emulator_env_var
        else ""
    )
    return [
        plugin,
        f"lmcache {metadata.version('lmcache')}, torch {metadata.version('torch')}, "
        f"lmcache-device-kit {metadata.version('lmcache-device-kit')}",
        f"{emulator}LMCACHE_DEVICE_BACKEND={os.environ.get('LMCACHE_DEVICE_BACKEND')}",
    ]


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


def _schedule_key(item: pytest.Item) -> tuple[bool, str, str, str, int]:
    """Own servers first, then by shared server, module, class and TP size."""
    return (
        item.get_closest_marker("own_server") is None,
        str(param(item, "server") or ""),
        item.path.name,
        getattr(getattr(item, "cls", None), "__name__", ""),
        int(param(item, "world_size") or 0),  # type: ignore[call-overload]
    )


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Tests on one shared server run on one xdist worker (``--dist loadgroup``), so it
    starts once; tests with a server of their own, the longest, are handed out first;
    after pytest's own reordering, each (server, module, class, TP size) runs
    contiguously, so module-scoped worker ranks start once per combination. A class
    whose ``requires`` the backend lacks is skipped whole, before any fixture starts;
    without a device, so is every test not marked ``without_device``."""
    # before the other hooks: pytest-xdist reads the groups
    for item in items:
        if kind := param(item, "server"):
            item.add_marker(pytest.mark.xdist_group(kind))
        if getattr(getattr(item, "cls", None), "starts_servers", False):
            item.add_marker(pytest.mark.servers)
    result = yield
    items.sort(key=_schedule_key)
    have = backend_capabilities()
    backend = kit_backend.current()
    selected = backend.emulator_env_var and os.environ.get(backend.emulator_env_var)
    if selected == "1" and "device" not in have:
        # else every test would skip, and a broken emulator would pass the suite
        raise pytest.UsageError(
            f"{backend.emulator_env_var}=1 but torch.{backend.torch_module_name} "
            "is not loaded: install the emulator (pip install ./emulator) or set "
            f"{backend.emulator_env_var}=0 on a {backend.device_type} host"
        )
    for item in items:
        needs = set(getattr(getattr(item, "cls", None), "requires", ()))
        if item.get_closest_marker("without_device") is None:
            needs.add("device")
        if missing := needs - have:
            item.add_marker(pytest.mark.skip(reason=missing_reason(missing)))
    return result
