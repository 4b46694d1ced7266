# SPDX-License-Identifier: Apache-2.0
"""``doctor --port``: each ladder step's state, from its proof and the plugin's code."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.doctor import port
from lmcache_device_kit.doctor.ladder import STEPS
from lmcache_device_kit.doctor.report import Report
from lmcache_device_kit.runtime_calls import CALLS, EMULATOR_ONLY

#: The sample's runtime.py, as far as the ladder reads it.
SAMPLE_RUNTIME = '''
import torch

def bind_thread_context(device=None):
    """TODO(vendor): bind your runtime's context."""

def host_function_model():
    """TODO(vendor): return yours."""
    if not hasattr(torch.cpu, "host_func_launcher"):
        return "none"
    return "subscribed" if hasattr(torch.cpu, "report_subscriber") else "launch"

def host_function_launcher():
    """TODO(vendor): your runtime's cudaLaunchHostFunc."""
    if host_function_model() == "none":
        return None
    return int(torch.cpu.host_func_launcher())

def report_processing():
    """TODO(vendor): aclrtSubscribeReport and aclrtProcessReport, wrapped."""
    if host_function_model() != "subscribed":
        return None
    return int(torch.cpu.report_subscriber()), int(torch.cpu.report_processor())

def after_stream_work(stream_handle, publish):
    torch.cpu.synchronize_stream_handle(stream_handle)
    publish()
'''
#: The same, ported to a runtime without host functions.
PORTED_RUNTIME = SAMPLE_RUNTIME[: SAMPLE_RUNTIME.index("def host_function_model")] + (
    """def host_function_model():
    return "none"

def host_function_launcher():
    return None

def report_processing():
    return None

def after_stream_work(stream_handle, publish):
    torch.cpu.synchronize_stream_handle(stream_handle)
    publish()
"""
)


@pytest.fixture
def plugin(
    fake_plugin: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], str]:
    """``plugin(runtime_source)``: a plugin with that runtime.py, made current."""
    made = iter(range(100))

    def make(runtime: str) -> str:
        name = fake_plugin(
            f"kit_test_port{next(made)}",
            {
                "_lmcache_compat.py": 'CLASS_PREFIX = "Bar"\n',
                "device_ops.py": "",  # a backend of its own device type
                "runtime.py": runtime,
            },
        )
        monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, name)
        kit_backend.current.cache_clear()
        return name

    return make


def steps_by_key() -> dict[str, object]:
    return {step.key: step for step in STEPS}


def test_a_site_that_still_calls_the_emulators_function_holds_the_sample(
    plugin: Callable[[str], str],
) -> None:
    """The sample is told from the plugin's installed source: a site that names the
    emulator-only call; the ported site does not."""
    host_functions = steps_by_key()["host-functions"]
    plugin(SAMPLE_RUNTIME)
    assert port.holds_sample(host_functions) == [  # type: ignore[arg-type]
        "host_function_model calls torch.cpu.host_func_launcher",
        "host_function_launcher calls torch.cpu.host_func_launcher",
        "report_processing calls torch.cpu.report_subscriber",
        "report_processing calls torch.cpu.report_processor",
    ]
    plugin(PORTED_RUNTIME)
    assert port.holds_sample(host_functions) == []  # type: ignore[arg-type]


def climbed_without_a_device(failed: tuple[str, str, str]) -> tuple[Report, dict]:
    """The ladder climbed with no spec, after the doctor check ``failed`` (name,
    detail, fix); and its lines by step title."""
    checks = Report()
    checks.add(failed[0], False, failed[1], failed[2])
    ladder = port.climb(None, checks)
    return ladder, {c.name.split(". ", 1)[1]: c for c in ladder.checks}


def test_without_the_device_sample_steps_are_not_ported_yet_and_the_rest_fail(
    plugin: Callable[[str], str],
) -> None:
    """No device (no spec): a step holding the sample reads "not ported yet"; one
    without sample code fails with the failing check's fix; a step the plugin has
    no module for is left off; the ladder does not pass."""
    plugin(SAMPLE_RUNTIME)
    failed = ("torch extension", "import torch_bar failed", "install it")
    ladder, lines = climbed_without_a_device(failed)
    assert list(lines) == [
        "find the device",
        "bind a context on LMCache's threads",
        "a stream's native handle",
        "wait for a stream's work by its handle",
        "a C host function on a stream: launched, on a subscribed thread, or none",
        "a tensor over device memory at a pointer",
        "your device kernels",
        "your device's numbers, for what a request costs",
    ]
    assert lines["wait for a stream's work by its handle"].pending
    host_functions = (
        "a C host function on a stream: launched, on a subscribed thread, or none"
    )
    assert lines[host_functions].pending
    device = lines["find the device"]
    assert not device.ok and not device.pending and "install it" in device.fix
    # read from the project, not the device: run elsewhere, it says where to run
    assert lines["your device's numbers, for what a request costs"].pending
    assert not ladder.ok


def test_a_backend_that_extends_a_builtin_climbs_its_own_steps(
    fake_plugin: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin with ``detect.py`` and no ops of its own (it extends a built-in): its
    steps are the built-in it extends, its runtime's detection and its overrides,
    then the device's numbers; without the device each fails with the failing
    check's fix."""
    name = fake_plugin(
        "kit_test_port_extension",
        {"_lmcache_compat.py": 'CLASS_PREFIX = "Maca"\n', "detect.py": ""},
    )
    monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, name)
    kit_backend.current.cache_clear()
    failed = ("vendor runtime", "not maca's runtime", "export X_STAND_IN=1")
    ladder, lines = climbed_without_a_device(failed)
    assert list(lines) == [
        "extend LMCache's built-in backend of your device type",
        "recognise your runtime, not the built-in's",
        "override what your runtime lacks of the built-in's",
        "your device's numbers, for what a request costs",
    ]
    runtime = lines["recognise your runtime, not the built-in's"]
    assert not runtime.ok and "X_STAND_IN=1" in runtime.fix
    assert not ladder.ok


def test_the_ladder_names_each_emulator_call_a_sample_makes_once_per_site() -> None:
    """Every sample call names a site of the ladder; test facilities are not calls."""
    sites = {site for step in STEPS for site in step.sites}
    calls = {call for step in STEPS for _, call in step.sample}
    assert {site for step in STEPS for site, _ in step.sample} <= sites
    assert not calls & set(EMULATOR_ONLY)
    assert len({step.key for step in STEPS}) == len(STEPS)


def test_the_ladders_sample_calls_are_the_runtime_lists_sample_calls() -> None:
    """The emulator-only calls the sample makes at its TODO(vendor)s are listed twice
    for two readers: by site in the ladder, with their CUDA/NPU counterparts in the
    runtime list the README renders. Neither may name one the other lacks."""
    on_ladder = {call for step in STEPS for _, call in step.sample}
    listed = {call.name for call in CALLS if call.kind == "sample"}
    assert sorted(on_ladder ^ listed) == []
