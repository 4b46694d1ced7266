# SPDX-License-Identifier: Apache-2.0
"""The release shims (``lmcache_device_kit.compat``) a plugin runs on: what loading
them may import, name resolution, the capability's spellings, the release check, the
slow-path report and a plugin's IPC wire type.

Importing the shims imports LMCache (``DeviceSpec``), whose import builds its device
registry and loads every installed plugin: the tests that need LMCache run in
processes of their own (``in_lmcache``), this one never imports it.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from types import ModuleType
import ast
import importlib.util
import sys
import textwrap

# Third Party
from conftest import in_lmcache

COMPAT = Path(importlib.util.find_spec("lmcache_device_kit").origin or "").parent
COMPAT /= "compat"
#: What a shim module may import when it loads: DeviceSpec, LMCache's base class.
DEVICE_SPEC = "lmcache.v1.platform.base.device_spec"


def standalone(name: str) -> ModuleType:
    """A shim module that imports nothing (``surface``, ``declared``), loaded from its
    file without the package (whose ``__init__`` imports LMCache)."""
    spec = importlib.util.spec_from_file_location(
        f"_compat_{name}", COMPAT / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imports(path: Path, module_level: bool) -> list[tuple[int, str]]:
    """(level, module) of each import of a source: at module level only (``if`` and
    ``try`` blocks count, functions and ``TYPE_CHECKING`` do not), or anywhere."""
    tree = ast.parse(path.read_text())
    found, pending = [], list(tree.body if module_level else ast.walk(tree))
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
        elif module_level and isinstance(node, ast.If):
            checking = ast.unparse(node.test) == "TYPE_CHECKING"
            pending += node.orelse if checking else [*node.body, *node.orelse]
        elif module_level and isinstance(node, ast.Try):
            pending += [*node.body, *node.orelse, *node.finalbody]
            pending += [n for h in node.handlers for n in h.body]
    return found


def test_loading_the_shims_imports_only_the_stdlib_and_device_spec() -> None:
    """LMCache imports a plugin's binding, and so the shims, inside ``import lmcache``:
    any other LMCache module imported then is a circular import that drops the
    plugin, and torch or the plugin's modules are not theirs to import. The package
    imports ``lmcache`` itself first (a no-op while LMCache loads a plugin)."""
    stdlib = set(sys.stdlib_module_names)
    wrong = {
        f"{path.name}: {module}"
        for path in sorted(COMPAT.glob("*.py"))
        for level, module in imports(path, module_level=True)
        if not level
        and module.split(".")[0] not in stdlib
        and module not in (DEVICE_SPEC, "lmcache" * (path.name == "__init__.py"))
    }
    assert not wrong, f"imported when the shims load: {sorted(wrong)}"


def test_the_shims_import_no_other_kit_module_so_a_copy_runs_alone() -> None:
    """An in-tree backend carries a copy of the shims in LMCache's tree, without the
    kit: they import one another relatively, anywhere in their code."""
    wrong = {
        f"{path.name}: {module}"
        for path in sorted(COMPAT.glob("*.py"))
        for level, module in imports(path, module_level=False)
        if not level and module.split(".")[0] == "lmcache_device_kit"
    }
    assert not wrong, f"absolute imports of the kit: {sorted(wrong)}"


#: A plugin bound to the shims, as the template renders one: its spec module imports
#: its binding, which imports the shims, while LMCache loads it.
FIRST = {
    "__init__.py": "import lmcache  # before its own modules, as a template plugin\n",
    "_lmcache_compat.py": """
        from lmcache_device_kit.compat.ops_support import OpsSupport
        from lmcache_device_kit.compat.resolve import lookup
        from lmcache_device_kit.compat.spec import PortableDeviceSpec
        ops_support = OpsSupport("kit_test_first slow path:", "Ops", __name__)

        def __getattr__(name):
            return lookup(name)
    """,
    "device.py": """
        from ._lmcache_compat import PortableDeviceSpec

        class FirstSpec(PortableDeviceSpec):
            device_type = backend_name = torch_module_name = "kit_test_first"
            ops_cls = None

            def is_available(self):
                return False
    """,
}


def test_a_plugin_bound_to_the_shims_loads_whichever_a_process_imports_first(
    tmp_path: Path,
) -> None:
    """LMCache loads plugins inside ``import lmcache``; were the shims' package
    half-imported then (a process's first import), a plugin bound to them would be
    dropped with a warning."""
    package = tmp_path / "kit_test_first"
    package.mkdir()
    for name, source in FIRST.items():
        (package / name).write_text(textwrap.dedent(source))
    info = tmp_path / "kit_test_first-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-test-first\n")
    (info / "entry_points.txt").write_text(
        "[lmcache.device_plugins]\nkit_test_first = kit_test_first.device:FirstSpec\n"
    )
    for first in ("lmcache", "lmcache_device_kit.compat", "kit_test_first.device"):
        found = in_lmcache(
            f"""
            import json
            import {first}
            from lmcache.v1.platform import _DEVICE_REGISTRY
            print(json.dumps("kit_test_first" in _DEVICE_REGISTRY))
            """,
            tmp_path,
        )
        assert found is True, f"first import {first}: the plugin was dropped"


def test_importing_the_kit_reads_no_distribution_metadata_until_asked_its_version() -> (
    None
):
    """A plugin imports the shims, and so the kit's package, inside every process's
    ``import lmcache``: reading the installed distributions there costs each process
    milliseconds (12 ms measured with 148 installed)."""
    found = in_lmcache(
        """
        import json
        import importlib.metadata as metadata
        asked = []
        real = metadata.version
        metadata.version = lambda name: asked.append(name) or real(name)
        import lmcache_device_kit
        before = list(asked)
        version = lmcache_device_kit.__version__
        print(json.dumps([before, asked, version == real("lmcache-device-kit")]))
        """
    )
    assert found == [[], ["lmcache-device-kit"], True]


def test_importing_the_shims_or_making_a_wire_type_changes_nothing() -> None:
    """The release check and the wire registration are explicit calls; importing every
    shim module and describing a wire type registers nothing."""
    changed = in_lmcache(
        """
        import json, sys
        import lmcache
        from lmcache.v1.platform.base import ipc_wire
        def state():
            devices = sorted(m for m in sys.modules if m.startswith(
                "lmcache.v1.platform.devices._"))
            return [devices, sorted(map(str, ipc_wire.WRAPPER_TYPES)),
                    str(ipc_wire.WireIPCData)]
        before = state()
        import lmcache_device_kit.compat as compat
        from lmcache_device_kit.compat import declared, kv_layout, release, wire
        wire.WireType("ext_kit_test", "KitTest", "kit_test")
        print(json.dumps([before, state()]))
        """
    )
    assert changed[0] == changed[1]


def test_a_name_resolves_where_it_lives_newest_first_or_says_where_to_declare_it() -> (
    None
):
    found = in_lmcache(
        """
        import json
        import lmcache_device_kit.compat as compat
        from lmcache_device_kit.compat import surface
        surface.NAMES["newest"] = (
            ("lmcache.v1.nowhere", "X", "9.0.0", None),
            ("json", "dumps", "0.5.6", "8.0.0"),
            ("json", "loads", None, "0.5.5"),
        )
        surface.NAMES["gone"] = (("lmcache.v1.nowhere", "X", None, None),)
        said = []
        for name in ("gone", "undeclared"):
            try:
                compat.lazy(name)
            except (ImportError, AttributeError) as exc:
                said.append(f"{type(exc).__name__}: {exc}")
        from lmcache_device_kit.compat.resolve import lookup
        looked = [lookup("host_pieces") is compat.host_pieces,
                  lookup("newest") is compat.newest, hasattr(compat, "nope")]
        try:
            lookup("nope")
        except AttributeError:
            looked.append("AttributeError")
        print(json.dumps([compat.newest.__name__, *said, looked]))
        """
    )
    assert found[0] == "dumps"
    assert found[1].startswith("ImportError: None of lmcache.v1.nowhere:X exists")
    assert "NAMES in lmcache_device_kit.compat.surface" in found[1]
    assert found[2] == (
        "AttributeError: lmcache_device_kit.compat declares no LMCache name "
        "'undeclared'"
    )
    assert found[3] == [True, True, False, "AttributeError"]  # as a binding sees them


def test_a_builtin_spec_is_found_where_the_release_keeps_it() -> None:
    """What a plugin that extends a built-in subclasses: LMCache's own spec class,
    the one its registry holds; a built-in no location has names the table."""
    found = in_lmcache(
        """
        import json
        from lmcache.v1.platform._device_detect import _build_backend_registry
        from lmcache_device_kit.compat.builtin import builtin_spec
        cuda = builtin_spec("cuda")
        try:
            builtin_spec("nosuch")
            missing = ""
        except ImportError as exc:
            missing = str(exc)
        print(json.dumps([cuda.__name__, type(_build_backend_registry()["cuda"])
                          is cuda, missing]))
        """
    )
    assert found[:2] == ["CudaDeviceSpec", True]
    assert "NosuchDeviceSpec" in found[2]
    assert "BUILTIN_PACKAGES in lmcache_device_kit.compat.surface" in found[2]


def test_a_portable_spec_answers_both_spellings_and_auto_follows_the_release() -> None:
    found = in_lmcache(
        """
        import json
        from types import SimpleNamespace
        import lmcache_device_kit.compat as compat

        class Driven(compat.PortableDeviceSpec):
            def is_lmcache_driven_available(self):
                return True

        def answers(cls):
            spec = cls()
            return [spec.is_lmcache_driven_available(),
                    spec.is_handle_transfer_available()]

        mode = SimpleNamespace(value="lmcache_driven")
        spec = SimpleNamespace(device_type="foo", default_mp_transfer_mode=lambda: mode)
        follows = compat.auto_transfer_mode(spec)
        compat.spec.AUTO_FOLLOWS_SPEC = False  # lmcache 0.5.4/0.5.5
        old = [compat.auto_transfer_mode(spec),
               compat.auto_transfer_mode(SimpleNamespace(device_type="cuda"))]
        print(json.dumps([answers(compat.PortableDeviceSpec), answers(Driven),
                          follows, old]))
        """
    )
    assert found[0] == [False, False] and found[1] == [True, True]
    assert found[2] == "lmcache_driven"
    assert found[3] == ["engine_driven", "lmcache_driven"]


def test_the_release_check_refuses_an_untested_lmcache_unless_allowed() -> None:
    found = in_lmcache(
        """
        import json, logging, os
        from lmcache_device_kit.compat import release
        args = ("lmcache-bar-device", ("0.5.4", "0.5.6"), "lmcache>=0.5.4,<=0.5.6",
                "KIT_TEST_ALLOW_UNTESTED")
        said = []
        logging.getLogger(release.__name__).addHandler(
            type("H", (logging.Handler,), {"emit": lambda s, r: said.append(
                r.getMessage())})())
        for installed, allowed in [("0.5.6", None), ("0.5.5", None), ("0.5.5", "1")]:
            release.installed_lmcache_version = lambda: installed
            os.environ.pop("KIT_TEST_ALLOW_UNTESTED", None)
            if allowed:
                os.environ["KIT_TEST_ALLOW_UNTESTED"] = allowed
            try:
                release.check_release(*args)
                said.append("loaded")
            except RuntimeError as exc:
                said.append(str(exc))
        print(json.dumps(said))
        """
    )
    assert found[0] == "loaded"
    assert found[1].startswith(
        "lmcache-bar-device supports lmcache>=0.5.4,<=0.5.6 (tested: 0.5.4, 0.5.6), "
        "but lmcache 0.5.5 is installed. Install a supported release"
    )
    assert found[2:] == [
        "lmcache 0.5.5 is untested with lmcache-bar-device; loading it because "
        "KIT_TEST_ALLOW_UNTESTED=1",
        "loaded",
    ]


def test_the_slow_path_report_counts_every_slow_copy_and_logs_each_kind_once(
    tmp_path: Path,
) -> None:
    """With the plugin's mark and ops class; a copy from host memory the plugin's pin
    module says is not pinned is one, pinned or unknown memory is not."""
    (tmp_path / "kit_test_slow").mkdir()
    (tmp_path / "kit_test_slow" / "__init__.py").write_text("")
    (tmp_path / "kit_test_slow" / "pin_memory.py").write_text(
        "def host_range_is_pinned(ptr, nbytes):\n"
        "    return {1: True, 2: None}.get(ptr, False)\n"
    )
    found = in_lmcache(
        """
        import contextlib, io, json
        from lmcache_device_kit.compat import OpsSupport
        ops = OpsSupport("bar slow path:", "BarDeviceOps", "kit_test_slow._binding")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            for ptr, nbytes in [(1, 64), (2, 64), (3, 0), (3, 64), (4, 64)]:
                ops.check_host_pinned(ptr, nbytes, "lmcache_memcpy_async")
            ops.report_slow_path("native fallback", "the kernel refused")
            ops.report_slow_path("native fallback", "the kernel refused")
            ops.announce_pointer_mode("torch baseline")
            ops.announce_pointer_mode("torch baseline")
        print(json.dumps([dict(ops.slow_paths), err.getvalue()]))
        """,
        tmp_path,
    )
    counts, log = found
    assert counts == {"pageable host memory": 2, "native fallback": 2}
    marked = [line for line in log.splitlines() if "bar slow path:" in line]
    assert len(marked) == 2, log
    first = "bar slow path: pageable host memory: BarDeviceOps.lmcache_memcpy_async"
    assert f"{first} copies 64 bytes at host address 0x3," in marked[0], log
    assert "bar slow path: native fallback: the kernel refused" in marked[1], log
    assert log.count("serving pointer-mode multi_layer_block_kv_transfer") == 1, log


def test_a_plugins_classes_are_named_after_its_prefix_driven_ones_if_it_has_them() -> (
    None
):
    declared = standalone("declared")
    engine = declared.classes("Bar", lmcache_driven=False)
    driven = declared.classes("Bar", lmcache_driven=True)
    assert {role: entry[:3] for role, entry in engine.items()} == {
        "spec": (".device", "BarDeviceSpec", "DeviceSpec"),
        "ops": (".device_ops", "BarDeviceOps", "DeviceOps"),
    }
    assert [entry[1] for entry in driven.values()] == [
        "BarDeviceSpec",
        "BarDeviceOps",
        "BarIPCWrapper",
        "BarCacheContext",
        "BarEventIPCBackend",
        "BarPinMemoryBackend",
    ]
    members = {member for member, _, _ in engine["spec"][3]}
    assert "is_lmcache_driven_available" in members
    assert "ipc_wrapper_cls" not in members
    assert "ipc_wrapper_cls" in {member for member, _, _ in driven["spec"][3]}
    assert "KVLayerGroupsManager" not in declared.calls(lmcache_driven=False)
    assert set(declared.calls(True)) == set(declared.CALLS) | set(
        declared.LMCACHE_DRIVEN_CALLS
    )
