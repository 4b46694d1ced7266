# SPDX-License-Identifier: Apache-2.0
"""A plugin wheel's release check: it loads only on the LMCache releases it was
tested with.

Why a module of its own: only a wheel needs it (an in-tree backend ships with its
LMCache, and its copy of the shims leaves this out); the plugin's binding module
calls it with the plugin's own facts, from the spec module, when LMCache loads the
plugin.

Must not import LMCache at top level (it runs inside ``import lmcache``).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
import logging
import os

# Local
from .resolve import installed_lmcache_version


def check_release(
    project: str, tested: Sequence[str], supported: str, allow_env_var: str
) -> None:
    """Refuse to load ``project`` on an LMCache release it was not ``tested`` with.

    Failure policy: loud. Raising here (the plugin's spec module calls it when
    LMCache loads the plugin) makes LMCache log "Failed to load LMCache device
    plugin ... <this message>" and skip the plugin, instead of running code written
    against another interface and failing later mid-transfer. ``allow_env_var=1``
    loads it anyway, with a warning: for the canary (``nox -s canary``) and
    ``doctor --api``, never for serving.
    """
    version = installed_lmcache_version()
    if version in tested:
        return
    if os.environ.get(allow_env_var) == "1":
        logging.getLogger(__name__).warning(
            "lmcache %s is untested with %s; loading it because %s=1",
            version,
            project,
            allow_env_var,
        )
        return
    raise RuntimeError(
        f"{project} supports {supported} (tested: {', '.join(tested)}), but lmcache "
        f"{version} is installed. Install a supported release (pip install "
        f"'{supported}'), or try the new release: doctor --api names what moved in "
        "LMCache, nox -s canary runs the tests on it (README.md, 'Supporting a new "
        "LMCache release')."
    )
