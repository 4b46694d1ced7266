# SPDX-License-Identifier: Apache-2.0
"""LMCache's per-device tests (``tests/v1/platform/devices/{cuda,npu,musa}/`` of its
sdist), ported to a plugin: base classes a project subclasses.

Why it exists: LMCache tests its built-in CUDA, NPU and MUSA backends' behaviour (IPC
wrapper, cache context, ordering, event IPC, ``tensor_from_ptr``, pointer transfer,
pinning) with tests written against those backends; each module here holds one such
file's scenarios and assertions as a ``Base...Tests`` class, run against the backend
under test. ``README.md`` beside this module (package data) lists every departure
from the originals and what was not ported, with the reasons; each module's
docstring repeats its own. A project subclasses every class in its
``tests/test_lmcache_ports.py``, which the kit's contract runner runs as its
``devices`` suite (``python -m lmcache_device_kit.contract --suite devices``),
counted apart and followed by the departures.

Must not import lmcache, torch or the plugin at import time. The port modules import
torch and lmcache: import them from a project's test module only, after its
``conftest.py`` set the environment LMCache reads at ``import lmcache``.
"""

# Standard
from importlib import resources

#: This package's README: the departures and what was not ported.
README = "README.md"


def departures() -> str:
    """The README's departures and not-ported tables (the contract runner prints
    them after a ``devices`` run)."""
    text = resources.files(__name__).joinpath(README).read_text(encoding="utf-8")
    return text.partition("## Departures")[2]
