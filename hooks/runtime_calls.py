# SPDX-License-Identifier: Apache-2.0
"""Give the template's files ``runtime_calls(lmcache_driven, native_ops)``: the calls on ``torch.<device>`` a
render's plugin and LMCache make, from the kit's one list (``kit/src/lmcache_device_kit/runtime_calls.py``).

Why: the rendered README lists what a vendor's PyTorch backend must give; the emulator, the doctor and a recorded
run of the suite are held to the kit's list, so the README renders it from there instead of keeping a copy. The
kit is not installed where cookiecutter renders: this Jinja extension (listed in ``_extensions``) loads that file,
which imports only the standard library, by its path beside the template.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from jinja2 import Environment
from jinja2.ext import Extension

KIT_RUNTIME_CALLS = Path(__file__).resolve().parent.parent / "kit" / "src" / "lmcache_device_kit" / "runtime_calls.py"
MODULE = "_template_kit_runtime_calls"


def kit_runtime_calls(path: Path = KIT_RUNTIME_CALLS) -> ModuleType:
    """The kit's ``runtime_calls`` module, loaded from ``path`` (not imported: the kit is not installed here)."""
    if MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(MODULE, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE] = module  # dataclasses looks its module up
        spec.loader.exec_module(module)
    return sys.modules[MODULE]


class RuntimeCalls(Extension):
    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["runtime_calls"] = kit_runtime_calls().for_plugin
