# SPDX-License-Identifier: Apache-2.0
"""LMCache finds a plugin wheel through its entry point, and the wheel checks the
LMCache release it loads on.

``discovery.py``'s probe, for what only a wheel has: its entry point, the order its
modules may be imported in, its declared LMCache range. An in-tree backend ships
with LMCache and has none of them: the class is skipped there.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
import importlib.util
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.discovery import distribution, plain, probe
from lmcache_device_kit.conformance.support import ENTRY_POINT_GROUP, run_python


def our_entry_points() -> list[metadata.EntryPoint]:
    """The entry points, in any group, that point into the backend's package."""
    package = kit_backend.current().package
    return [
        ep
        for ep in metadata.distribution(distribution()).entry_points
        if ep.value.startswith(package + ".") and ep.group != "console_scripts"
    ]


@pytest.mark.without_device
@pytest.mark.xdist_group("discovery")
class BaseWheelDiscoveryTests(ConformanceTests):
    """The entry point, registration whatever is imported first, the release check."""

    requires = frozenset({"wheel"})

    def test_entry_point_is_named_after_the_backend_and_points_to_the_spec_class(
        self,
    ) -> None:
        """The wheel declares exactly one entry point, in LMCache's group, named
        backend_name."""
        spec = type(registered_spec())
        backend = kit_backend.current()
        ours = [
            ep
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
            if ep.value.startswith(backend.package + ".")
        ]
        spec_path = f"{spec.__module__}:{spec.__qualname__}"
        assert [(ep.name, ep.value) for ep in ours] == [
            (backend.backend_name, spec_path)
        ]
        assert ours[0].dist is not None and ours[0].dist.name == distribution()

    def test_entry_point_group_is_the_one_lmcache_scans(self) -> None:
        """The group the wheel declares its entry point in (pyproject.toml) is
        LMCache's own constant."""
        result, _ = probe(plain())
        groups = {ep.group for ep in our_entry_points()}
        assert groups == {result["entry_point_group"]}

    @pytest.mark.parametrize(
        "first",
        ["", ".device", ".device_ops", "._lmcache_compat"],
        ids=lambda module: module.lstrip(".") or "package",
    )
    def test_the_plugin_registers_whichever_of_its_modules_a_process_imports_first(
        self, first: str
    ) -> None:
        """A process whose first import is the package, its entry point's module, its
        ops or its LMCache layer (not ``lmcache``) still finds the plugin registered:
        LMCache's discovery, run inside ``import lmcache``, skips a half-imported
        plugin."""
        backend = kit_backend.current()
        if first and importlib.util.find_spec(backend.package + first) is None:
            pytest.skip(f"{backend.package} has no {first.lstrip('.')} module")
        done = run_python(
            f"import sys, {backend.package}{first}; "
            "from lmcache.v1.platform import _DEVICE_REGISTRY; "
            f"print({backend.backend_name!r} in _DEVICE_REGISTRY)",
            plain(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "True", done.stderr[-3000:]

    def test_plugin_refuses_to_load_on_an_untested_lmcache_release(self) -> None:
        """On an LMCache release outside the tested range, loading fails loudly and
        names the range."""
        backend = kit_backend.current()
        code = textwrap.dedent(
            """
            import importlib.metadata as md
            real = md.version
            md.version = lambda name: "99.0.0" if name == "lmcache" else real(name)
            import lmcache
            from lmcache.v1.platform import _DEVICE_REGISTRY
            print({backend!r} in _DEVICE_REGISTRY)
            """
        ).format(backend=backend.backend_name)
        # The canary (its own runs) relaxes the check: test it as shipped.
        untested = {backend.allow_untested_env_var: None}
        done = run_python(code, {**plain(), **untested})
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "False"
        assert (
            f"Failed to load LMCache device plugin {backend.backend_name!r}"
            in done.stderr
        )
        supported = probe(plain())[0]["release_range"][0]
        assert supported in done.stderr and "lmcache 99.0.0 is installed" in done.stderr

    def test_declared_lmcache_range_is_exactly_the_tested_releases(self) -> None:
        """pyproject's lmcache requirement spans the tested releases, oldest to newest,
        and admits the installed one."""
        # Third Party
        from packaging.requirements import Requirement
        from packaging.version import Version

        supported, tested, installed = probe(plain())[0]["release_range"]
        declared = [Requirement(r) for r in metadata.requires(distribution()) or []]
        (lmcache_req,) = [r for r in declared if r.name == "lmcache"]
        assert lmcache_req.specifier == Requirement(supported).specifier
        oldest, newest = min(tested, key=Version), max(tested, key=Version)
        assert (
            lmcache_req.specifier
            == Requirement(f"lmcache>={oldest},<={newest}").specifier
        )
        assert installed in tested and lmcache_req.specifier.contains(installed)
