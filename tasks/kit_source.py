# SPDX-License-Identifier: Apache-2.0
"""The kit's checks the template runs on renders, imported from the kit's source tree (kit/src).

Why: a check a vendor's project runs (``python -m lmcache_device_kit.wheel_check`` in its ``nox -s build``) is
defined once, in the kit; the template's sessions and tests call the same function on every render's wheel
without installing the kit first. So is the order a test environment is installed in, with the lmcache command
line's undeclared dependencies per release (``python -m lmcache_device_kit.install``, which the rendered
noxfile's sessions follow). Only modules that import the standard library and ``packaging`` are taken from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

KIT_SOURCE = Path(__file__).resolve().parent.parent / "kit" / "src"
if str(KIT_SOURCE) not in sys.path:
    sys.path.insert(0, str(KIT_SOURCE))

from lmcache_device_kit.install import CLI_EXTRAS, environment_steps, plugin_steps  # noqa: E402
from lmcache_device_kit.wheel_check import compatible_range, plugin_wheel_problems, read_wheel  # noqa: E402

__all__ = [
    "CLI_EXTRAS", "KIT_SOURCE", "compatible_range", "environment_steps", "plugin_steps", "plugin_wheel_problems",
    "read_wheel",
]  # fmt: skip
