# SPDX-License-Identifier: Apache-2.0
"""The catalog: every conformance class once, and the subclasses a suite runs."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import importlib
import inspect
import subprocess
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance import catalog
from lmcache_device_kit.conformance.base import ConformanceTests

CONFORMANCE = Path(catalog.__file__).parent


def defined_classes() -> set[type[ConformanceTests]]:
    """Every Base...Tests class the conformance modules (not the ports) define."""
    found = set()
    for path in sorted(CONFORMANCE.glob("*.py")):
        module = importlib.import_module(f"{catalog.__package__}.{path.stem}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            defined_here = value.__module__ == module.__name__
            if defined_here and issubclass(value, ConformanceTests):
                if value is not ConformanceTests:
                    found.add(value)
    return found


def test_the_catalog_lists_every_conformance_class_of_the_kit_once() -> None:
    listed = catalog.BASES + catalog.APART
    assert len(set(listed)) == len(listed)
    assert set(listed) == defined_classes()


def test_a_subclass_is_named_as_a_project_names_it_and_lives_in_the_given_module() -> (
    None
):
    made = catalog.subclasses("tests.test_conformance")
    assert list(made)[:2] == ["TestBackendShape", "TestDiscovery"]
    assert made["TestIPCWrapperCodec"].__module__ == "tests.test_conformance"
    for name, cls in made.items():
        (base,) = cls.__bases__
        assert base in catalog.BASES and name == catalog.subclass_name(base)


def test_a_class_named_otherwise_is_refused() -> None:
    class Odd(ConformanceTests):
        pass

    with pytest.raises(ValueError, match="Base<What>Tests"):
        catalog.subclass_name(Odd)


def test_collecting_the_conformance_classes_imports_no_lmcache() -> None:
    """A project's test modules import these classes at collection, before its
    conftest chose the backend: importing them (and the kit's pytest plugin) must
    not import lmcache, which would resolve LMCache's device ops too early
    (``from lmcache import device_ops`` then fails in LMCache's own modules)."""
    code = (
        "import sys, pkgutil, importlib, lmcache_device_kit.conformance as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module(f'{c.__name__}.{m.name}')\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'lmcache'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout
