# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Host-memory pinning for {{ cookiecutter.device_name }} (LMCache-driven mode).

LMCache pins its host buffers through the active DeviceSpec's pin backend. When
pinning is supported, the server's L1 cache uses its lazy allocator, and its
copies to and from the device go through ``lmcache_memcpy_async`` in pointer
mode (``{{ cookiecutter.class_prefix }}DeviceOps`` implements that); the engine-driven SHM
pool is pinned too. When it is not, LMCache falls back to unpinned buffers.

Imported lazily by ``{{ cookiecutter.class_prefix }}DeviceSpec.pin_memory_backend``.
"""

# Future
from __future__ import annotations

# Standard
import mmap
import threading

# Third Party
import torch

# Local
{%- if cookiecutter.native_ops == 'yes' %}
from ._host_access import forget_device_address, keep_device_address
{%- endif %}
from ._lmcache_compat import PinMemoryBackend, init_logger
from .names import TORCH_MODULE_NAME
from .runtime import bind_thread_context

logger = init_logger(__name__)


#: The runtime's host registration calls; without both nothing is pinned.
REGISTRATION_CALLS = ("host_register", "host_unregister")
#: Whether this device pins host memory: None (the sample's: undecided) until you
#: port the calls below (then True), or False if your runtime cannot register host
#: memory at all. The doctor reads a pin backend that does not pin as "not ported
#: yet" unless this is False; False also turns pinning off here.
#: TODO(vendor): True once the calls below are yours, or False if there are none.
PINS_HOST_MEMORY: bool | None = None
#: Your runtime's registration flag that maps the range for the device's kernels
#: (``cudaHostRegisterMapped``, which LMCache's lazy allocator passes as ``flags=2``;
#: Ascend's only type, ``ACL_HOST_REGISTER_MAPPED``, is 0). Every registration asks
#: for it, whatever LMCache passes: the SHM pool's (no flags) is read by kernels too.
#: TODO(vendor): your runtime's value.
HOST_REGISTER_MAPPED = 0x02
#: Registrations are whole pages: ``aclrtHostRegister`` refuses anything else, and
#: LMCache's NPU pin backend widens its ranges so. TODO(vendor): your runtime's unit.
PAGE_SIZE = mmap.PAGESIZE

#: The page-aligned base each pinned pointer was registered at (process-wide: LMCache
#: may unpin through another backend instance than the one that pinned).
_bases: dict[int, int] = {}
_bases_lock = threading.Lock()


def _device_reads_host_memory() -> bool:
    """True on the CPU emulator, whose copies read registered host memory directly.

    TODO(vendor): True when your runtime can register host memory for its DMA.
    """
    return bool(getattr(getattr(torch, TORCH_MODULE_NAME, None), "is_emulator", False))


def host_range_is_pinned(ptr: int, size: int) -> bool | None:
    """Whether host memory ``[ptr, ptr + size)`` is pinned; None when this device does
    not pin (nothing to check) or the runtime cannot tell.

    The ops ask before each copy between the device and host memory
    (``_lmcache_compat.check_host_pinned``): a copy from pageable memory works but is
    many times slower, and LMCache falls back to one without a word.
    TODO(vendor): ask your runtime (cudaPointerGetAttributes-like: registered or
    page-locked host memory).
    """
    if not _device_reads_host_memory():
        return None
    query = getattr(getattr(torch, TORCH_MODULE_NAME), "host_is_pinned", None)
    return None if query is None else bool(query(ptr, size))


class {{ cookiecutter.class_prefix }}PinMemoryBackend(PinMemoryBackend):
    """Registers host buffers with the {{ cookiecutter.device_name }} runtime for fast, async
    copies."""

    def pin_memory(self, ptr: int, size: int, flags: int = 0) -> bool:
        """Pin ``[ptr, ptr + size)``, widened to whole pages, mapped for the device;
        True on success.

        ``flags`` are CUDA's (LMCache passes ``cudaHostRegisterMapped``): every
        registration here is mapped. A NULL pointer or an empty range is refused
        (False), as cudaHostRegister refuses them, and so is whatever the runtime
        refuses (a page another registration holds): LMCache then keeps the buffer
        unpinned.
        TODO(vendor): your runtime's host registration (cudaHostRegister-like).
        """
        if not self.is_pin_supported or ptr <= 0 or size <= 0:
            return False
        base = ptr - ptr % PAGE_SIZE
        length = -(-(ptr + size - base) // PAGE_SIZE) * PAGE_SIZE
        try:
            bind_thread_context()  # LMCache's lazy allocator pins from its own thread
            runtime = getattr(torch, TORCH_MODULE_NAME)
            if not runtime.host_register(base, length, HOST_REGISTER_MAPPED):
                return False
{%- if cookiecutter.native_ops == 'yes' %}
            # The native kernels reach a registered range at its device address, kept
            # here: the host address on CUDA (LMCache's lazy allocator registers with
            # cudaHostRegisterMapped; cudaHostGetDevicePointer gives it), a separate
            # one on Ascend (aclrtHostRegister returns it; LMCache's NPU backend
            # drops it, as its copies address the host pointer, but a kernel cannot).
            try:
                keep_device_address(ptr, size)
            except Exception:
                runtime.host_unregister(base)
                raise
{%- else %}
            # Copies (copy_) address the host pointer: the device address a
            # registration may return (aclrtHostRegister's devPtr) is not needed, as
            # in LMCache's NPU pin backend.
{%- endif %}
            with _bases_lock:
                _bases[ptr] = base
            return True
        except Exception as exc:  # LMCache then keeps the buffer unpinned
            logger.warning("pinning %#x (%d bytes) failed: %r", ptr, size, exc)
            return False

    def unpin_memory(self, ptr: int) -> bool:
        """Unregister a range pinned by ``pin_memory``; False for any other address.

        TODO(vendor): unregister it with your runtime (cudaHostUnregister-like).
        """
        if not self.is_pin_supported:
            return False
        with _bases_lock:
            base = _bases.pop(ptr, ptr)  # another address: the runtime refuses it
        try:
            bind_thread_context()
{%- if cookiecutter.native_ops == 'yes' %}
            forget_device_address(ptr)
{%- endif %}
            if getattr(torch, TORCH_MODULE_NAME).host_unregister(base):
                return True
            logger.warning("unpinning %#x: the runtime refused (not pinned)", ptr)
        except Exception as exc:
            logger.warning("unpinning %#x failed: %r", ptr, exc)
        return False

    @property
    def is_pin_supported(self) -> bool:
        runtime = getattr(torch, TORCH_MODULE_NAME, None)
        calls = (getattr(runtime, name, None) for name in REGISTRATION_CALLS)
        if PINS_HOST_MEMORY is False:
            return False
        return _device_reads_host_memory() and all(map(callable, calls))
