# SPDX-License-Identifier: Apache-2.0
"""LMCache's built-in backends, for a plugin that extends one.

Why it exists: a vendor whose runtime presents itself to torch as a device type
LMCache already has (a CUDA look-alike: ``tensor.device.type == "cuda"``) registers
a backend of its own on that device type, beside the built-in, as LMCache's own
``rocm`` shares ``cuda``. Its spec subclasses the built-in's and overrides what
differs. Where a release keeps the built-in is data (``surface.BUILTIN_PACKAGES``);
this module finds it.

Must not import anything from LMCache at top level. ``builtin_spec`` imports the
built-in's package, which LMCache's registry has imported already when it loads a
plugin (built-ins are scanned first, inside ``import lmcache``).
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Local
from .resolve import resolve
from .surface import BUILTIN_PACKAGES


def builtin_spec_class_name(backend: str) -> str:
    """``cuda`` -> ``CudaDeviceSpec``: how LMCache names its built-in specs."""
    return backend.capitalize() + "DeviceSpec"


def builtin_spec(backend: str) -> Any:
    """The ``DeviceSpec`` class of LMCache's built-in ``backend`` (``cuda``:
    ``CudaDeviceSpec``), where the installed release keeps it; ImportError naming the
    table to extend if no known location has it."""
    name = builtin_spec_class_name(backend)
    return resolve(
        tuple(
            (f"{package}.{backend}", name, first, last)
            for package, _, first, last in BUILTIN_PACKAGES
        ),
        declared_in=f"BUILTIN_PACKAGES in {__package__}.surface",
    )
