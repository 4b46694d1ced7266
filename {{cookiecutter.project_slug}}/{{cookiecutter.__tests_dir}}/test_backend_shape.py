# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The shape of a backend, as LMCache's own per-backend support tests check theirs.

lmcache 0.5.7 gives its new built-ins support tests of one shape
(``tests/v1/platform/devices/{supa,mlu}/``, after rbln's): the registry holds the
spec under agreeing names, ``resolve_device_ops`` hands out one cached ops object,
availability follows the runtime and never raises, and the LMCache-driven
capability comes with all of its parts or none. They are written against LMCache's
own backends, so the kit's contract runner cannot run them here; these are their
device-generic checks, run against this backend. Its device is stubbed where it
matters, so they need none.
"""

# Future
from __future__ import annotations

# Standard
from types import SimpleNamespace
from typing import Any
import importlib

# Third Party
import pytest

pytestmark = pytest.mark.without_device

BACKEND = "{{ cookiecutter.backend_name }}"
DEVICE = "{{ cookiecutter.device_name }}"
TORCH_MODULE = "{{ cookiecutter.__torch_module_name }}"
PACKAGE = "{{ cookiecutter.__package }}"
LMCACHE_DRIVEN = {{ "True" if cookiecutter.lmcache_driven != "no" else "False" }}


def registered_spec() -> Any:
    """This backend's spec as LMCache registered it, inside ``import lmcache``."""
    importlib.import_module("lmcache")
    # First Party
    from lmcache.v1.platform import _DEVICE_REGISTRY

    return _DEVICE_REGISTRY[BACKEND]


def test_the_registry_holds_this_backend_under_one_set_of_names() -> None:
    spec = registered_spec()
    assert type(spec).__module__.startswith(PACKAGE)
    names = (spec.backend_name, spec.device_type, spec.torch_module_name)
    assert names == (BACKEND, DEVICE, TORCH_MODULE)


def test_resolve_device_ops_hands_out_one_cached_ops_object() -> None:
    """Repeated lookups share the ops' native bindings and state."""
    registered_spec()
    # First Party
    from lmcache.v1.platform import resolve_device_ops

    ops = resolve_device_ops(DEVICE)
    assert type(ops).__module__.startswith(PACKAGE) and ops.device_type == DEVICE
    assert resolve_device_ops(DEVICE) is ops


def _refuse() -> bool:
    raise RuntimeError("every device is claimed by another process")


@pytest.mark.parametrize(
    ("is_available", "expected"),
    [(lambda: True, True), (lambda: False, False), (_refuse, False)],
    ids=["a-usable-device", "no-device", "a-runtime-that-raises"],
)
def test_availability_follows_the_runtime_and_never_raises(
    monkeypatch: pytest.MonkeyPatch, is_available: Any, expected: bool
) -> None:
    """LMCache asks every registered backend during ``import lmcache``: a probe that
    raises would break LMCache for every device."""
    spec = registered_spec()
    # Third Party
    import torch

    runtime = SimpleNamespace(is_available=is_available)
    monkeypatch.setattr(torch, TORCH_MODULE, runtime, raising=False)
    assert spec.is_available() is expected


def test_the_lmcache_driven_capability_comes_with_all_its_parts_or_none() -> None:
    spec = registered_spec()
    parts = {
        "ipc_wrapper_cls": spec.ipc_wrapper_cls,
        "event_ipc_backend": spec.event_ipc_backend,
        "pin_memory_backend": spec.pin_memory_backend,
    }
    if LMCACHE_DRIVEN:
        assert spec.is_lmcache_driven_available()
        assert None not in parts.values(), parts
        assert callable(spec.create_cache_context)
        return
    # Engine-driven only, as LMCache's supa and rbln backends: nothing advertised.
    assert not spec.is_lmcache_driven_available()
    assert set(parts.values()) == {None}, parts
    with pytest.raises(NotImplementedError):
        spec.create_cache_context()
