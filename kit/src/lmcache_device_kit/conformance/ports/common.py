# SPDX-License-Identifier: Apache-2.0
"""What the ports of LMCache's per-device tests share: their base class (what they
require), the backend's names, the plugin's own classes, a runtime as torch_npu is.

Why a module of its own: fourteen port modules use these; each ported test reads the
backend under test here (``lmcache_device_kit.backend.current()``), never a name the
project was rendered with.

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any, ClassVar
import importlib

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests


def device_type() -> str:
    """The backend's device type (``torch.device(device_type())``)."""
    return kit_backend.current().device_type


def runtime_name() -> str:
    """The name of the backend's runtime module under torch (``torch.<name>``)."""
    return kit_backend.current().torch_module_name


def package() -> str:
    """The plugin's import package."""
    return kit_backend.current().package


def plugin_class(module: str, suffix: str) -> Any:
    """The plugin's class ``<Prefix><suffix>`` in its module ``module``, as LMCache's
    tests name a backend's own classes (``NpuPinMemoryBackend``): of the classes there
    named ``*<suffix>``, the one none of the others derives from (LMCache's base
    classes, such as ``PinMemoryBackend``, are imported there too). LMCache's loader
    may rename a plugin's modules (``__module__``), so that is not asked."""
    found = importlib.import_module(f"{package()}.{module}")
    named = [
        value
        for name, value in vars(found).items()
        if isinstance(value, type) and name.endswith(suffix)
    ]
    classes = [
        c for c in named if not any(o is not c and c in o.__mro__ for o in named)
    ]
    assert len(classes) == 1, (
        f"{found.__name__} should define one class named <Prefix>{suffix}; "
        f"its most derived ones are {[c.__name__ for c in classes]}"
    )
    return classes[0]


class PortTests(ConformanceTests):
    """Base of every port: the ported tests test the parts of LMCache-driven transfer
    (IPC wrapper, cache context, event IPC, pinning, pointer-mode ops), which a backend
    without it (engine-driven only) does not have."""

    requires: ClassVar[frozenset[str]] = frozenset({"lmcache_driven"})

    @pytest.fixture
    def without_host_functions(
        self, runtime: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The runtime as torch_npu is, for one test: no host-function launch (what
        the emulator's ``..._HOST_FUNCS=0`` mode removes), so the plugin synchronizes,
        then publishes, as LMCache's NPU backend does."""
        monkeypatch.delattr(runtime, "host_func_launcher", raising=False)
