# SPDX-License-Identifier: Apache-2.0
"""Plugin-loading faults: LMCache's registry stays usable and says why it skipped a
plugin.

Each case runs ``import lmcache`` in a fresh interpreter with fake plugins on
``PYTHONPATH`` (LMCache builds its registry once per process), and must end
within 30 s.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import textwrap
import time

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import (
    ENTRY_POINT_GROUP,
    fake_plugin,
    rival_spec,
    run_python,
)

DEADLINE_S = 30

REGISTRY = textwrap.dedent(
    """
    import json, lmcache
    from lmcache.v1.platform import _DEVICE_REGISTRY
    name = lambda spec: type(spec).__module__ + "." + type(spec).__name__
    print(json.dumps(
        {backend: name(spec) for backend, spec in _DEVICE_REGISTRY.items()}
    ))
    print(json.dumps(lmcache.torch_device_type))
    """
)
CLEAN = {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None}

Registry = tuple[dict[str, str], str, str, float]


def registry(pythonpath: Path | None = None, **env: str | None) -> Registry:
    """(backend -> spec class, selected device type, LMCache's log, seconds) from a
    fresh ``import lmcache``."""
    overrides = {
        **CLEAN,
        **env,
        **({"PYTHONPATH": str(pythonpath)} if pythonpath else {}),
    }
    started = time.monotonic()
    done = run_python(REGISTRY, overrides, timeout=DEADLINE_S + 30)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    backends, selected = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    return backends, selected, done.stderr, seconds


def spec_class() -> type:
    """The backend's spec class, as LMCache registered it."""
    return type(registered_spec())


def spec_path() -> str:
    """The backend's spec class as an entry point names it: ``module:Class``."""
    return f"{spec_class().__module__}:{spec_class().__qualname__}"


class BaseRegistryFaultsTests(ConformanceTests):
    """A broken, a misnamed and a duplicate plugin beside this one; a typo'd
    selection."""

    @pytest.fixture(scope="class")
    @classmethod
    def beside_faulty_plugins(
        cls, tmp_path_factory: pytest.TempPathFactory
    ) -> Registry:
        """``registry()`` with two faulty plugins installed beside this one (the
        registry state allows both in one interpreter): one whose import raises, and
        one whose entry point points at this spec under another name."""
        root = fake_plugin(
            tmp_path_factory.mktemp("faulty-plugins"),
            "broken",
            "broken = broken_plugin:Spec",
            "broken_plugin",
            "raise ImportError('vendor runtime libfoo.so not found')",
        )
        info = root / "misnamed-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: misnamed\nVersion: 0.0\n"
        )
        (info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\nmisnamed = {spec_path()}\n"
        )
        return registry(root)

    def test_a_broken_plugin_is_skipped_and_logged_while_lmcache_and_this_plugin_still_load(  # noqa: E501
        self, beside_faulty_plugins: Registry
    ) -> None:
        """Another plugin whose import raises: LMCache starts, logs why it skipped it,
        and selects this backend."""
        backend = kit_backend.current()
        backends, selected, log, seconds = beside_faulty_plugins
        assert "broken" not in backends
        assert backends[backend.backend_name] == spec_path().replace(":", ".")
        assert selected == backend.device_type and seconds < DEADLINE_S
        assert (
            "Failed to load LMCache device plugin 'broken'" in log
            and "libfoo.so not found" in log
        )

    def test_an_entry_point_named_differently_from_its_backend_is_refused_with_the_reason(  # noqa: E501
        self, beside_faulty_plugins: Registry
    ) -> None:
        """An entry point ``other = <this spec>``: LMCache refuses that one, naming
        both names; ours still loads."""
        name = kit_backend.current().backend_name
        backends, _, log, _ = beside_faulty_plugins
        assert "misnamed" not in backends and name in backends
        assert (
            "entry-point name must match DeviceSpec.backend_name "
            f"('misnamed' != {name!r})" in log
        )

    def test_a_duplicate_backend_name_keeps_one_spec_and_logs_which_it_ignored(
        self, tmp_path: Path
    ) -> None:
        """Two plugins claiming one backend name: LMCache keeps one (entry-point value
        order) and logs the other."""
        name = kit_backend.current().backend_name
        root = fake_plugin(
            tmp_path,
            "impostor",
            f"{name} = impostor_plugin:RivalSpec",
            "impostor_plugin",
            rival_spec(name, spec_class()),
        )
        backends, _, log, _ = registry(root)
        kept = backends[name]
        ours = spec_class().__name__
        ignored = "RivalSpec" if kept == spec_path().replace(":", ".") else ours
        assert (
            f"Ignoring DeviceSpec {ignored} because backend_name {name!r} "
            "is already registered" in log
        )

    def test_an_unknown_backend_name_fails_import_naming_the_registered_backends(
        self,
    ) -> None:
        """LMCACHE_DEVICE_BACKEND=<typo>: ``import lmcache`` raises at once, listing
        the backends to choose from."""
        name = kit_backend.current().backend_name
        started = time.monotonic()
        done = run_python(
            "import lmcache",
            {**CLEAN, "LMCACHE_DEVICE_BACKEND": f"{name}_typo"},
            timeout=DEADLINE_S + 30,
        )
        assert done.returncode != 0 and time.monotonic() - started < DEADLINE_S
        assert f"LMCACHE_DEVICE_BACKEND='{name}_typo' is not registered" in done.stderr
        assert name in done.stderr.split("Available backends:", 1)[1]
