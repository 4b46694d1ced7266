# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Backend support: registry discovery, selection and the availability probe.

What LMCache needs from a built-in backend before any transfer: its built-in scan
registers the spec under its backend name and device type, resolves its ops, selects
it by ``LMCACHE_DEVICE_BACKEND``, and its availability probe never raises. Most
tests stand a stub in for the torch device module and run on any host, as
``mlu/test_mlu_support.py`` does; those that need a device skip without one.
"""

# Standard
from types import SimpleNamespace
from unittest.mock import Mock
import importlib

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform import (
    _DEVICE_REGISTRY,
    get_device_spec,
    resolve_device_ops,
)
from lmcache.v1.platform._device_detect import _detect_device
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.device_ops import (
    {{ cookiecutter.class_prefix }}DeviceOps,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    BACKEND_NAME,
    DEVICE_TYPE,
    TORCH_EXTENSION_MODULE,
    TORCH_MODULE_NAME,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)


def _stub_runtime(monkeypatch: pytest.MonkeyPatch, available: bool) -> None:
    """Stand a runtime that reports ``available`` in for torch's device module."""
    runtime = SimpleNamespace(is_available=lambda: available)
    monkeypatch.setattr(torch, TORCH_MODULE_NAME, runtime, raising=False)


def test_spec_is_discovered_by_the_built_in_scan() -> None:
    """Defining the subclass in the package's __init__.py is the registration."""
    spec = _DEVICE_REGISTRY[BACKEND_NAME]
    assert type(spec) is {{ cookiecutter.class_prefix }}DeviceSpec
    assert get_device_spec(DEVICE_TYPE) is spec


def test_device_identifiers() -> None:
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    assert spec.device_type == DEVICE_TYPE
    assert spec.backend_name == BACKEND_NAME
    assert spec.torch_module_name == TORCH_MODULE_NAME
    assert spec.ops_cls is {{ cookiecutter.class_prefix }}DeviceOps


def test_resolve_device_ops_returns_the_backend_ops_singleton() -> None:
    """Repeated lookups share one ops object (its native bindings, its state)."""
    ops = resolve_device_ops(DEVICE_TYPE)
    assert isinstance(ops, {{ cookiecutter.class_prefix }}DeviceOps)
    assert resolve_device_ops(DEVICE_TYPE) is ops


@pytest.mark.parametrize("available", [False, True])
def test_probe_asks_the_registered_runtime(
    monkeypatch: pytest.MonkeyPatch, available: bool
) -> None:
    _stub_runtime(monkeypatch, available)
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    assert spec.is_available() is available


@pytest.mark.skipif(not TORCH_EXTENSION_MODULE, reason="torch has the device built in")
def test_probe_imports_the_runtime_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe imports the extension when torch did not load it at import."""
    monkeypatch.delattr(torch, TORCH_MODULE_NAME, raising=False)
    real_import = importlib.import_module

    def register(name: str, package: str | None = None) -> object:
        if name == TORCH_EXTENSION_MODULE:
            _stub_runtime(monkeypatch, True)
            return SimpleNamespace()
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", register)
    assert {{ cookiecutter.class_prefix }}DeviceSpec().is_available()


@pytest.mark.parametrize("error", [ImportError, OSError, RuntimeError])
def test_unavailable_runtime_is_not_selected(
    monkeypatch: pytest.MonkeyPatch, error: type[Exception]
) -> None:
    """A missing wheel, shared library or driver: unavailable, never an exception
    (LMCache probes every backend during ``import lmcache``)."""
    monkeypatch.delattr(torch, TORCH_MODULE_NAME, raising=False)
    failing = Mock(side_effect=error("unavailable"))
    monkeypatch.setattr(importlib, "import_module", failing)
    assert not {{ cookiecutter.class_prefix }}DeviceSpec().is_available()


def test_probe_error_of_the_runtime_means_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken() -> bool:
        raise RuntimeError("driver not loaded")

    runtime = SimpleNamespace(is_available=broken)
    monkeypatch.setattr(torch, TORCH_MODULE_NAME, runtime, raising=False)
    assert not {{ cookiecutter.class_prefix }}DeviceSpec().is_available()


def test_lmcache_device_backend_selects_this_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``LMCACHE_DEVICE_BACKEND=<name>`` picks this spec and its torch module."""
    _stub_runtime(monkeypatch, True)
    monkeypatch.setenv("LMCACHE_DEVICE_BACKEND", BACKEND_NAME)
    module, device_type, backend_name = _detect_device()
    assert module is getattr(torch, TORCH_MODULE_NAME)
    assert (device_type, backend_name) == (DEVICE_TYPE, BACKEND_NAME)


def test_an_unavailable_backend_is_refused_when_selected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _stub_runtime(monkeypatch, False)
    monkeypatch.setenv("LMCACHE_DEVICE_BACKEND", BACKEND_NAME)
    with pytest.raises(RuntimeError, match="not available on this host"):
        _detect_device()


def test_stream_handle_refuses_an_object_without_a_native_handle() -> None:
    with pytest.raises(RuntimeError, match="native handle"):
        {{ cookiecutter.class_prefix }}DeviceSpec().get_stream_handle(object())


@requires_device
def test_each_stream_has_its_own_native_handle() -> None:
    runtime = getattr(torch, TORCH_MODULE_NAME)
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    default, other = runtime.current_stream(), runtime.Stream()
    handles = spec.get_stream_handle(default), spec.get_stream_handle(other)
    assert all(isinstance(handle, int) for handle in handles)
    assert handles[0] != handles[1]


@requires_device
def test_a_tensor_of_this_device_reports_the_device_type() -> None:
    """``device_type`` is what torch reports for this backend's tensors."""
    tensor = torch.empty(1, device=DEVICE_TYPE)
    assert tensor.device.type == {{ cookiecutter.class_prefix }}DeviceSpec().device_type
