# SPDX-License-Identifier: Apache-2.0
"""What LMCache and a plugin made from the template call on ``torch.<device>``: the
list a vendor's PyTorch backend is held to, written once, as data.

Each ``Call`` names the call as the CPU emulator records it (``Event.ipc_handle``,
``get_device_properties().uuid``), who makes it, what a vendor's runtime must give
and how LMCache's reference backends (cuda, npu, musa) differ. ``kind``:
``backend``, a PyTorch device backend's own (torch.cuda has it); ``sample``, the
sample's call to the emulator's runtime at a ``TODO(vendor)``, which the vendor
replaces with their runtime's. An ``optional`` call is made only where present.

Held to it: the rendered README's list is rendered from ``CALLS`` (the template's
``hooks/runtime_calls.py`` loads this file unimported at render time, so it imports
only the standard library); the emulator's device module has exactly these members
plus ``EMULATOR_ONLY`` (the kit's conformance); the doctor checks each on the device
(``runtime_probe``); ``python -m lmcache_device_kit.runtime_calls DIR`` fails on a
call LMCache or the plugin made in a recorded run (the emulator's ``_RECORD``
variable) that is not here, naming it.
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass
from pathlib import Path
import json
import sys

#: What ``Call.when`` may name: the part of a plugin that needs the call.
LMCACHE_DRIVEN, NATIVE_OPS = "lmcache_driven", "native_ops"
#: The pinned host allocator: no attribute of the module, so never recorded.
PINNED_ALLOCATOR = "torch.empty(..., pin_memory=True)"


@dataclass(frozen=True)
class Call:
    name: str
    by: tuple[str, ...]  # "lmcache", "plugin": whose calls the record may show
    where: str  # who calls it, for a reader
    gives: str  # what a vendor's runtime must give
    reference: str = ""  # how LMCache's cuda/npu/musa backends give it or do without
    kind: str = "backend"  # "backend", "sample"
    optional: bool = False  # called only where present
    when: str = ""  # "": every plugin; else LMCACHE_DRIVEN or NATIVE_OPS

    @property
    def member(self) -> str:
        """The device module's attribute the call reaches first ("" for none)."""
        if self.name == PINNED_ALLOCATOR:
            return ""
        return self.name.split("(")[0].split(".")[0]


L, P, LP = ("lmcache",), ("plugin",), ("lmcache", "plugin")
CALLS = (
    Call("is_available", LP, "LMCache's detection and allocators; `device.py`",
         "whether a device is usable"),
    Call("device_count", L, "LMCache's base IPC wrapper", "the number of devices"),
    Call("current_device", LP, "LMCache's futures and allocators; `runtime.py`",
         "the calling thread's device index"),
    Call("set_device", LP, "LMCache's connectors; `runtime.py`",
         "make a device current on the calling thread (binds its context)",
         "npu: `aclrtSetDevice`, per thread"),
    Call("device", LP, "LMCache-driven transfer; `cache_context.py`",
         "`with device(i):` makes `i` current in the block", when=LMCACHE_DRIVEN),
    Call("synchronize", LP, "LMCache's memory management; `_host_access.py`",
         "wait for every stream of a device"),
    Call("empty_cache", L, "LMCache-driven transfer, after unmapping a worker",
         "release cached device memory", when=LMCACHE_DRIVEN),
    Call("Stream", LP, "LMCache's transfer contexts; `cache_context.py`",
         "`Stream(device=...)`: a new stream"),
    Call("Stream.synchronize", P, "`cache_context.py`",
         "wait for a stream's queued work", when=LMCACHE_DRIVEN),
    Call("Stream.stream_id", P, "`device.py` (`get_stream_handle`)",
         "an integer identity of the stream"),
    Call("Stream.query", P, "`event_ipc.py` (`wait_event`)",
         "whether a stream has run all its queued work", when=LMCACHE_DRIVEN),
    Call("current_stream", LP, "LMCache's transfer contexts; `native_ops.py`",
         "the current stream of a device"),
    Call("stream", L, "LMCache's transfer contexts",
         "`with stream(s):` makes `s` current in the block"),
    Call("Event", L, "LMCache's transfer contexts and event IPC", "`Event()`"),
    Call("Event.record", L, "LMCache", "record on a stream (default: current)"),
    Call("Event.wait", L, "LMCache", "make a stream wait for the event"),
    Call("Event.synchronize", L, "LMCache", "block the host until it completes"),
    Call("Event.query", L, "LMCache's event IPC", "whether it completed"),
    Call("Event(interprocess=True)", L, "LMCache's event IPC (base `event_ipc`)",
         "an event other processes can wait on (`cudaEventInterprocess`)",
         "cuda, musa; npu: its own event IPC backend", when=LMCACHE_DRIVEN),
    Call("Event.ipc_handle", L, "LMCache's event IPC", "the event's IPC handle, bytes",
         when=LMCACHE_DRIVEN),
    Call("Event.from_ipc_handle", L, "LMCache's event IPC",
         "`Event.from_ipc_handle(device, handle)`: the exporter's event",
         when=LMCACHE_DRIVEN),
    Call("get_device_properties", L, "LMCache's base IPC wrapper",
         "`get_device_properties(i)`", when=LMCACHE_DRIVEN),
    Call("get_device_properties().uuid", L, "LMCache's base IPC wrapper",
         "a device identity every process sees the same (maps a handle's device)",
         "musa: `pci_bus_id` where its torch has no `uuid`", when=LMCACHE_DRIVEN),
    Call(PINNED_ALLOCATOR, LP, "LMCache's staging buffers; `_native_plan.py`",
         "a pinned host allocator (torch's PrivateUse1 hooks: "
         "`getPinnedMemoryAllocator`, `isPinnedPtr`)"),
    Call("init", L, "`lmcache server` at start", "initialize the runtime",
         optional=True),
    Call("ipc_collect", L, "LMCache-driven transfer, after unmapping a worker",
         "unmap IPC memory no tensor uses any more", "cuda",
         optional=True, when=LMCACHE_DRIVEN),
    Call("_lazy_init", LP, "torch, before a first device tensor",
         "initialize the runtime lazily", optional=True),
    Call("stream_handle", P, "`device.py`, `cache_context.py`, `native_ops.py`",
         "a stream's native pointer", "cuda: `stream.cuda_stream`", kind="sample"),
    Call("synchronize_stream_handle", P, "`runtime.py`",
         "synchronize a stream by its native handle",
         "npu: `aclrtSynchronizeStream`", kind="sample", when=LMCACHE_DRIVEN),
    Call("host_func_launcher", P, "`runtime.py`",
         "a host-function launch (else streams are synchronized)",
         "cuda: `cudaLaunchHostFunc`", kind="sample", optional=True,
         when=LMCACHE_DRIVEN),
    Call("report_subscriber", P, "`runtime.py`",
         "subscribe a host thread to a stream's callbacks (the model `subscribed`)",
         "npu: `aclrtSubscribeReport`", kind="sample", optional=True,
         when=LMCACHE_DRIVEN),
    Call("report_processor", P, "`runtime.py`",
         "run the callbacks of the streams the calling thread subscribed to",
         "npu: `aclrtProcessReport`", kind="sample", optional=True,
         when=LMCACHE_DRIVEN),
    Call("kernel_launcher", P, "`native_ops.py`",
         "your kernels' launch, with a bounded parameter block",
         "cuda: `cudaLaunchKernel`", kind="sample", when=NATIVE_OPS),
    Call("memcpy_async_launcher", P, "`native_ops.py`",
         "an async copy by the copy engine, in stream order",
         "cuda: `cudaMemcpyAsync`; npu: `aclrtMemcpyAsync`", kind="sample",
         when=NATIVE_OPS),
    Call("kernel_address_translator", P, "`native_ops.py`",
         "none on a device (the emulator's kernels reach device memory through it)",
         kind="sample", when=NATIVE_OPS),
    Call("pointer_device", P, "`device_ops.py`, `native_ops.py`",
         "the device owning an address", "cuda: `cudaPointerGetAttributes`",
         kind="sample"),
    Call("ipc_export_handle", P, "`ipc_wrapper.py`", "export device memory",
         "cuda: `cudaIpcGetMemHandle`", kind="sample", when=LMCACHE_DRIVEN),
    Call("ipc_open_handle", P, "`ipc_wrapper.py`", "map exported memory",
         "cuda: `cudaIpcOpenMemHandle`", kind="sample", when=LMCACHE_DRIVEN),
    Call("ipc_close_handle", P, "`ipc_wrapper.py`", "unmap it",
         "cuda: `cudaIpcCloseMemHandle`", kind="sample", when=LMCACHE_DRIVEN),
    Call("ipc_allow_importer", P, "`runtime.py`",
         "let a process open an exported handle (where the runtime requires it)",
         "npu: `aclrtIpcMemSetImportPid`; cuda: none", kind="sample",
         optional=True, when=LMCACHE_DRIVEN),
    Call("ipc_memory_is_vmm", P, "`runtime.py`",
         "whether an allocation came from a VMM allocator (no legacy IPC export)",
         "cuda: `cuMemRetainAllocationHandle`", kind="sample", when=LMCACHE_DRIVEN),
    Call("ipc_export_fd", P, "`runtime.py`", "a file descriptor of VMM memory",
         "cuda: `cuMemExportToShareableHandle`", kind="sample", optional=True,
         when=LMCACHE_DRIVEN),
    Call("ipc_open_fd", P, "`runtime.py`", "map VMM memory by its descriptor",
         "cuda: `cuMemImportFromShareableHandle`, `cuMemMap`", kind="sample",
         optional=True, when=LMCACHE_DRIVEN),
    Call("host_register", P, "`pin_memory.py`", "pin a host range",
         "cuda: `cudaHostRegister`; npu: `aclrtHostRegister`", kind="sample",
         when=LMCACHE_DRIVEN),
    Call("host_unregister", P, "`pin_memory.py`", "unpin it",
         "cuda: `cudaHostUnregister`", kind="sample", when=LMCACHE_DRIVEN),
    Call("host_is_pinned", P, "`pin_memory.py`", "whether a host range is pinned",
         "cuda: `cudaPointerGetAttributes`", kind="sample", when=LMCACHE_DRIVEN),
    Call("host_device_pointer", P, "`_host_access.py`",
         "the device address of pinned host memory",
         "npu: `aclrtHostRegister`'s; cuda: the host address", kind="sample",
         when=NATIVE_OPS),
    Call("host_memory_mapped_at_same_address", P, "`_host_access.py`",
         "whether that address is the host's", kind="sample", when=NATIVE_OPS),
    Call("is_emulator", P, "`pin_memory.py`",
         "none: whether the device's copies read registered host memory",
         kind="sample", when=LMCACHE_DRIVEN),
)  # fmt: skip
#: The emulator's other members, which neither LMCache nor the plugin calls: the
#: kit's test facilities, and torch's own calls (``torch.manual_seed``, forks).
EMULATOR_ONLY = (
    "counters", "hold_stream", "inject_faults", "ipc_mappings", "is_initialized",
    "manual_seed", "manual_seed_all", "_is_in_bad_fork",
)  # fmt: skip


def for_plugin(lmcache_driven: bool, native_ops: bool) -> list[Call]:
    """The calls a plugin with (or without) those parts makes."""
    parts = {"": True, LMCACHE_DRIVEN: lmcache_driven, NATIVE_OPS: native_ops}
    return [call for call in CALLS if parts[call.when]]


def group(caller: str, package: str) -> str:
    """``lmcache``, ``plugin`` or ``other`` (the kit, tests, torch) for a module."""
    if caller == package or caller.startswith(f"{package}."):
        return "plugin"
    return "lmcache" if caller.split(".")[0] == "lmcache" else "other"


def recorded(directory: Path) -> list[dict]:
    """Every line of the emulator's record in ``directory``."""
    return [
        json.loads(line)
        for path in sorted(directory.glob("calls-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def unlisted(records: list[dict], package: str) -> list[str]:
    """The calls LMCache or the plugin ``package`` made that ``CALLS`` does not hold
    for that caller, each with the modules that made it and the fix."""
    listed = {call.name: call for call in CALLS}
    found: dict[tuple[str, str], set[str]] = {}
    for record in records:
        who = group(record["caller"], package)
        call = listed.get(record["call"])
        if who != "other" and (call is None or who not in call.by):
            found.setdefault((record["call"], who), set()).add(record["caller"])
    return [
        f"{name}: called by {who} ({', '.join(sorted(callers))}) but "
        + (f"listed only for {listed[name].by}" if name in listed else "not listed")
        + ": add it to lmcache_device_kit/runtime_calls.py CALLS (and to the "
        "emulator, if it lacks it)"
        for (name, who), callers in sorted(found.items())
    ]


def main(argv: list[str]) -> int:
    """``python -m lmcache_device_kit.runtime_calls DIR PACKAGE``: 1 and the calls
    if a recorded run made one the list lacks."""
    directory, package = Path(argv[0]), argv[1]
    records = recorded(directory)
    if not records:
        print(f"no record in {directory}: was the emulator's _RECORD variable set?")
        return 1
    problems = unlisted(records, package)
    made = {r["call"] for r in records if group(r["caller"], package) != "other"}
    idle = [call.name for call in CALLS if call.member and call.name not in made]
    print(
        f"runtime calls: {len(made)} distinct calls by LMCache and {package} in "
        f"{len(records)} records; listed but not made in this run: "
        f"{', '.join(idle) or 'none'}"
    )
    print("\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
