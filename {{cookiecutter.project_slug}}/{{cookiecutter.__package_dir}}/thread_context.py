# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Bind the runtime's context on the calling thread before a runtime call.

Why it exists: some runtimes keep the current device context per thread (Ascend's
ACL: ``aclrtHostRegister`` and IPC calls fail with 107002 on a thread that has
not bound one), and LMCache calls this plugin from threads of its own: its lazy
allocator pins host memory from a background thread, a worker's heartbeat thread
re-exports KV caches after a server restart, and the server maps and unmaps them
on its request threads. LMCache's NPU pin backend binds a context once per
thread (``_ensure_context``); ``pin_memory.py`` and ``ipc_wrapper.py`` call
``bind_thread_context`` before each of their runtime calls. The CPU emulator
requires it by default (``..._THREAD_CONTEXTS=0``: one context for every thread,
as CUDA's primary context).

Imports only ``names``.
"""

# Future
from __future__ import annotations

# Standard
import threading

# Third Party
import torch

# Local
from .names import TORCH_MODULE_NAME

#: Per thread: the devices whose context this thread has bound.
_bound = threading.local()


def bind_thread_context(device: int | None = None) -> None:
    """Make the runtime's context for ``device`` (None: the thread's current device)
    current on the calling thread; once per thread and device.

    TODO(vendor): bind your runtime's context. Setting the device does it on
    Ascend (``torch.npu.set_device`` calls ``aclrtSetDevice``) and on the
    emulator; CUDA's runtime binds its primary context itself (a no-op there).
    """
    runtime = getattr(torch, TORCH_MODULE_NAME)
    index = runtime.current_device() if device is None else int(device)
    devices = _bound.__dict__.setdefault("devices", set())
    if index not in devices:
        runtime.set_device(index)
        devices.add(index)
