# SPDX-License-Identifier: Apache-2.0
"""The list of calls on ``torch.<device>``: a recorded run is held to it, and a
device module is probed for it, each failure naming the call."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from types import SimpleNamespace
from typing import Any
import json

# Third Party
import pytest

# First Party
from lmcache_device_kit import runtime_calls, runtime_probe
from lmcache_device_kit.runtime_calls import CALLS, PINNED_ALLOCATOR


def write_record(directory: Path, *records: tuple[str, str]) -> Path:
    lines = [
        json.dumps({"call": call, "caller": who, "absent": False})
        for call, who in records
    ]
    (directory / "calls-1.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def test_a_recorded_call_lmcache_makes_that_the_list_lacks_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """So does a listed call made by a caller the list does not name; the kit's and
    the tests' own calls are not held to it."""
    record = write_record(
        tmp_path,
        ("get_device_properties().uuid", "lmcache.v1.platform.base.ipc_wrapper"),
        ("mem_get_info", "lmcache.v1.distributed.serde.turboquant.turboquant"),
        ("device_count", "lmcache_bar.device_ops"),
        ("hold_stream", "lmcache_device_kit.conformance.streams"),
        ("anything", "tests.test_x"),
    )
    assert runtime_calls.main([str(record), "lmcache_bar"]) == 1
    out = capsys.readouterr().out
    assert "mem_get_info: called by lmcache (lmcache.v1.distributed" in out
    assert "device_count: called by plugin (lmcache_bar.device_ops) but listed" in out
    assert "uuid" not in out.split("\n", 1)[1]
    assert "hold_stream" not in out and "anything" not in out


def test_a_record_of_listed_calls_passes(tmp_path: Path) -> None:
    record = write_record(tmp_path, ("Event.ipc_handle", "lmcache.v1.platform.x"))
    assert runtime_calls.main([str(record), "lmcache_bar"]) == 0


def test_an_engine_driven_plugin_is_not_asked_for_interprocess_events() -> None:
    engine = {call.name for call in runtime_calls.for_plugin(False, False)}
    both = {call.name for call in runtime_calls.for_plugin(True, True)}
    assert "Event(interprocess=True)" not in engine and "is_available" in engine
    assert both == {call.name for call in CALLS}


class Event:
    def __init__(self, interprocess: bool = False) -> None:
        self.interprocess = interprocess

    def record(self) -> None: ...
    def wait(self) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool:
        return True

    def ipc_handle(self) -> bytes:
        return b"handle"

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> Event:
        return cls(True)


def device_module(**without: bool) -> SimpleNamespace:
    stream = SimpleNamespace(synchronize=lambda: None, query=lambda: True, stream_id=1)
    members: dict[str, Any] = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda i: None,
        "device": lambda i: None,
        "synchronize": lambda: None,
        "empty_cache": lambda: None,
        "Stream": lambda device=None: stream,
        "current_stream": lambda: stream,
        "stream": lambda s: None,
        "Event": Event,
        "get_device_properties": lambda i: SimpleNamespace(pci_bus_id="0000:01"),
    }
    return SimpleNamespace(**{k: v for k, v in members.items() if k not in without})


def test_the_probe_names_each_backend_call_a_device_module_lacks() -> None:
    """A missing uuid says MUSA's fallback is there; optional and the sample's calls
    are not asked for."""
    found = runtime_probe.problems(device_module(device=True), CALLS)
    named = sorted(line.split(":")[0] for line in found)
    assert [n for n in named if n != PINNED_ALLOCATOR.split(":")[0]] == [
        "device",
        "get_device_properties().uuid",
    ]
    uuid = next(line for line in found if line.startswith("get_device_properties()"))
    assert "pci_bus_id: MUSA's wrapper uses that" in uuid
