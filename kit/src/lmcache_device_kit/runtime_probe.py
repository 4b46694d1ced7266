# SPDX-License-Identifier: Apache-2.0
"""Each call of ``runtime_calls`` tried on an installed ``torch.<device>``: present,
and, for those that take no argument, working.

Why a module of its own: ``runtime_calls`` is data the template reads at render
time (standard library only); this tries it on a device, for the doctor's "runtime
calls" check and the conformance test that holds the emulator to the list. Imports
torch inside ``problems`` only.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterable
from typing import Any

# Local
from .runtime_calls import PINNED_ALLOCATOR, Call

#: Calls tried without arguments on the current device (the object: its first part).
TRIED = frozenset(
    {
        "current_device",
        "device_count",
        "synchronize",
        "current_stream",
        "Stream.synchronize",
        "Event.record",
        "Event.synchronize",
        "Event.query",
        "Event.ipc_handle",
    }
)


def problems(module: Any, calls: Iterable[Call]) -> list[str]:
    """``name: what is wrong, and the fix`` for each backend call ``module`` lacks
    or that raises; optional calls and the sample's (``kind`` ``sample``) are not
    required."""
    found = []
    objects: dict[str, Any] = {}
    for call in calls:
        if call.kind != "backend" or call.optional:
            continue
        try:
            wrong = _try(module, call, objects)
        except Exception as exc:  # noqa: BLE001 - reported, with the call
            wrong = f"raised {type(exc).__name__}: {exc}"
        if wrong:
            found.append(
                f"{call.name}: {wrong}; LMCache or the plugin calls it "
                f"({call.where}): give {call.gives}"
                + (f" ({call.reference})" if call.reference else "")
            )
    return found


def _try(module: Any, call: Call, objects: dict[str, Any]) -> str:
    # Third Party
    import torch

    name = call.name
    if name == PINNED_ALLOCATOR:
        pinned = torch.empty(16, dtype=torch.uint8, pin_memory=True)
        return "" if pinned.is_pinned() else "the tensor is not pinned"
    if name == "Event(interprocess=True)":
        objects["ipc_event"] = module.Event(interprocess=True)
        return ""
    owner, _, attribute = name.partition(".")
    if owner.endswith("()"):  # get_device_properties().uuid
        target = module.get_device_properties(module.current_device())
        if hasattr(target, attribute):
            return ""
        other = " (it has pci_bus_id: MUSA's wrapper uses that)"
        return "absent" + (other if hasattr(target, "pci_bus_id") else "")
    if not attribute:
        if not hasattr(module, name):
            return "absent"
        if name in TRIED:
            getattr(module, name)()
        return ""
    target = _instance(module, owner, attribute, objects)
    if not hasattr(target, attribute):
        return "absent"
    if name in TRIED:
        getattr(target, attribute)()
    return ""


def _instance(module: Any, owner: str, attribute: str, objects: dict[str, Any]) -> Any:
    """What ``owner.attribute`` is asked of: the class for a class method, else an
    instance on the current device (an interprocess event for its IPC handle)."""
    cls = getattr(module, owner)
    if attribute == "from_ipc_handle":
        return cls
    if owner == "Stream":
        return module.current_stream()
    if attribute == "ipc_handle":
        event = objects.get("ipc_event") or cls(interprocess=True)
        event.record()
        return event
    return objects.setdefault("event", cls())
