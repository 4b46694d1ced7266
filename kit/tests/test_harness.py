# SPDX-License-Identifier: Apache-2.0
"""The harness on its own, no plugin or server: what it gives a server of the backend
under test, the server flags it refuses, and what it says when LMCache moved a name.

A backend here is a names module in a temporary package (as ``test_backend.py``
makes one): the harness reads nothing else of a plugin.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from pathlib import Path
import ast

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit import harness
from lmcache_device_kit.harness import lmcache_calls, servers, surface

NAMES = """
DEVICE_TYPE = "bar"
BACKEND_NAME = "bar_backend"
TORCH_MODULE_NAME = "bar"
TORCH_EXTENSION_MODULE = "torch_bar"
SLOW_PATH_MARK = "bar_backend slow path:"
"""
#: Makes ``(name, names.py text)`` the backend under test.
UseBackend = Callable[[str, str], None]


@pytest.fixture
def use_backend(
    fake_plugin: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> UseBackend:
    """Make a names-only package ``kit_test_<name>`` the backend under test."""

    def use(name: str, names: str) -> None:
        package = fake_plugin(f"kit_test_{name}", {"names.py": names})
        monkeypatch.setenv(kit_backend.PACKAGE_ENV_VAR, package)
        kit_backend.current.cache_clear()

    return use


def test_a_plugin_server_selects_the_backend_and_its_emulator_only_when_it_has_one(
    use_backend: UseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an emulator the server gets its variable (on unless the suite turned it
    off); a backend without one gets no emulator variable at all."""
    use_backend("plain", NAMES)
    assert servers.plugin_server_env() == {"LMCACHE_DEVICE_BACKEND": "bar_backend"}
    use_backend("emulated", NAMES + 'EMULATOR_ENV_VAR = "LMCACHE_BAR_EMULATOR"\n')
    monkeypatch.delenv("LMCACHE_BAR_EMULATOR", raising=False)
    assert servers.plugin_server_env() == {
        "LMCACHE_DEVICE_BACKEND": "bar_backend",
        "LMCACHE_BAR_EMULATOR": "1",
    }
    monkeypatch.setenv("LMCACHE_BAR_EMULATOR", "0")
    assert servers.plugin_server_env()["LMCACHE_BAR_EMULATOR"] == "0"


def test_a_server_flag_the_surface_does_not_declare_is_refused_naming_the_table(
    tmp_path: Path,
) -> None:
    """Every flag a server gets is declared, so ``doctor --api`` checks it on each
    release: an undeclared one is refused before any process starts."""
    with pytest.raises(AssertionError, match=r"\['--kit-test-flag'\].*SERVER_FLAGS"):
        servers.LMCacheServer(
            tmp_path / "server.log", "engine_driven", extra_args=["--kit-test-flag"]
        )
    declared = servers.LMCacheServer(tmp_path / "server.log", "engine_driven")
    assert declared.process is None  # declared flags only; nothing started


def test_a_name_lmcache_moved_fails_saying_where_the_harness_declares_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        surface.HARNESS_NAMES,
        "kit_test_moved",
        (("kit_test_absent.module", "Moved", None, None),),
    )
    with pytest.raises(ImportError, match="HARNESS_NAMES\\['kit_test_moved'\\]") as e:
        lmcache_calls.lazy("kit_test_moved")
    assert lmcache_calls.SURFACE in str(e.value)


def test_the_harness_takes_lmcache_names_only_through_the_table_doctor_checks() -> None:
    """A name imported by its path bypasses ``HARNESS_NAMES``: when LMCache moves it,
    ``doctor --api`` says where it went and adding that location to the table, as the
    error says, would change nothing. Every harness module asks
    ``lmcache_calls.lazy`` (``import lmcache`` itself, which loads plugins, aside)."""
    direct = []
    for path in sorted(Path(harness.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            direct += [
                f"{path.name}:{node.lineno} {module}"
                for module in modules
                if module.startswith("lmcache.")
            ]
    assert not direct, f"import through lmcache_calls.lazy instead: {direct}"
