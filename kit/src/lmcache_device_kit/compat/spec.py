# SPDX-License-Identifier: Apache-2.0
"""The LMCache-driven capability under both its spellings, and what worker-side
``auto`` means, on every supported release.

Why a module of its own: a plugin's spec class subclasses ``PortableDeviceSpec``
while LMCache loads it, inside ``import lmcache``, when the shims' package may still
be importing LMCache (see its docstring): the binding imports it from here.

Must not import, at top level, anything from LMCache but ``DeviceSpec``.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# First Party
# The one eager import: the base class LMCache's loader checks against.
from lmcache.v1.platform.base.device_spec import DeviceSpec

#: 0.5.6+: the spec decides what worker-side ``auto`` means (its
#: ``default_mp_transfer_mode``); before, LMCache-driven for CUDA only.
AUTO_FOLLOWS_SPEC = hasattr(DeviceSpec, "default_mp_transfer_mode")


class PortableDeviceSpec(DeviceSpec):
    """``DeviceSpec`` that answers the LMCache-driven question under both spellings.

    lmcache 0.5.4 and 0.5.5 ask ``is_handle_transfer_available()`` (default:
    True, which would route a device without IPC support into LMCache-driven
    mode); 0.5.6 asks ``is_lmcache_driven_available()`` (default: False).
    Subclasses override ``is_lmcache_driven_available`` only.
    """

    def is_lmcache_driven_available(self) -> bool:
        """Whether the server can map this device's KV caches (LMCache-driven mode)."""
        return False

    def is_handle_transfer_available(self) -> bool:
        """The 0.5.4/0.5.5 spelling of :meth:`is_lmcache_driven_available`."""
        return self.is_lmcache_driven_available()


def auto_transfer_mode(spec: Any) -> str:
    """What worker-side ``auto`` resolves to for ``spec`` on the installed LMCache.

    ``"lmcache_driven"`` or ``"engine_driven"``: from 0.5.6 on the spec's
    ``default_mp_transfer_mode()``; before, LMCache-driven only for CUDA.
    """
    if AUTO_FOLLOWS_SPEC:
        return str(spec.default_mp_transfer_mode().value)
    return "lmcache_driven" if spec.device_type == "cuda" else "engine_driven"
