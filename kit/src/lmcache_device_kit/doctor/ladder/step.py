# SPDX-License-Identifier: Apache-2.0
"""A rung of the porting ladder (``ladder``): its data, nothing else.

Imports only the standard library (the template's tests load the ladder by path).
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One rung: what to port, where, with which call, proven by what."""

    key: str
    title: str
    sites: tuple[str, ...]
    #: The runtime call it needs; ``{torch}`` is ``torch.<device>``.
    call: str
    #: The conformance classes that prove it (the render's ``tests/``).
    tests: str
    #: The doctor check that proves it (``doctor --port``).
    check: str
    #: The plugin module a step needs to apply ('' for every plugin).
    needs: str = ""
    sample: tuple[tuple[str, str], ...] = ()
