# SPDX-License-Identifier: Apache-2.0
"""What a plugin takes from LMCache: the declared tables, ``doctor --api``, shims.

The release shims the plugin runs on declare every LMCache name, base-class member
and call the plugin depends on (the kit's ``lmcache_device_kit/compat/surface.py``
and ``declared.py``, the classes named after the binding's ``CLASS_PREFIX``);
``lmcache_device_kit/harness/surface.py`` what the harness takes (the tests' worker,
scheduler and servers, ``doctor --server``). These tests hold the tables to the code
(no override, import or adapter setting left undeclared), show that ``doctor --api``
reports what moved, with the fix, on any release, and fail once a shim serves no
supported release any more. An in-tree backend ships with LMCache (no doctor, no
release range): skipped there.

Imports neither lmcache nor the plugin at import time; torch, through ``support.py``
(import it from tests only, after ``conftest.py`` set the environment).
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import importlib
import json
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.source_scan import (
    SETTING,
    builtin_spec_locations,
    lmcache_imports,
    project_sources,
)
from lmcache_device_kit.conformance.support import run_python
from lmcache_device_kit.doctor.api import plugin_surface


def package() -> str:
    return kit_backend.current().package


#: The kit's harness: its declared table, and how it calls LMCache.
HARNESS = "lmcache_device_kit.harness"
PLAIN = {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None}


def api(code: str = "", env: dict[str, str | None] | None = None) -> dict:
    """``doctor --api --json`` in a new process, after ``code`` (a patch) has run."""
    script = textwrap.dedent(code) + textwrap.dedent(
        """
        import contextlib, io, json
        from lmcache_device_kit.doctor.api import check_api
        from lmcache_device_kit.doctor.report import Report
        report = Report()
        with contextlib.redirect_stderr(io.StringIO()):
            check_api(report)
        print(json.dumps([c.__dict__ for c in report.checks]))
        """
    )
    done = run_python(script, {**PLAIN, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return {check["name"]: check for check in json.loads(done.stdout.splitlines()[-1])}


def surface() -> tuple[Any, dict, dict]:
    """The shims' names table, the plugin's classes and its calls, as ``doctor --api``
    reads them (after ``import lmcache``: LMCache loads the plugin in it)."""
    importlib.import_module("lmcache")
    _, names, classes, calls = plugin_surface(package())
    return names, classes, calls


def harness(name: str = "surface") -> Any:
    """The harness's table (``surface``) or its calls (``lmcache_calls``)."""
    return importlib.import_module(f"{HARNESS}.{name}")


@pytest.mark.without_device
class BaseLMCacheSurfaceTests(ConformanceTests):
    """The declared tables against the code, and ``doctor --api`` on them."""

    requires = frozenset({"wheel"})

    def test_doctor_api_passes_every_entry_of_the_table_on_the_installed_lmcache(
        self,
    ) -> None:
        done = run_python(
            f"from {package()}.doctor import main; main(['--api'])", PLAIN
        )
        assert done.returncode == 0, done.stdout[-3000:]
        (table, classes, calls), theirs = surface(), harness()
        expected = 1 + len(table.NAMES) + len(calls)
        expected += sum(1 + len(members) for *_, members in classes.values())
        expected += len(theirs.HARNESS_NAMES) + len(theirs.HARNESS_CALLS)
        expected += len(theirs.SERVER_FLAGS) + len(theirs.CONFIG_KEYS)
        lines = done.stdout.splitlines()
        assert sum(line.startswith("✓ ") for line in lines) == expected, done.stdout
        assert lines[-1] == f"all checks passed ({expected} checks)"

    def test_doctor_api_says_where_a_moved_name_went_and_how_to_fix_the_table(
        self,
    ) -> None:
        checks = api(
            """
            import lmcache_device_kit.compat.surface as surface
            surface.NAMES["PageBufferShapeDesc"] = (
                ("lmcache.v1.platform.nowhere", "PageBufferShapeDesc", None, None),
            )
            """
        )
        moved = checks["name PageBufferShapeDesc"]
        assert not moved["ok"] and "lmcache.v1.platform.nowhere" in moved["detail"]
        where = "defines PageBufferShapeDesc in lmcache.v1.platform.ops_types"
        assert where in moved["detail"], moved
        assert "NAMES['PageBufferShapeDesc']" in moved["fix"]

    def test_doctor_api_names_the_fields_of_a_harness_request_that_moved(self) -> None:
        """As if the harness's shim for lmcache 0.5.7's packed token ids were reverted:
        ``LoadStoreOp`` declared with the fields of the other releases only is a ✗ that
        names the gone and the new field, what makes the new one, and where to add
        it."""
        current = (
            "token_bytes" if harness("lmcache_calls").packs_tokens() else "token_ids"
        )
        other = "token_ids" if current == "token_bytes" else "token_bytes"
        checks = api(
            f"""
            import lmcache
            import {HARNESS}.surface as table
            fields = ({other!r}, "block_ids", "start", "end")
            table.HARNESS_CALLS["LoadStoreOp"] = table.always((), fields)
            """
        )
        moved = checks["harness call LoadStoreOp"]
        assert not moved["ok"], moved
        assert moved["detail"].startswith(f"{other} is gone; {current} ("), moved
        if current == "token_bytes":  # lmcache 0.5.7+: what packs the ids
            maker = "lmcache.v1.multiprocess.token_codec.pack_token_ids"
            assert f"{maker} makes one from token_ids" in moved["detail"], moved
        table = "lmcache_device_kit/harness/surface.py"
        assert f"CALLS['LoadStoreOp'] in {table}" in moved["fix"], moved

    def test_doctor_api_flags_a_server_flag_and_a_setting_lmcache_does_not_take(
        self,
    ) -> None:
        # split in two: the project's own settings are scanned for undeclared ones
        misspelt = "lmcache.mp." + "mq_timeout_s"
        checks = api(
            f"""
            import lmcache
            import {HARNESS}.surface as table
            table.SERVER_FLAGS["--l1-size-gib"] = (None, None)
            table.CONFIG_KEYS[{misspelt!r}] = (None, None)
            """
        )
        flag = checks["harness server flag --l1-size-gib"]
        assert not flag["ok"] and "(it has --l1-size-gb" in flag["detail"], flag
        setting = checks[f"harness setting {misspelt}"]
        assert not setting["ok"] and "ignore it" in setting["detail"], setting

    def test_every_lmcache_name_and_setting_the_project_uses_is_declared(
        self, request: pytest.FixtureRequest
    ) -> None:
        """An import from LMCache that no table declares would move unseen: --api would
        say "unchanged" while the suite fails."""
        (table, _, _), theirs = surface(), harness()
        declared = {
            (module, attribute)
            for names in (table.NAMES, theirs.HARNESS_NAMES)
            for locations in names.values()
            for module, attribute, _, _ in locations
        }
        declared |= builtin_spec_locations(kit_backend.current().extends)
        undeclared = set()
        for name, text in project_sources(request.node.path.parent).items():
            for module, imported in lmcache_imports(text):
                if not declared & {(module, imported), (f"{module}.{imported}", None)}:
                    undeclared.add(f"{name}: {module} {imported or ''}".strip())
            for key in SETTING.findall(text):
                if key not in theirs.CONFIG_KEYS:
                    undeclared.add(f"{name}: setting {key}")
        assert not undeclared, (
            "declare in lmcache_device_kit/compat/surface.py (the shims') or "
            "lmcache_device_kit/harness/surface.py (the harness's): "
            f"{sorted(undeclared)}"
        )

    def test_doctor_api_flags_an_override_lmcache_can_no_longer_call(self) -> None:
        spec = registered_spec()
        # a spec that extends a built-in is its only class (lmcache 0.5.6+)
        cls = type(spec) if kit_backend.current().extends else spec.ops_cls
        base, member, args = (
            ("DeviceSpec", "get_stream_handle", "self")
            if kit_backend.current().extends
            else ("DeviceOps", "multi_layer_block_kv_transfer", "self, paged")
        )
        checks = api(
            f"""
            import lmcache
            from {cls.__module__} import {cls.__name__} as cls
            cls.{member} = lambda {args}: None
            """
        )
        member = checks[f"member {base}.{member}"]
        assert not member["ok"] and "does not bind" in member["detail"], member

    def test_doctor_api_runs_on_an_lmcache_outside_the_supported_range(self) -> None:
        """An untested version (the installed code, a post-release number): the release
        check would refuse it; ``--api`` still checks everything."""
        untested = f"{metadata.version('lmcache')}.post99"
        checks = api(
            f"""
            import importlib.metadata as md
            real = md.version
            md.version = lambda name: {untested!r} if name == "lmcache" else real(name)
            """
        )
        assert checks["lmcache"]["detail"].startswith(f"lmcache {untested}")
        assert all(check["ok"] for check in checks.values()), checks

    def test_every_override_of_an_lmcache_member_is_declared_in_the_table(self) -> None:
        """A method the plugin overrides but the table does not list would go
        unchecked."""
        _, classes, _ = surface()
        compat = importlib.import_module(f"{package()}._lmcache_compat")
        for module, name, base_name, members in classes.values():
            cls = getattr(importlib.import_module(module, package()), name)
            base = compat.lazy(base_name)
            overrides = {
                member
                for member in vars(cls)
                if not member.startswith("_") and hasattr(base, member)
            }
            declared = {member for member, _, _ in members}
            assert overrides <= declared, (
                f"{name}: add {overrides - declared} to its members in "
                "lmcache_device_kit/compat/declared.py"
            )

    def test_every_shim_still_serves_a_supported_lmcache_release(self) -> None:
        """A shim whose last release neither the plugin nor the kit supports (its
        ``FIRST_SERVED_RELEASE``: other plugins may reach back further) is dead code:
        remove it."""
        # First Party
        from lmcache_device_kit.compat.declared import SHIMS
        from lmcache_device_kit.doctor.calls import release

        (table, classes, calls), theirs = surface(), harness()
        tested = importlib.import_module(f"{package()}._lmcache_compat")
        served = (*tested.TESTED_LMCACHE_VERSIONS, table.FIRST_SERVED_RELEASE)
        first = min(served, key=release)
        oldest = release(first)
        lasts = {
            **{
                f"NAMES[{name!r}] at {module}": last
                for name, locations in {**table.NAMES, **theirs.HARNESS_NAMES}.items()
                for module, _, _, last in locations
            },
            **{
                f"declared.py member {base}.{member}": last
                for _, _, base, members in classes.values()
                for member, _, last in members
            },
            **{
                f"CALLS[{call!r}] shape {number}": shape[3]
                for call, shapes in {**calls, **theirs.HARNESS_CALLS}.items()
                for number, shape in enumerate(shapes)
            },
            **{
                f"SHIMS[{what!r}] ({where})": last
                for what, (where, last) in {**SHIMS, **theirs.HARNESS_SHIMS}.items()
            },
        }
        retired = [w for w, last in lasts.items() if last and release(last) < oldest]
        assert not retired, f"only serve lmcache older than {first}: remove {retired}"
