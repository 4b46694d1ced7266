# SPDX-License-Identifier: Apache-2.0
"""The conformance suite's fixtures: the spec, the capability fixtures, the shared
servers, the E2E transfer times (``plugin.py`` re-exports them to a conftest).

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import missing_reason


@pytest.fixture(scope="session")
def spec() -> Any:
    """The DeviceSpec LMCache registered for this backend (in this process's
    registry)."""
    # First Party
    from lmcache.v1.platform import get_device_spec

    backend = kit_backend.current()
    found = get_device_spec(backend.device_type)
    assert found is not None and found.backend_name == backend.backend_name
    return found


def offers_lmcache_driven(spec: Any) -> bool:
    """Whether ``spec`` offers LMCache-driven transfer, with an IPC wrapper to hand
    over."""
    return bool(spec.is_lmcache_driven_available() and spec.ipc_wrapper_cls is not None)


@pytest.fixture
def lmcache_driven(spec: Any) -> Any:
    """The spec, for a test that needs LMCache-driven transfer; skips where the spec
    does not offer it (a class of such tests says ``requires``)."""
    if not offers_lmcache_driven(spec):
        pytest.skip(missing_reason({"lmcache_driven"}))
    return spec


@pytest.fixture(scope="module")
def native() -> Any:
    """The package's native ops module; skips the test where it ships none."""
    # Standard
    import importlib

    package = kit_backend.current().package
    if find_spec(f"{package}.native_ops") is None:
        pytest.skip(missing_reason({"native_ops"}))
    return importlib.import_module(f"{package}.native_ops")


@pytest.fixture
def runtime() -> Any:
    """``torch.<device>``; skips the test where it is not loaded."""
    # First Party
    from lmcache_device_kit.conformance.support import device_runtime

    module = device_runtime()
    if module is None:
        pytest.skip(missing_reason({"device"}))
    return module


@pytest.fixture
def emulator(runtime: Any) -> Any:
    """The runtime when it is the CPU emulator (injected faults, mapping counts);
    skips the test otherwise."""
    if not getattr(runtime, "is_emulator", False):
        pytest.skip(missing_reason({"emulator"}))
    return runtime


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The servers this run shares, one per kind, started on first use (see
    the kit's ``harness/servers.py``)."""
    # First Party
    from lmcache_device_kit.harness.servers import SharedServers

    pool = SharedServers(tmp_path_factory.mktemp("servers"))
    yield pool
    pool.stop_all()


def param(item: Any, name: str) -> object:
    """The value of a test's parameter ``name`` (None if it has none)."""
    return item.callspec.params.get(name) if hasattr(item, "callspec") else None


#: The test pytest runs after the one being torn down (None after the last).
_NEXT_TEST: list = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # First Party
    from lmcache_device_kit.harness import servers as harness_servers

    harness_servers.OWN_SERVER_MARKED = (
        item.get_closest_marker("own_server") is not None
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # before the fixtures are torn down: the ``server`` fixture reads it
    _NEXT_TEST[0] = nextitem


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, servers: Any, spec: Any) -> Iterator[Any]:
    """The shared server of the kind a test names:
    ``@pytest.mark.parametrize("server", [kind], indirect=True)``. Stopped when the
    next test does not use it (pytest-xdist hands a kind's tests to one worker at
    once, and the schedule keeps them together), so it shuts down while the run goes
    on; a later test of its kind would start a new one."""
    # First Party
    from lmcache_device_kit.harness.servers import SERVER_KINDS

    kind = request.param
    if SERVER_KINDS[kind].get("plugin") and not spec.is_lmcache_driven_available():
        pytest.skip(missing_reason({"lmcache_driven"}))
    yield servers.get(kind)
    if param(_NEXT_TEST[0], "server") != kind:
        servers.stop(kind)


@pytest.fixture
def record_transfer_times(record_property: Any) -> Any:
    """Record the E2E workers' store/retrieve times (printed after the run)."""

    def record(label: str, results: list[dict], world_size: int) -> None:
        for result in results:
            record_property(
                "transfer_ms",
                [
                    label,
                    result["phase"],
                    result["rank"],
                    result["elapsed_ms"],
                    world_size,
                ],
            )

    return record


#: (path, phase, rank, ms, world size) per E2E transfer, from every test report (xdist
#: workers' too).
TRANSFER_TIMES: list[tuple[str, str, int, float, int]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        TRANSFER_TIMES.extend(
            tuple(value)  # type: ignore[misc, arg-type]
            for name, value in report.user_properties
            if name == "transfer_ms"
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the store/retrieve times the E2E workers measured, side by side (one run,
    one machine)."""
    if not TRANSFER_TIMES:
        return
    terminalreporter.section("E2E transfer times (worker-side submit to result, ms)")
    for path, phase, rank, ms, world_size in sorted(TRANSFER_TIMES):
        terminalreporter.write_line(
            f"{path:<38} tp{world_size} rank{rank} {phase:<8} {ms:8.1f}"
        )
