# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Where the compiled emulator is kept: one directory per torch build and source hash.

A module of its own so that ``__init__.py`` (imported from inside ``import
torch``) and ``_device.py`` share it without importing each other. Imports only
the standard library.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import os

#: The directory holding the compiled emulator (default
#: ``$XDG_CACHE_HOME/lmcache-device-emulator``, else under ``~/.cache``; shared by
#: every emulator of this template, whatever its device name): tests that move HOME set
#: it to keep the build (LMCache's own tests do move it).
CACHE_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_CACHE"


def cache_root() -> Path:
    """Where compiled emulators are kept (see ``CACHE_ENV_VAR``)."""
    if os.environ.get(CACHE_ENV_VAR):
        return Path(os.environ[CACHE_ENV_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lmcache-device-emulator"
