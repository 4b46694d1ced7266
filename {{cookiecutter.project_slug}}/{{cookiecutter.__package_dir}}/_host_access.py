# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Where a native kernel reaches host memory: a device address, None when pageable.

Why it exists: a copy engine takes host addresses (``copy_``, cudaMemcpyAsync), but
a kernel that runs later on the device reaches host memory only where it is pinned
and mapped for the device, and runtimes map it in one of two ways
(``host_memory_mapped_at_same_address``). LMCache's compiled CUDA and Ascend kernels
read host chunks directly, "so they must be pinned" (LMCache 0.5.7's
``native_block_transfer.py``). The plans (``_native_plan.py``) and
``native_ops.lmcache_memcpy_async`` ask here for every host address they give a
kernel; None means pageable memory (or a range across two registrations), which
they never give one: the kernel gets pinned temporaries and is awaited
(``staged_kernel``), the copy runs synchronously, or the call is refused with the
reason.
The pin backend keeps the device address of each range it registers
(``keep_device_address``), as a registration returns it; another device's address
is asked for once, with that device current: with TP=2 one LMCache server drives two
devices from one pinned L1, and each device reaches it at its own address.

Imports only ``names``; never ``native_ops``, ``_native_plan`` or ``pin_memory``
(which import it).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from typing import Any
import bisect
import threading

# Third Party
import torch

# Local
from .names import TORCH_MODULE_NAME

#: Pinned ranges registered through the pin backend: their sorted host bases, and
#: per base ``(size, {device index: the range's address on that device})``.
_bases: list[int] = []
_kept: dict[int, tuple[int, dict[int, int]]] = {}
_lock = threading.Lock()


def _runtime() -> Any:
    return getattr(torch, TORCH_MODULE_NAME)


def host_memory_mapped_at_same_address() -> bool:
    """Whether the device reaches pinned host memory at its host address.

    TODO(vendor): True on CUDA and ROCm: with unified addressing, memory registered
    with cudaHostRegisterMapped (as LMCache's lazy allocator registers its L1) or
    allocated pinned has the same address on the device. False on Ascend:
    ``aclrtHostRegister`` returns a separate device address (``devPtr``; LMCache's NPU
    pin backend discards it, as its copies address the host pointer, but a kernel
    needs it). The CPU emulator says which it emulates (``..._HOST_ALIASES``).
    """
    return bool(getattr(_runtime(), "host_memory_mapped_at_same_address", True))


def keep_device_address(ptr: int, size: int) -> None:
    """Keep the device address of ``[ptr, ptr + size)``, just registered (pinned).

    TODO(vendor): keep the one your registration returns (``aclrtHostRegister``'s
    ``devPtr``); the emulator's registration returns a bool, so it is asked as CUDA's
    cudaHostGetDevicePointer is. Nothing to keep when the address is the same.
    """
    if host_memory_mapped_at_same_address():
        return
    device = int(_runtime().current_device())
    device_address = int(_runtime().host_device_pointer(ptr))
    with _lock:
        if ptr not in _kept:
            bisect.insort(_bases, ptr)
        _kept[ptr] = (size, {device: device_address})


def forget_device_address(ptr: int) -> None:
    """Drop what ``keep_device_address`` kept for a range being unregistered."""
    with _lock:
        if _kept.pop(ptr, None) is not None:
            del _bases[bisect.bisect_left(_bases, ptr)]


def kernel_host_address(ptr: int, nbytes: int, device: int) -> int | None:
    """The address at which a kernel on ``device`` (an index) reaches host memory
    ``[ptr, ptr + nbytes)``; None when no single pinned range holds it (a kernel that
    runs later cannot read it).

    TODO(vendor): ``host_is_pinned`` is your runtime's pointer-attribute query
    (cudaPointerGetAttributes: registered or page-locked), ``host_device_pointer``
    the current device's address of pinned memory (cudaHostGetDevicePointer), and
    ``device`` your runtime's device guard.
    """
    kept = None
    with _lock:
        index = bisect.bisect_right(_bases, ptr) - 1
        if index >= 0:
            base = _bases[index]
            size, aliases = _kept[base]
            if ptr + nbytes <= base + size:
                kept = base, aliases
                if device in aliases:
                    return aliases[device] + (ptr - base)
    runtime = _runtime()
    is_pinned = getattr(runtime, "host_is_pinned", None)
    if nbytes <= 0 or is_pinned is None or not is_pinned(ptr, nbytes):
        return None  # unknown: no kernel is given it (the callers fall back)
    if host_memory_mapped_at_same_address():
        return ptr
    with runtime.device(device):
        address = int(runtime.host_device_pointer(ptr))
    if kept is not None:
        with _lock:
            kept[1][device] = address - (ptr - kept[0])
    return address


def staged_kernel(
    kernel: Callable[..., None],
    device: torch.device,
    staged: list[tuple[torch.Tensor, torch.Tensor]],
    to_host: bool,
) -> Callable[..., None]:
    """``kernel`` on pinned temporaries of pageable host chunks (``staged``: chunk,
    temporary), awaited before it returns: the device synchronized, then (to the host)
    each temporary copied into its chunk. LMCache 0.5.7's ``native_block_transfer.py``
    stages pageable chunks so; the temporaries live until the kernel has run."""

    def launch(*args: object) -> None:
        kernel(*args)
        _runtime().synchronize(device)
        if to_host:
            for chunk, temporary in staged:
                chunk.copy_(temporary)

    return launch
