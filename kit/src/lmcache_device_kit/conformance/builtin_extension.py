# SPDX-License-Identifier: Apache-2.0
"""A backend of its own on a device type LMCache already has: registered beside the
built-in it extends, detected by the vendor's runtime, selected by LMCache's rules.

Why a class of its own: a CUDA look-alike (``tensor.device.type == "cuda"``) shares
its device type with LMCache's ``cuda`` backend, as ``rocm`` does. LMCache's
registries hold both; auto-detection takes the one available backend of a device
type and refuses to guess between two (``_device_detect.py``:
``_resolve_device_type_candidates``), where ``LMCACHE_DEVICE_BACKEND`` chooses. These
tests need no device: availability is forced in fresh interpreters, the way each
host would present it.

Imports neither lmcache nor the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
import json
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import run_python

#: Run in a fresh interpreter: the registries, then selection among the device type's
#: backends with the built-in and the plugin made available or not, as each host would
#: present them (the plugin through its documented stand-in switch).
PROBE = textwrap.dedent(
    """
    import json, os, torch
    from lmcache.v1.platform._device_detect import (
        _build_backend_registry, _build_device_registry, _detect_device,
        _resolve_device_type_candidates,
    )
    from lmcache.v1.platform import get_device_spec

    backends = _build_backend_registry()
    ours, builtin = backends[__BACKEND__], backends[__EXTENDS__]
    found = dict(
        device_type=ours.device_type,
        subclasses_builtin=isinstance(ours, type(builtin)),
        by_device_type={
            t: [s.backend_name for s in specs]
            for t, specs in _build_device_registry().items()
        },
        available_here=ours.is_available(),
    )
    module = getattr(torch, ours.torch_module_name)
    module.is_available = lambda: True
    os.environ[__STAND_IN__] = "1"

    def select(builtin_available, choice):
        type(builtin).is_available = lambda self: builtin_available
        os.environ.pop("LMCACHE_DEVICE_BACKEND", None)
        if choice:
            os.environ["LMCACHE_DEVICE_BACKEND"] = choice
        try:
            if choice:
                return _detect_device()[2]
            resolved = _resolve_device_type_candidates(torch, __DEVICE__)
            return resolved and resolved[1].backend_name
        except RuntimeError as exc:
            return "refused: " + str(exc)

    found["only_ours"] = select(False, None)
    found["both"] = select(True, None)
    found["both_chosen"] = select(True, __BACKEND__)
    found["spec_when_chosen"] = get_device_spec(__DEVICE__).backend_name
    print(json.dumps(found))
    """
)

_found: dict[str, dict] = {}


def probe() -> dict:
    """PROBE's findings for the backend under test (one fresh interpreter)."""
    backend = kit_backend.current()
    if backend.package not in _found:
        names = {
            "__BACKEND__": backend.backend_name,
            "__EXTENDS__": backend.extends,
            "__DEVICE__": backend.device_type,
            "__STAND_IN__": backend.stand_in_env_var(),
        }
        code = PROBE
        for placeholder, value in names.items():
            code = code.replace(placeholder, repr(value))
        done = run_python(code, {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None})
        assert done.returncode == 0, done.stderr[-4000:]
        _found[backend.package] = json.loads(done.stdout.strip().splitlines()[-1])
    return _found[backend.package]


class BaseBuiltinExtensionTests(ConformanceTests):
    """A backend that extends a built-in: both registries, detection, selection."""

    requires = frozenset({"extends_builtin"})

    @pytest.mark.without_device
    def test_the_backend_registry_holds_it_on_the_builtins_device_type(self) -> None:
        found, backend = probe(), kit_backend.current()
        assert found["device_type"] == backend.device_type
        assert found["subclasses_builtin"], (
            f"the spec does not subclass LMCache's {backend.extends} spec"
        )

    @pytest.mark.without_device
    def test_the_device_registry_lists_it_beside_the_builtin(self) -> None:
        backend = kit_backend.current()
        listed = probe()["by_device_type"][backend.device_type]
        assert backend.extends in listed and backend.backend_name in listed, listed

    @pytest.mark.without_device
    def test_it_is_available_exactly_where_the_vendor_runtime_has_a_device(
        self,
    ) -> None:
        backend = kit_backend.current()
        assert probe()["available_here"] is backend.device_present()

    @pytest.mark.without_device
    def test_a_device_of_another_runtime_on_its_device_type_is_not_its_device(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The built-in's hardware (an NVIDIA GPU for a CUDA look-alike) makes
        ``torch.<device>`` available; without the vendor's runtime (and the stand-in
        switch off) the backend still says no, or LMCache would refuse to choose on
        every such host."""
        spec = registered_spec()
        # Third Party
        import torch

        monkeypatch.delenv(kit_backend.current().stand_in_env_var(), raising=False)
        module = getattr(torch, kit_backend.current().torch_module_name)
        monkeypatch.setattr(module, "is_available", lambda: True)
        if kit_backend.current().device_present():
            pytest.skip("this host has the vendor's runtime")
        assert spec.is_available() is False

    @pytest.mark.without_device
    def test_auto_detection_picks_it_where_the_builtin_is_unavailable(self) -> None:
        assert probe()["only_ours"] == kit_backend.current().backend_name

    @pytest.mark.without_device
    def test_with_both_available_lmcache_refuses_and_names_the_variable(
        self,
    ) -> None:
        both = probe()["both"]
        assert both.startswith("refused: ") and "LMCACHE_DEVICE_BACKEND" in both, both

    @pytest.mark.without_device
    def test_with_both_available_the_variable_selects_it(self) -> None:
        found, backend = probe(), kit_backend.current()
        assert found["both_chosen"] == backend.backend_name
        assert found["spec_when_chosen"] == backend.backend_name
