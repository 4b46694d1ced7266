# SPDX-License-Identifier: Apache-2.0
"""The kit's checks the template runs on renders, imported from the kit's source tree (kit/src).

Why: a check a vendor's project runs (``python -m lmcache_device_kit.wheel_check`` in its ``nox -s build``) is
defined once, in the kit; the template's sessions and tests call the same function on every render's wheel
without installing the kit first. Only modules that import the standard library and ``packaging`` are taken
from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

KIT_SOURCE = Path(__file__).resolve().parent.parent / "kit" / "src"
if str(KIT_SOURCE) not in sys.path:
    sys.path.insert(0, str(KIT_SOURCE))

from lmcache_device_kit.wheel_check import plugin_wheel_problems, read_wheel  # noqa: E402

__all__ = ["KIT_SOURCE", "plugin_wheel_problems", "read_wheel"]
