# SPDX-License-Identifier: Apache-2.0
"""lmcache-device-kit: what every LMCache device-backend plugin made with
lmcache-device-template shares, versioned apart from the code a vendor owns.

Why a distribution of its own: a rendered project holds the vendor's backend and
little else; the test harness (servers, workers, the scheduler, the launcher) and
the checks around a backend come from here, at the version the project pins, so a
template release reaches a project as a pin bump instead of a merge into files
nobody there wrote.

The kit is generic over one input, the backend's names (``backend.py``): it never
imports the plugin to learn them. Importing the kit imports neither lmcache nor
torch and changes nothing.
"""

# Standard
from importlib import metadata

try:
    __version__ = metadata.version("lmcache-device-kit")
except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
