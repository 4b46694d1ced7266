# SPDX-License-Identifier: Apache-2.0
"""The pytest plugin the contract runner gives each pass over LMCache's tests
(``-p lmcache_device_kit.contract.pytest_plugin``).

It applies the not-applicable entries (skips with their reasons, files never
collected), selects each pass's tests, and refuses a run that would not reach the
plugin under test. Its settings come from the environment the runner gives each pass
(``SETTINGS_ENV_VAR``), its backend from ``lmcache_device_kit.backend.current()``.

Why a plugin module of the kit, not a conftest copied beside LMCache's tests: the
scratch tree then holds LMCache's files only, and this code is installed, linted,
typed and tested with the rest of the kit, at the version the project pins.

Imports LMCache only when the session starts (never at import), and never the
plugin under test: it asks LMCache which ops it loaded.
"""

# Future
from __future__ import annotations

# Standard
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any
import functools
import json
import os
import sys

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.contract.not_applicable import SKIP_MARK

#: JSON: ``skip`` and ``device_type_only`` (test -> reason), ``not_collected`` (paths
#: relative to the scratch tree) and ``pass`` (``backend`` or ``device_type``).
SETTINGS_ENV_VAR = "LMCACHE_CONTRACT_SETTINGS"


@functools.cache
def settings() -> dict[str, Any]:
    return dict(json.loads(os.environ[SETTINGS_ENV_VAR]))


def pytest_ignore_collect(collection_path: Any, config: Any) -> bool | None:
    relative = collection_path.relative_to(config.rootpath).as_posix()
    return True if relative in settings()["not_collected"] else None


def emulator(backend: kit_backend.Backend) -> ModuleType | None:
    """The backend's CPU emulator, if torch loaded it: the ``torch.backends`` entry
    point whose module answers to the backend's emulator variable."""
    if not backend.has_emulator:
        return None
    for entry in entry_points(group="torch.backends"):
        module = sys.modules.get(entry.module)
        if getattr(module, "ENV_VAR", None) == backend.emulator_env_var:
            return module
    return None


def pytest_sessionstart(session: Any) -> None:
    # First Party
    import lmcache

    backend = kit_backend.current()
    module = type(lmcache.device_ops).__module__
    if not module.startswith(backend.package + "."):
        pytest.exit(
            f"lmcache.device_ops is {module}, not {backend.package}'s: "
            "the run would prove nothing",
            3,
        )
    loaded = emulator(backend)
    # LMCache's tests that move HOME start servers that reuse the compiled emulator
    if loaded is not None:
        os.environ.setdefault(loaded.CACHE_ENV_VAR, str(loaded.cache_root()))


def listed(nodeid: str, tests: dict[str, str]) -> str | None:
    """The reason ``tests`` gives for the test ``nodeid`` (keys: node id prefixes)."""
    return next((r for test, r in tests.items() if nodeid.startswith(test)), None)


def this_pass(nodeids: list[str], moved: dict[str, str], only_moved: bool) -> set[str]:
    """The tests a pass runs: the ``device_type_only`` ones in that pass, the rest in
    the other."""
    return {n for n in nodeids if (listed(n, moved) is not None) == only_moved}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    skips, moved = settings()["skip"], settings()["device_type_only"]
    only_moved = settings()["pass"] == "device_type"
    for test in {**skips, **moved} if not only_moved else {}:
        if not any(item.nodeid.startswith(test) for item in items):
            print(f"{SKIP_MARK} lists {test}, which this release does not have")
    keep = this_pass([item.nodeid for item in items], moved, only_moved)
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in keep])
    items[:] = [item for item in items if item.nodeid in keep]
    for item in items:
        if reason := listed(item.nodeid, skips):
            item.add_marker(pytest.mark.skip(reason=f"{SKIP_MARK}: {reason}"))
