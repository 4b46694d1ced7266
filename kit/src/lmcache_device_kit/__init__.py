# SPDX-License-Identifier: Apache-2.0
"""lmcache-device-kit: what every LMCache device-backend plugin made with
lmcache-device-template shares, versioned apart from the code a vendor owns.

Why a distribution of its own: a rendered project holds the vendor's backend and
little else; LMCache's release shims it runs on (``compat``, which its wheel requires
in a compatible range), the test harness (servers, workers, the scheduler, the
launcher) and the checks around a backend come from here, so a template release
reaches a project as a pin bump instead of a merge into files nobody there wrote.

The kit is generic over one input, the backend's names (``backend.py``; the shims:
the names a plugin's binding passes them): it never imports the plugin to learn
them. Importing the kit imports neither lmcache nor torch and changes nothing (its
``compat`` package imports LMCache: a plugin's binding imports it while LMCache loads
the plugin).
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata


def __getattr__(name: str) -> str:
    """``__version__``, read on first use: a plugin imports the shims, and so this
    package, inside every process's ``import lmcache``, where reading the installed
    distributions' metadata would cost milliseconds each time."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return metadata.version("lmcache-device-kit")
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "0+unknown"
