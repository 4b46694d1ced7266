# SPDX-License-Identifier: Apache-2.0
"""The porting ladder: every ``TODO(vendor)`` of a plugin made from the template, in
the order to port them, each with the runtime call it needs and what proves it.

Why a package of its own, and data only: ``doctor --port`` (``port``) prints the
steps with their states, the rendered README's "Porting ladder" lists them, and
the template's tests hold the table and a render's ``TODO(vendor)`` markers to
them. It imports only the standard library (those tests load it by path, as a package).

A step's ``sites`` are where its markers are: ``file`` (the module, or a C++
file: its header comment), ``file:NAME`` (a function, class, property or
module-level constant; ``{prefix}`` is the plugin's class prefix), with the file
relative to the package (``tests/...``: the render's tests; ``setup.py``,
``pyproject.toml:[table]``: the project's). ``sample`` pairs a Python site with a
``torch.<device>`` call only the CPU emulator has, which the sample's code at that
site makes: while the installed site names it, the step holds the sample's code
(``port.holds_sample``); they are the ``sample`` calls of ``runtime_calls.CALLS``.
"""

# Future
from __future__ import annotations

# Local
from .builtin import BUILTIN_STEPS, DEVICE_NUMBERS
from .own_device import OWN_DEVICE_STEPS
from .step import Step

#: Every step, in the order to port them. A step applies to a plugin that has the
#: module it ``needs``: a backend of its own device type has ``device_ops``, one that
#: extends a built-in ``detect``; so each plugin climbs its own part of the ladder.
STEPS: tuple[Step, ...] = (*OWN_DEVICE_STEPS, *BUILTIN_STEPS, DEVICE_NUMBERS)

__all__ = ["STEPS", "Step"]
