# SPDX-License-Identifier: Apache-2.0
"""The kit's checks the template runs on renders, imported from the kit's source tree (kit/src).

Why: a check a vendor's project runs (``python -m lmcache_device_kit.wheel_check`` in its ``nox -s build``) is
defined once, in the kit; the template's sessions and tests call the same function on every render's wheel
without installing the kit first. So is the order a test environment is installed in, with the lmcache command
line's undeclared dependencies per release (``python -m lmcache_device_kit.install``, which the rendered
noxfile's sessions follow), and the kit's version and test extra, read from its pyproject.toml. Only modules that import the standard library and ``packaging`` are taken from here.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent / "kit"
KIT_SOURCE = KIT / "src"
if str(KIT_SOURCE) not in sys.path:
    sys.path.insert(0, str(KIT_SOURCE))

from lmcache_device_kit.install import CLI_EXTRAS, environment_steps, plugin_steps  # noqa: E402
from lmcache_device_kit.wheel_check import (  # noqa: E402
    KIT as KIT_DISTRIBUTION,
    compatible_range,
    plugin_wheel_problems,
    read_wheel,
)


def kit_version(root: Path = KIT) -> str:
    """The kit's version: the one its pyproject.toml declares, which a render pins."""
    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def kit_test_requirements(root: Path = KIT, extra: str = "test") -> list[str]:
    """The kit's test extra (pytest, pytest-xdist): what every suite here runs under, pinned once there (a
    render takes it as ``lmcache-device-kit[test]``); ``extra="cluster"``: the real Redis the cluster tests run."""
    return list(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra])


__all__ = [
    "CLI_EXTRAS", "KIT", "KIT_DISTRIBUTION", "KIT_SOURCE", "compatible_range", "environment_steps",
    "kit_test_requirements", "kit_version", "plugin_steps", "plugin_wheel_problems", "read_wheel",
]  # fmt: skip
