# SPDX-License-Identifier: Apache-2.0
"""The backend under test, described by its names: the one input the kit takes.

Why it exists: the harness, the tests and the checks in this kit are generic over a
backend's names (its device type, its LMCache backend name, the environment
variables it reads). A plugin made from the template keeps them in
``<package>/names.py``, a module that imports nothing, so the kit reads them there
without importing the plugin, lmcache or torch.

Every process of a test run finds the backend the same way: its import package is
in ``LMCACHE_DEVICE_KIT_PACKAGE``. ``use(package)`` (a project's ``tests/conftest.py``
calls it) sets the variable, so servers and workers the harness starts inherit it.

Must not import lmcache, torch or any module of the plugin but ``names`` (torch only
when ``torch_module`` or ``device_present`` is called).
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any
import argparse
import functools
import importlib
import importlib.util
import os

#: The plugin's import package (``lmcache_foo``, or in LMCache's tree
#: ``lmcache.v1.platform.devices.foo``), for every process of a test run.
PACKAGE_ENV_VAR = "LMCACHE_DEVICE_KIT_PACKAGE"

#: ``names.py`` constants every backend has, by the field that holds them.
REQUIRED_NAMES = {
    "device_type": "DEVICE_TYPE",
    "backend_name": "BACKEND_NAME",
    "torch_module_name": "TORCH_MODULE_NAME",
    "torch_extension_module": "TORCH_EXTENSION_MODULE",
    "slow_path_mark": "SLOW_PATH_MARK",
}
#: Constants only some backends have (a wheel's release guard, an emulator), empty
#: when absent.
OPTIONAL_NAMES = {
    "allow_untested_env_var": "ALLOW_UNTESTED_ENV_VAR",
    "emulator_env_var": "EMULATOR_ENV_VAR",
    "extends": "EXTENDS",
}


class BackendNotConfigured(RuntimeError):
    """No backend, or one whose names the kit cannot read; the message says how to
    fix it."""


@dataclass(frozen=True)
class Backend:
    """One backend's names, as its ``names.py`` defines them."""

    #: The plugin's import package.
    package: str
    #: ``tensor.device.type`` of its KV caches.
    device_type: str
    #: Its LMCache name: ``LMCACHE_DEVICE_BACKEND``, the entry-point name.
    backend_name: str
    #: ``torch.<name>``, the device module.
    torch_module_name: str
    #: The module that creates ``torch.<name>``; empty when torch has it built in.
    torch_extension_module: str
    #: Starts every log line that reports a slow path.
    slow_path_mark: str
    #: Lets the plugin load on an untested lmcache; empty in LMCache's tree.
    allow_untested_env_var: str = ""
    #: Selects the CPU emulator of ``torch.<name>``; empty without one.
    emulator_env_var: str = ""
    #: The built-in LMCache backend it extends, on the built-in's device type (a CUDA
    #: look-alike: ``cuda``); empty for a device LMCache has no backend for.
    extends: str = ""

    @classmethod
    def from_names(cls, package: str, names: ModuleType) -> Backend:
        missing = [name for name in REQUIRED_NAMES.values() if not hasattr(names, name)]
        if missing:
            raise BackendNotConfigured(
                f"{names.__name__} lacks {', '.join(missing)}: every backend's "
                "names.py defines them (see the template's names.py)"
            )
        values = {
            field: str(getattr(names, constant, ""))
            for field, constant in {**REQUIRED_NAMES, **OPTIONAL_NAMES}.items()
        }
        return cls(package=package, **values)

    @classmethod
    def of(cls, package: str) -> Backend:
        """The backend whose names are in ``<package>/names.py``, read from the file
        without importing the package or its parents (``lmcache_foo``, and LMCache in
        whose tree an in-tree backend lives, import lmcache)."""
        names = load_module_file(package, "names")
        if names is None:
            raise BackendNotConfigured(
                f"no names.py in an importable package {package!r}: set "
                f"{PACKAGE_ENV_VAR} to the plugin's import package (e.g. lmcache_foo) "
                "and install the plugin"
            )
        return cls.from_names(package, names)

    @property
    def has_emulator(self) -> bool:
        return bool(self.emulator_env_var)

    @property
    def in_tree(self) -> bool:
        """An in-tree backend lives in LMCache's package; a plugin in a wheel of its
        own."""
        return self.package.startswith("lmcache.")

    def torch_module(self) -> Any:
        """``torch.<name>``, importing the extension module first if torch did not
        autoload it (None if torch still has no such module); imports torch, raises
        ImportError when the extension is missing."""
        # Third Party
        import torch

        module = getattr(torch, self.torch_module_name, None)
        if module is None and self.torch_extension_module:
            importlib.import_module(self.torch_extension_module)
            module = getattr(torch, self.torch_module_name, None)
        return module

    def device_present(self) -> bool:
        """Whether ``torch.<name>`` works here (its extension imported if torch did not
        autoload it), checked without importing LMCache; imports torch. For a backend
        that extends a built-in, also whether it is the vendor's runtime (its
        ``detect.runtime_present``, read by path), not the built-in's."""
        try:
            module = self.torch_module()
            if module is None or not module.is_available():
                return False
            if not self.extends:
                return True
            detect = load_module_file(self.package, "detect")
            return detect is not None and bool(detect.runtime_present())
        except Exception:  # any failure means "no device here"
            return False

    def stand_in_env_var(self) -> str:
        """The documented test switch of a backend that extends a built-in
        (``detect.STAND_IN_ENV_VAR``: the built-in's device stands in for the
        vendor's); empty for one of its own device type."""
        detect = load_module_file(self.package, "detect") if self.extends else None
        return str(getattr(detect, "STAND_IN_ENV_VAR", ""))


def load_module_file(package: str, name: str) -> ModuleType | None:
    """``<package>/<name>.py`` executed from its file, without importing the package
    or its parents (``lmcache_foo``, and LMCache in whose tree an in-tree backend
    lives, import lmcache); None if the package has no such file."""
    top, *inner = package.split(".")
    try:
        spec = importlib.util.find_spec(top)  # top level: found, not imported
    except (ImportError, ValueError):
        spec = None
    roots = list(spec.submodule_search_locations or []) if spec else []
    candidates = [Path(root, *inner, f"{name}.py") for root in roots]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        return None
    module_spec = importlib.util.spec_from_file_location(
        f"_lmcache_device_kit_{name}_{package.replace('.', '_')}", found
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def distributions_of(package: str) -> list[str]:
    """The installed distributions that ship ``package``'s files (normally one).

    Another wheel's ``top_level.txt`` may name the package too without shipping it (an
    empty directory setuptools took for a namespace package), and one distribution is
    named once per metadata directory on ``sys.path``: both are left out."""
    top = package.split(".")[0]
    return sorted(
        {
            name
            for name in metadata.packages_distributions().get(top, [])
            if any(
                str(f).startswith(f"{top}/")
                for f in metadata.distribution(name).files or ()
            )
        }
    )


def use(package: str) -> Backend:
    """Make ``package`` the backend of this process and of every process it starts."""
    backend = Backend.of(package)
    os.environ[PACKAGE_ENV_VAR] = package
    current.cache_clear()
    return backend


def add_package_option(parser: argparse.ArgumentParser) -> None:
    """``--package``: the backend of a kit command run outside pytest."""
    parser.add_argument(
        "--package",
        help=f"the plugin's import package (default: ${PACKAGE_ENV_VAR})",
    )


def chosen(package: str | None) -> Backend:
    """The backend a command's ``--package`` names, else this run's (``current``)."""
    return use(package) if package else current()


@functools.cache
def current() -> Backend:
    """The backend of this test run (``LMCACHE_DEVICE_KIT_PACKAGE``)."""
    package = os.environ.get(PACKAGE_ENV_VAR, "")
    if not package:
        raise BackendNotConfigured(
            f"{PACKAGE_ENV_VAR} is not set: call lmcache_device_kit.backend.use("
            "'<your import package>') in tests/conftest.py, or set the variable"
        )
    return Backend.of(package)
