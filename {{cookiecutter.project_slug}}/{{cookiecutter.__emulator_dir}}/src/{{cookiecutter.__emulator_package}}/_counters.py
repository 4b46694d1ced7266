# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""What the emulator does on behalf of this process, counted exactly: a test facility
(``torch.{{ cookiecutter.__torch_module_name }}.counters()``), no runtime's API.

Why it exists: timings on a CPU emulator say little about a device; what the plugin
*does* per request (bytes across the device boundary, launches, host
synchronizations) carries to hardware and is deterministic. ``csrc/counters.cpp``
keeps the counts (one relaxed atomic add each) and defines the names and the file
layout. Counters only grow: readers take differences (before and after), so there
is no reset. Each counter, as the emulator counts it:

* ``bytes_h2d``, ``bytes_d2h``, ``bytes_d2d``, ``bytes_h2h``: bytes copied, by the
  memory copied from and to. "Device" is emulated device memory of any device,
  IPC-mapped memory of another process included; "host" is host memory. A copy (a
  torch copy to, from or between devices: ``copy_``, ``.to()``, ``.cpu()``; the
  allocator's storage copy and resize) counts the bytes it writes, once it has run on
  its stream. A kernel launched through ``kernel_launcher`` counts what it copies
  through ``kernel_address_translator``: the bytes it translates as copied *from* are
  paired, in order, with those translated as copied *to* (pinned or registered host
  memory is host); bytes it reads for itself (block ids) count nowhere. A device
  op's result, which the emulator computes on the host (the CPU fallback) and copies
  into new device memory, counts device to device: a device writes it there. Not
  counted: copies between CPU tensors (the emulator never sees them, so
  ``bytes_h2h`` holds kernels' host-to-host copies only) and what an in-place
  device op writes.
* ``copies``: copies run (as above, and async copies through ``memcpy_async_launcher``;
  a kernel is a launch, not a copy).
* ``launches``: kernels launched through ``kernel_launcher``.
* ``device_ops``: torch ops on device tensors without a kernel of the emulator's
  (index_select, index_copy_, arithmetic, ...): each is at least one kernel launch
  on a device.
* ``host_syncs``: calls in which the host waits for device work: a stream's
  ``synchronize`` (torch's or a native handle's), a device ``synchronize`` (one,
  however many streams), ``Event.synchronize``, a copy that blocks the host (to
  pageable memory, or ``non_blocking=False``) and ``.item()``. Not host syncs:
  ``Event.wait``/``Stream.wait_event`` (the stream waits, not the host), queries,
  and the emulator's own waits before ops it runs at once.
* ``queries``: ``Stream.query`` and ``Event.query`` (they never wait; a loop of
  them is a host sync in disguise).
* ``host_functions``: host functions launched through ``host_func_launcher``.
* ``ipc_opens``, ``ipc_closes``: ``ipc_open_handle`` calls (an open of a mapping
  the process has counts too) and ``ipc_close_handle`` calls.

Another process's counters, without signals: with ``COUNTERS_ENV_VAR`` naming a
directory, a process keeps its counters in ``<dir>/counters-<pid>.bin`` (layout in
``csrc/counters.cpp``; a forked child gets its own), which any process reads at any
time (the kit's ``lmcache_device_kit.counters``).

Must not import the rest of the emulator: ``_device`` binds the compiled extension
here (``bind``) once it is loaded.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from typing import Any
import os

#: A directory: each process keeps its counters in ``counters-<pid>.bin`` there.
COUNTERS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_COUNTERS"
_ext: Any = None


def bind(ext: Any) -> None:
    """Use the loaded extension; with ``COUNTERS_ENV_VAR`` set, count into its file."""
    global _ext
    _ext = ext
    directory = os.environ.get(COUNTERS_ENV_VAR)
    if directory:
        Path(directory).mkdir(parents=True, exist_ok=True)
        ext.count_in_file(str(Path(directory).resolve()))


def counters() -> dict[str, int]:
    """This process's counts so far, by name (see the module's docstring)."""
    return dict(zip(_ext.counter_names(), _ext.counter_values(), strict=True))
