# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.vendor }}
"""How this backend knows your runtime is here, on a device type LMCache's
{{ cookiecutter.__extends }} backend has too.

Why a module of its own: your tensors report ``{{ cookiecutter.device_name }}``, as the built-in's
do, so ``torch.{{ cookiecutter.__torch_module_name }}.is_available()`` cannot tell the two apart. The spec's
``is_available()``, the doctor and the conformance suite ask this module, which the
kit's harness reads by path, before ``import lmcache`` (it picks the backend).

Must import nothing at top level: not LMCache, not torch, not this package.
"""

# Future
from __future__ import annotations

# Standard
import os

#: The documented test switch: ``1`` makes ``runtime_present()`` true on a host
#: whose ``torch.{{ cookiecutter.__torch_module_name }}`` is another vendor's (an NVIDIA GPU stands in
#: for a CUDA look-alike), so the device tests run there. Never set it to serve.
STAND_IN_ENV_VAR = "{{ cookiecutter.__stand_in_env_var }}"


def runtime_present() -> bool:
    """Whether this host's ``torch.{{ cookiecutter.__torch_module_name }}`` is your runtime's: cheap, no
    device initialised, never raises.

    TODO(vendor): recognise your runtime without touching a device, as LMCache's
    rocm backend reads ``torch.version.hip``: your torch build's version field, a
    module only your stack ships, or your driver library, for example
    ``return getattr(torch.version, "<yours>", None) is not None`` in place of the
    last line (import torch here, inside the function). Keep the switch above it.
    """
    if os.environ.get(STAND_IN_ENV_VAR) == "1":
        return True  # the documented test switch: the built-in's device stands in
    return False
