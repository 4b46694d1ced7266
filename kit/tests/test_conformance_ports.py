# SPDX-License-Identifier: Apache-2.0
"""The ports of LMCache's per-device tests (``conformance/ports``): every departure
ships with the kit, readable by a vendor, and every port needs LMCache-driven transfer.

Read from the installed package's sources (the port modules import torch and lmcache,
which a project's conftest.py configures first).
"""

# Future
from __future__ import annotations

# Standard
from importlib import resources
import ast

# First Party
from lmcache_device_kit.conformance import ports as ported


def port_modules() -> dict[str, ast.Module]:
    """Each port module of the installed kit, parsed (``common.py`` is their base)."""
    package = resources.files(ported.__name__)
    return {
        entry.name: ast.parse(entry.read_text(encoding="utf-8"))
        for entry in package.iterdir()
        if entry.name.endswith(".py") and entry.name not in ("__init__.py", "common.py")
    }


def test_the_departures_ship_with_the_kit_and_list_every_port_module() -> None:
    modules = port_modules()
    assert len(modules) == 14
    departures = ported.departures()
    assert "## Not ported" in departures
    for name in modules:
        assert f"\n| {name} |" in departures, f"README.md lists no departure of {name}"


def test_each_port_module_names_its_lmcache_sources_and_its_departures() -> None:
    for name, tree in port_modules().items():
        docstring = ast.get_docstring(tree) or ""
        assert "tests/v1/platform/devices/" in docstring, name
        assert "Departures" in docstring, name


def test_each_port_module_holds_one_base_class_of_ports_needing_lmcache_driven() -> (
    None
):
    """``PortTests`` requires LMCache-driven transfer; pytest collects none of them
    (no ``Test`` prefix): a project subclasses them."""
    for name, tree in port_modules().items():
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        bases = [
            (node.name, [ast.unparse(base) for base in node.bases])
            for node in classes
            if node.name.startswith("Base")
        ]
        assert len(bases) == 1, (name, bases)
        (class_name, class_bases) = bases[0]
        assert class_name.endswith("Tests") and class_bases == ["PortTests"], name
    # First Party
    from lmcache_device_kit.conformance.ports.common import PortTests

    assert PortTests.requires == frozenset({"lmcache_driven"})
