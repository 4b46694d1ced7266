# SPDX-License-Identifier: Apache-2.0
"""The shape of a backend, as LMCache's own per-backend support tests check theirs.

lmcache 0.5.7 gives its new built-ins support tests of one shape
(``tests/v1/platform/devices/{supa,mlu}/``, after rbln's): the registry holds the
spec under agreeing names, ``resolve_device_ops`` hands out one cached ops object,
availability follows the runtime and never raises, and the LMCache-driven
capability comes with all of its parts or none. They are written against LMCache's
own backends, so the kit's contract runner cannot run them on a plugin; these are
their device-generic checks. The device is stubbed where it matters, so they need
none.

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from types import SimpleNamespace
from typing import Any
import importlib

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests


def registered_spec() -> Any:
    """The backend's spec as LMCache registered it, inside ``import lmcache``."""
    importlib.import_module("lmcache")
    # First Party
    from lmcache.v1.platform import _DEVICE_REGISTRY

    return _DEVICE_REGISTRY[kit_backend.current().backend_name]


def _refuse() -> bool:
    raise RuntimeError("every device is claimed by another process")


@pytest.mark.without_device
class BaseBackendShapeTests(ConformanceTests):
    """The registry, the ops lookup, availability and the LMCache-driven parts."""

    def test_the_registry_holds_this_backend_under_one_set_of_names(self) -> None:
        backend = kit_backend.current()
        spec = registered_spec()
        assert type(spec).__module__.startswith(backend.package)
        names = (spec.backend_name, spec.device_type, spec.torch_module_name)
        assert names == (
            backend.backend_name,
            backend.device_type,
            backend.torch_module_name,
        )

    def test_resolve_device_ops_hands_out_one_cached_ops_object(self) -> None:
        """Repeated lookups share the ops' native bindings and state."""
        backend = kit_backend.current()
        spec = registered_spec()
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        ops = resolve_device_ops(backend.device_type)
        assert isinstance(ops, spec.ops_cls), (type(ops), spec.ops_cls)
        # the backend's own ops, or those of the built-in it extends
        assert backend.extends or type(ops).__module__.startswith(backend.package)
        assert ops.device_type == backend.device_type
        assert resolve_device_ops(backend.device_type) is ops

    @pytest.mark.parametrize(
        ("is_available", "expected"),
        [(lambda: True, True), (lambda: False, False), (_refuse, False)],
        ids=["a-usable-device", "no-device", "a-runtime-that-raises"],
    )
    def test_availability_follows_the_runtime_and_never_raises(
        self, monkeypatch: pytest.MonkeyPatch, is_available: Any, expected: bool
    ) -> None:
        """LMCache asks every registered backend during ``import lmcache``: a probe
        that raises would break LMCache for every device."""
        spec = registered_spec()
        # Third Party
        import torch

        if switch := kit_backend.current().stand_in_env_var():
            monkeypatch.setenv(switch, "1")  # and the vendor's runtime is the one here
        runtime = SimpleNamespace(is_available=is_available)
        monkeypatch.setattr(
            torch, kit_backend.current().torch_module_name, runtime, raising=False
        )
        assert spec.is_available() is expected

    def test_the_lmcache_driven_capability_comes_with_all_its_parts_or_none(
        self,
    ) -> None:
        """A package with an IPC wrapper module has every part, and offers
        LMCache-driven transfer exactly while its probe passes (on a device with IPC
        memory and interprocess events; never without one); one without offers none
        of it."""
        spec = registered_spec()
        parts = {
            "ipc_wrapper_cls": spec.ipc_wrapper_cls,
            "event_ipc_backend": spec.event_ipc_backend,
            "pin_memory_backend": spec.pin_memory_backend,
        }
        backend = kit_backend.current()
        if hasattr(spec, "lmcache_driven_unproven"):
            unproven = spec.lmcache_driven_unproven()
            assert spec.is_lmcache_driven_available() is not bool(unproven)
            assert unproven or spec.is_available(), "offered without a device"
            # Third Party
            import torch

            runtime = getattr(torch, backend.torch_module_name, None)
            emulated = getattr(runtime, "is_emulator", False)
            assert not (emulated and hasattr(runtime, "ipc_export_handle") and unproven)
            assert None not in parts.values(), parts
            assert callable(spec.create_cache_context)
            return
        # Engine-driven only, as LMCache's supa and rbln backends: nothing advertised
        # (one that extends a built-in keeps the built-in's parts, unused).
        assert not spec.is_lmcache_driven_available()
        if backend.extends:
            return
        assert set(parts.values()) == {None}, parts
        with pytest.raises(NotImplementedError):
            spec.create_cache_context()
