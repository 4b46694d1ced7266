# SPDX-License-Identifier: Apache-2.0
"""The CPU emulator holds exactly the calls LMCache and the plugin make on its
device module (the kit's ``runtime_calls``), and its named extras.

Why: the emulator stands in for a vendor's runtime, so a call it has that nothing
on the list makes would let the plugin pass on something no vendor was told to
give, and a listed call it lacks would leave it unproven. Whether each call is
made at all is the template's recorded run (``python -m
lmcache_device_kit.runtime_calls``); whether each works on a device, the doctor's
"runtime calls" check.

Must not import lmcache, torch or the plugin at import time.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.runtime_calls import CALLS, EMULATOR_ONLY


class BaseRuntimeCallsTests(ConformanceTests):
    """The emulator's device module against the list."""

    requires = frozenset({"emulator"})

    def test_the_emulator_has_exactly_the_listed_calls_and_its_named_extras(
        self, emulator: Any
    ) -> None:
        members = {name for name in vars(emulator) if not name.startswith("__")}
        listed = {call.member for call in CALLS if call.member}
        required = {call.member for call in CALLS if call.member and not call.optional}
        unlisted = members - listed - set(EMULATOR_ONLY)
        assert not unlisted, (
            f"the emulator's torch.{emulator.__name__.split('.')[-1]} has "
            f"{sorted(unlisted)}, which neither LMCache nor the plugin calls: add "
            "each to lmcache_device_kit/runtime_calls.py (CALLS if they call it, "
            "else EMULATOR_ONLY with why), or remove it from the emulator"
        )
        assert required <= members, (
            f"the emulator lacks {sorted(required - members)}, which LMCache or the "
            "plugin calls (lmcache_device_kit/runtime_calls.py): give the emulator "
            "each (its _device.py members)"
        )
