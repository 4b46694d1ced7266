# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}{% if cookiecutter.emulator == 'yes' -%}
"""Conformance-test setup: opt this process into the emulator and select the backend.

LMCache reads these variables once, at ``import lmcache``, and torch loads the
emulator (installed beside the plugin from
``{{ cookiecutter.__emulator_dir }}/``) at ``import torch``
when ``{{ cookiecutter.__emulator_env_var }}=1``, so they are set here, before any
test module imports either. Values already in the environment win: on real
{{ cookiecutter.device_name }} hardware run
``{{ cookiecutter.__emulator_env_var }}=0 pytest``.
"""
{%- else -%}
"""Conformance-test setup: select the backend when this host has a
{{ cookiecutter.device_name }} device.

LMCache reads these variables once, at ``import lmcache``, so they are set here,
before any test module imports LMCache. Without a device (no
``{{ cookiecutter.torch_extension_module or 'torch.' ~ cookiecutter.__torch_module_name }}``, or no device visible) every test that needs
one is skipped with the reason; the tests marked ``without_device`` still run.
"""
{%- endif %}

# Future
from __future__ import annotations

# Standard
from importlib.util import find_spec
import os
{%- if cookiecutter.emulator == 'yes' %}
import sys
{%- endif %}

DEVICE = "{{ cookiecutter.device_name }}"
PACKAGE = "{{ cookiecutter.__package }}"
TORCH_MODULE = "{{ cookiecutter.__torch_module_name }}"
EMULATOR_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"
{%- if cookiecutter.ownership == 'wheel' %}
DISTRIBUTION = "{{ cookiecutter.project_slug }}"
{%- endif %}

# Third Party
from lmcache_device_kit import backend as kit_backend  # noqa: E402

# The kit's harness serves this backend, here and in every process it starts (it reads
# names.py only: imports neither the plugin nor LMCache).
BACKEND = kit_backend.use(PACKAGE)
{%- if cookiecutter.emulator == 'no' %}
DEVICE_PRESENT = BACKEND.device_present()
if DEVICE_PRESENT:
    os.environ.setdefault("LMCACHE_DEVICE_BACKEND", "{{ cookiecutter.backend_name }}")
{%- else %}

os.environ.setdefault(EMULATOR_ENV_VAR, "1")
os.environ.setdefault("LMCACHE_DEVICE_BACKEND", "{{ cookiecutter.backend_name }}")
if os.environ[EMULATOR_ENV_VAR] == "1":
    if find_spec("{{ cookiecutter.__emulator_package }}") is None:
        raise ImportError(
            f"{EMULATOR_ENV_VAR}=1 but the CPU emulator is not installed: pip install "
            "./{{ cookiecutter.__emulator_dir }} "
            f"(or set {EMULATOR_ENV_VAR}=0 on a {DEVICE} host)"
        )
    # imported before this file set the variable: torch's autoloading has run
    if "torch" in sys.modules:
        # Third Party
        import {{ cookiecutter.__emulator_package }}

        {{ cookiecutter.__emulator_package }}.load()
{%- endif %}

# Imports nothing heavier than the standard library.
# Third Party
from lmcache_device_kit.harness.spawn import QUIET_ENV  # noqa: E402

for _key, _value in QUIET_ENV.items():
    os.environ.setdefault(_key, _value)

# Standard
from importlib import metadata  # noqa: E402


def pytest_report_header() -> list[str]:
    """Say which backend and LMCache are under test, and from where."""
    spec = find_spec(PACKAGE)
    origin = spec.origin if spec else "NOT INSTALLED"
    backend = os.environ.get("LMCACHE_DEVICE_BACKEND")
{%- if cookiecutter.emulator == 'yes' %}
    emulator = os.environ[EMULATOR_ENV_VAR]
{%- endif %}
    return [
{%- if cookiecutter.ownership == 'in_tree' %}
        f"{PACKAGE} (in-tree) from {origin}",
{%- else %}
        f"{PACKAGE} {metadata.version(DISTRIBUTION)} from {origin}",
{%- endif %}
        f"lmcache {metadata.version('lmcache')}, torch {metadata.version('torch')}, "
        f"lmcache-device-kit {metadata.version('lmcache-device-kit')}",
{%- if cookiecutter.emulator == 'yes' %}
        f"{EMULATOR_ENV_VAR}={emulator} LMCACHE_DEVICE_BACKEND={backend}",
{%- else %}
        f"{DEVICE} device present: {DEVICE_PRESENT}; LMCACHE_DEVICE_BACKEND={backend}",
{%- endif %}
    ]


# Third Party
import pytest  # noqa: E402

#: The markers this suite uses, with what they mean.
MARKERS = (
    "without_device: runs on hosts without a {{ cookiecutter.device_name }} device",
    "xdist_group(name): pytest-xdist runs a group's tests on one worker",
    "own_server: starts (and breaks) a server of its own; scheduled first",
{%- if cookiecutter.ownership == 'in_tree' %}
    "e2e: drives a real `lmcache server` on 127.0.0.1",
{%- endif %}
)


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


def _param(item, name: str) -> object:  # type: ignore[no-untyped-def]
    return item.callspec.params.get(name) if hasattr(item, "callspec") else None


def _schedule_key(item) -> tuple[bool, str, str, int]:  # type: ignore[no-untyped-def]
    """Own servers first, then by shared server, module and TP size."""
    return (
        item.get_closest_marker("own_server") is None,
        str(_param(item, "server") or ""),
        item.path.name,
        int(_param(item, "world_size") or 0),  # type: ignore[call-overload]
    )


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Tests on one shared server run on one xdist worker (``--dist loadgroup``), so it
    starts once; tests with a server of their own, the longest, are handed out first;
    after pytest's own reordering, each (server, module, TP size) runs contiguously, so
    module-scoped worker ranks start once per combination (pytest alone interleaves TP
    sizes and restarts them).
{%- if cookiecutter.emulator == 'no' %}

    Without a device (no emulator rendered), skip what needs one before any fixture
    starts.
{%- endif %}
    """
    # before the other hooks: pytest-xdist reads the groups
    for item in items:
        if kind := _param(item, "server"):
            item.add_marker(pytest.mark.xdist_group(kind))
    result = yield
    items.sort(key=_schedule_key)
{%- if cookiecutter.emulator == 'no' %}
    if DEVICE_PRESENT:
        return result
    skip = pytest.mark.skip(
        reason="no {{ cookiecutter.device_name }} device here: install "
        "{{ cookiecutter.torch_extension_module or 'torch with ' ~ cookiecutter.device_name ~ ' support' }} "
        "on a host with the device (or render with emulator=yes to test on CPU)"
    )
    for item in items:
        if item.get_closest_marker("without_device") is None:
            item.add_marker(skip)
{%- endif %}
    return result


@pytest.fixture(scope="session")
def spec():  # type: ignore[no-untyped-def]
    """The DeviceSpec LMCache registered for this backend (in this process's
    registry)."""
    # First Party
    from lmcache.v1.platform import get_device_spec

    found = get_device_spec("{{ cookiecutter.device_name }}")
    assert found is not None and found.backend_name == "{{ cookiecutter.backend_name }}"
    return found


@pytest.fixture
def lmcache_driven(spec):  # type: ignore[no-untyped-def]
    """Skip unless the spec declares LMCache-driven transfer (IPC wrapper, events, cache
    context)."""
    if not spec.is_lmcache_driven_available() or spec.ipc_wrapper_cls is None:
        pytest.skip(
            f"{type(spec).__name__} does not offer LMCache-driven transfer "
            "(engine-driven only)"
        )
    return spec


@pytest.fixture(scope="module")
def native():  # type: ignore[no-untyped-def]
    """The package's native ops module; skips the test where it ships none."""
    if find_spec(f"{PACKAGE}.native_ops") is None:
        pytest.skip(
            f"{PACKAGE} ships no native ops module (rendered with native_ops=no)"
        )
    # Standard
    import importlib

    return importlib.import_module(f"{PACKAGE}.native_ops")


@pytest.fixture(scope="session")
def servers(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The servers this run shares, one per kind, started on first use (see
    the kit's ``harness/servers.py``)."""
    # Third Party
    from lmcache_device_kit.harness.servers import SharedServers

    pool = SharedServers(tmp_path_factory.mktemp("servers"))
    yield pool
    pool.stop_all()


#: The test pytest runs after the one being torn down (None after the last).
_NEXT_TEST: list = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:  # type: ignore[no-untyped-def]
    # Third Party
    from lmcache_device_kit.harness import servers

    servers.OWN_SERVER_MARKED = item.get_closest_marker("own_server") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem) -> None:  # type: ignore[no-untyped-def]
    # before the fixtures are torn down: the ``server`` fixture reads it
    _NEXT_TEST[0] = nextitem


@pytest.fixture(scope="module")
def server(request, servers, spec):  # type: ignore[no-untyped-def]
    """The shared server of the kind a test names:
    ``@pytest.mark.parametrize("server", [kind], indirect=True)``. Stopped when the
    next test does not use it (pytest-xdist hands a kind's tests to one worker at
    once, and the schedule keeps them together), so it shuts down while the run goes
    on; a later test of its kind would start a new one."""
    # Third Party
    from lmcache_device_kit.harness.servers import SERVER_KINDS

    kind = request.param
    if SERVER_KINDS[kind].get("plugin") and not spec.is_lmcache_driven_available():
        pytest.skip(f"{type(spec).__name__} does not offer LMCache-driven transfer")
    yield servers.get(kind)
    if _param(_NEXT_TEST[0], "server") != kind:
        servers.stop(kind)


@pytest.fixture
def record_transfer_times(record_property):  # type: ignore[no-untyped-def]
    """Record the E2E workers' store/retrieve times (conftest prints them after the
    run)."""

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


def pytest_runtest_logreport(report) -> None:  # type: ignore[no-untyped-def]
    if report.when == "call":
        TRANSFER_TIMES.extend(
            tuple(value)
            for name, value in report.user_properties
            if name == "transfer_ms"
        )


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    """Print the store/retrieve times the E2E workers measured, side by side (one run,
    one machine)."""
    if not TRANSFER_TIMES:
        return
    terminalreporter.section("E2E transfer times (worker-side submit to result, ms)")
    for path, phase, rank, ms, world_size in sorted(TRANSFER_TIMES):
        terminalreporter.write_line(
            f"{path:<38} tp{world_size} rank{rank} {phase:<8} {ms:8.1f}"
        )


def device_runtime():  # type: ignore[no-untyped-def]
    """``torch.{{ cookiecutter.__torch_module_name }}``, the runtime these tests drive, once loaded
    (else None)."""
    # Third Party
    import torch

    return getattr(torch, "{{ cookiecutter.__torch_module_name }}", None)


def on_emulator() -> bool:
    return bool(getattr(device_runtime(), "is_emulator", False))


@pytest.fixture
def runtime():  # type: ignore[no-untyped-def]
    """The device runtime; skips the test where it is not loaded (no
    {{ cookiecutter.device_name }} device here)."""
    module = device_runtime()
    if module is None:
        pytest.skip(f"torch.{TORCH_MODULE} is not loaded: no {DEVICE} device here")
    return module


@pytest.fixture
def emulator(runtime):  # type: ignore[no-untyped-def]
    """The runtime when it is the CPU emulator (injected faults, mapping counts); skips
    the test otherwise."""
    if not on_emulator():
        pytest.skip(f"needs the CPU emulator ({EMULATOR_ENV_VAR}=1)")
    return runtime


def open_mappings() -> int:
    """IPC mappings open in this process (the CPU emulator reports them; a device
    runtime does not)."""
    return int(device_runtime().ipc_mappings())
