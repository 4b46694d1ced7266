# SPDX-License-Identifier: Apache-2.0
"""LMCache finds, validates and selects the backend (a plugin or an in-tree one).

Guide: "Debugging checklist". LMCache builds its registry once per process, inside
``import lmcache``, so every case runs in a fresh interpreter with its own
environment; cases that need the same environment read one probe of it. What
differs by how the backend is installed is in classes of their own: a plugin wheel
registers through its entry point and checks its LMCache release
(``BaseWheelDiscoveryTests``, ``requires`` wheel), an in-tree backend through
LMCache's scan of its own tree (``BaseInTreeDiscoveryTests``).

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Mapping
from importlib import metadata
import importlib
import json
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import ENTRY_POINT_GROUP, run_python

PROBE = textwrap.dedent(
    """
    import json, sys
    import lmcache
    from lmcache.v1.platform import _DEVICE_REGISTRY, resolve_device_ops
    from lmcache.v1.platform._device_detect import DEVICE_PLUGIN_ENTRY_POINT_GROUP
    compat = sys.modules.get(__PACKAGE__ + "._lmcache_compat")  # loaded with the spec
    shims = compat.OpsSupport.__module__.rpartition(".")[0] if compat else "-"
    after_import = sorted(
        m for m in sys.modules
        if any(m == p or m.startswith(p + ".") for p in (__PACKAGE__, shims))
    )
    ops = resolve_device_ops(__DEVICE__)
    name = lambda obj: type(obj).__module__ + "." + type(obj).__name__
    release_range = compat and hasattr(compat, "SUPPORTED_LMCACHE") and [
        compat.SUPPORTED_LMCACHE,
        compat.TESTED_LMCACHE_VERSIONS,
        compat.installed_lmcache_version(),
    ]
    print(json.dumps(dict(
        registered=sorted(_DEVICE_REGISTRY),
        spec_module=type(_DEVICE_REGISTRY[__BACKEND__]).__module__,
        torch_device_type=lmcache.torch_device_type,
        device_ops=name(getattr(lmcache, "device_ops", None)),
        resolved_ops=name(ops),
        ops_is_process_singleton=ops is getattr(lmcache, "device_ops", None),
        plugin_modules_after_import=after_import,
        shims=shims,
        entry_point_group=DEVICE_PLUGIN_ENTRY_POINT_GROUP,
        release_range=release_range,
    )))
    """
)

_probes: dict[frozenset, tuple[dict, str]] = {}
#: The shims' modules loading a plugin may import (``lmcache_device_kit.compat``'s):
#: the names table and its resolver, the portable spec, the ops' helpers, a wheel's
#: release check and wire registration; never the KV layouts (they import
#: lmcache.device_ops) nor the doctor's tables.
SHIMS_AT_LOAD = ("surface", "resolve", "spec", "ops_support", "release", "wire")


def emulator(value: str) -> dict[str, str]:
    """The emulator's switch set to ``value`` (nothing where the backend has none)."""
    backend = kit_backend.current()
    return {backend.emulator_env_var: value} if backend.emulator_env_var else {}


def plain() -> dict[str, str | None]:
    """Nothing selected and no emulator: what plain ``import lmcache`` sees on a host
    without a device."""
    return {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None, **emulator("0")}


def probe(env: Mapping[str, str | None]) -> tuple[dict, str]:
    """PROBE's findings and LMCache's log in a fresh interpreter with ``env`` (one
    interpreter per env)."""
    key = frozenset(env.items())
    if key not in _probes:
        backend = kit_backend.current()
        code = (
            PROBE.replace("__DEVICE__", repr(backend.device_type))
            .replace("__PACKAGE__", repr(backend.package))
            .replace("__BACKEND__", repr(backend.backend_name))
        )
        done = run_python(code, env)
        assert done.returncode == 0, done.stderr[-4000:]
        _probes[key] = json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
    return _probes[key]


def our_ops() -> str:
    """The backend's ops class, as ``module.Class``: the one its spec names."""
    ops, backend = registered_spec().ops_cls, kit_backend.current()
    # the plugin's own, or those of the built-in it extends
    assert backend.extends or ops.__module__.startswith(backend.package + "."), ops
    return f"{ops.__module__}.{ops.__name__}"


def distribution() -> str:
    """The distribution that installs the backend's package."""
    package = kit_backend.current().package
    names = kit_backend.distributions_of(package)
    assert len(names) == 1, (
        f"{package}'s files are installed by {names or 'no distribution'}: uninstall "
        "all but the plugin's own wheel"
    )
    return names[0]


@pytest.mark.xdist_group("discovery")
class BaseDiscoveryTests(ConformanceTests):
    """Selection by name, by device type and by detection; what the registry loads."""

    def test_lmcache_device_backend_selects_the_plugin_and_its_ops(self) -> None:
        """LMCACHE_DEVICE_BACKEND=<backend> binds our spec, our device type and our
        ops."""
        backend = kit_backend.current()
        device, ops = backend.device_type, our_ops()
        result, log = probe(
            {
                "LMCACHE_DEVICE_BACKEND": backend.backend_name,
                "DEVICE_TYPE": None,
                **emulator("1"),
            }
        )
        assert result["torch_device_type"] == device
        assert f"torch_device_type={device}" in log
        assert result["device_ops"] == ops
        assert result["resolved_ops"] == ops
        assert result["ops_is_process_singleton"] is True

    def test_device_type_selects_the_plugin_without_a_backend_name(self) -> None:
        """DEVICE_TYPE=<device> alone picks our backend, the only available one of that
        type."""
        device = kit_backend.current().device_type
        result, log = probe(
            {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": device, **emulator("1")}
        )
        assert result["torch_device_type"] == device
        assert f"torch_device_type={device}" in log
        assert result["resolved_ops"] == our_ops()

    def test_auto_detection_selects_the_plugin_when_its_device_is_available(
        self,
    ) -> None:
        """With no selection variables, an available device is detected on its own."""
        result, _ = probe(
            {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None, **emulator("1")}
        )
        assert result["torch_device_type"] == kit_backend.current().device_type

    @pytest.mark.without_device
    def test_backend_reports_unavailable_when_its_torch_module_is_missing(
        self,
    ) -> None:
        """Without torch.<device> (the emulator off, where there is one) the plugin
        says so, and LMCache refuses the explicit selection."""
        backend = kit_backend.current()
        env = {"LMCACHE_DEVICE_BACKEND": backend.backend_name, "DEVICE_TYPE": None}
        done = run_python("import lmcache", {**env, **emulator("0")})
        if done.returncode == 0:
            pytest.skip(f"a real {backend.device_type} device is present on this host")
        assert (
            f"LMCACHE_DEVICE_BACKEND={backend.backend_name!r} is registered but not "
            "available" in done.stderr
        )

    @pytest.mark.without_device
    def test_registry_build_imports_only_the_spec_module(self) -> None:
        """Plain ``import lmcache`` loads the spec module, the names, the binding and
        the release shims it binds to (the kit's, or an in-tree backend's copy; with
        a wheel's release check and wire registration): nothing heavier."""
        backend = kit_backend.current()
        package = backend.package
        result, log = probe(plain())
        assert backend.backend_name in result["registered"], log[-3000:]
        assert "Failed to load LMCache device plugin" not in log
        loaded = {package, f"{package}.names", f"{package}._lmcache_compat"}
        loaded.add(result["spec_module"])
        shims = result["shims"]
        loaded |= {shims} | {f"{shims}.{name}" for name in SHIMS_AT_LOAD}
        if backend.extends:  # the built-in it subclasses, and its runtime's detection
            loaded |= {f"{shims}.builtin", f"{package}.detect"}
        extra = set(result["plugin_modules_after_import"]) - loaded
        assert not extra, f"loading the plugin imported {sorted(extra)}"


@pytest.mark.without_device
@pytest.mark.xdist_group("discovery")
class BaseInTreeDiscoveryTests(ConformanceTests):
    """An in-tree backend: LMCache's scan of its own tree registers it."""

    requires = frozenset({"in_tree"})

    def test_built_in_scan_registers_the_package_init_spec_without_an_entry_point(
        self,
    ) -> None:
        """LMCache's scan of lmcache.v1.platform.devices finds the spec in
        ``__init__.py``; no entry point is used."""
        backend = kit_backend.current()
        name, package = backend.backend_name, backend.package
        done = run_python(
            "import json, lmcache; from lmcache.v1.platform import _DEVICE_REGISTRY "
            f"as r; s = r.get({name!r}); "
            "print(json.dumps(s and [type(s).__module__, type(s).__name__]))",
            plain(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        found = json.loads(done.stdout.splitlines()[-1])
        assert found is not None and found[0] == package, done.stderr[-3000:]
        # First Party
        from lmcache.v1.platform.base.device_spec import DeviceSpec

        assert issubclass(
            getattr(importlib.import_module(package), found[1]), DeviceSpec
        )
        group = metadata.entry_points(group=ENTRY_POINT_GROUP)
        assert not [
            ep for ep in group if ep.name == name or ep.value.startswith(package)
        ]
