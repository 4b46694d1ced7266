# SPDX-License-Identifier: Apache-2.0
"""What every conformance class shares: the capabilities it needs from a backend.

Why it exists: a backend made from the template has some parts and not others
(LMCache-driven transfer, native ops, a wheel of its own or a place in LMCache's
tree, the CPU emulator of its device). A class declares the parts its tests need in
``requires``, once, instead of each test skipping itself; the kit's pytest plugin
reads it.

Must not import lmcache, torch or the plugin.
"""

# Future
from __future__ import annotations

# Standard
from typing import ClassVar

# First Party
from lmcache_device_kit import backend as kit_backend

#: The capabilities a class may require, with why a backend without it skips the class.
CAPABILITIES = {
    "device": "no <DEVICE> device here: install <EXTENSION> on a host with the device "
    "(or test on the CPU emulator)",
    "extends_builtin": "a backend of its own device type: it extends no LMCache "
    "built-in",
    "emulator": "needs the CPU emulator (its test facilities: held streams, injected "
    "faults, mapping counts); run with <EMULATOR_ENV_VAR>=1",
    "in_tree": "a plugin wheel: LMCache finds it through its entry point, not by "
    "scanning its own tree (lmcache.v1.platform.devices)",
    "own_ops": "the ops are those of the LMCache built-in this backend extends, which "
    "LMCache's own tests cover",
    "lmcache_driven": "the spec does not offer LMCache-driven transfer (engine-driven "
    "only)",
    "native_ops": "no native ops here: the package ships no native ops module "
    "(rendered with native_ops=no), or its switch (device_ops.NATIVE_ENV_VAR=0) keeps "
    "LMCache's torch baseline",
    "wheel": "an in-tree backend: no wheel, entry point or doctor of its own",
}

#: "device", for a backend that extends a built-in: its device type is the built-in's,
#: so a device there may be another vendor's.
EXTENSION_DEVICE = (
    "no <DEVICE> device of <BACKEND>'s runtime here (its detect.runtime_present()): "
    "run on one, or on LMCache's <EXTENDS> runtime with detect.STAND_IN_ENV_VAR=1"
)


class ConformanceTests:
    """Base of every conformance class: subclass it as ``Test<Name>`` in a project's
    ``tests/test_conformance.py``.

    ``requires``: the capabilities (``CAPABILITIES``) every test of the class needs; a
    backend without one skips the class, with the reason. ``starts_servers``: its tests
    start ``lmcache server`` processes (the plugin marks them ``servers``, so
    ``-m "not servers"`` runs the quick part of a suite).
    """

    requires: ClassVar[frozenset[str]] = frozenset()
    starts_servers: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.requires) - set(CAPABILITIES)
        if unknown:
            raise TypeError(
                f"{cls.__name__}.requires names unknown capabilities "
                f"{sorted(unknown)}: "
                f"choose from {sorted(CAPABILITIES)} (lmcache_device_kit/conformance/"
                "base.py)"
            )


def missing_reason(missing: set[str]) -> str:
    """Why the backend under test skips what needs ``missing`` capabilities."""
    backend = kit_backend.current()
    texts = dict(CAPABILITIES)
    if backend.extends:
        texts["device"] = EXTENSION_DEVICE
    return "; ".join(
        texts[name]
        .replace("<BACKEND>", backend.backend_name)
        .replace("<EXTENDS>", backend.extends)
        .replace("<EMULATOR_ENV_VAR>", backend.emulator_env_var or "the emulator's")
        .replace("<DEVICE>", backend.device_type)
        .replace(
            "<EXTENSION>",
            backend.torch_extension_module
            or f"torch with {backend.device_type} support",
        )
        for name in sorted(missing)
    )
