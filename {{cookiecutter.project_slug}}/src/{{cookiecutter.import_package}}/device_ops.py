# SPDX-License-Identifier: {{ cookiecutter.license }}
"""KV-cache operations LMCache runs on {{ cookiecutter.device_name }} tensors.

``{{ cookiecutter.class_prefix }}DeviceOps`` inherits LMCache's torch baseline: every op is implemented
with ordinary torch calls, so it already works on any device whose torch backend
supports indexing and copies. It overrides only what the baseline gets wrong
for a non-CUDA device:

* ``tensor_from_ptr``: the base class raises; LMCache needs it to turn device
  pointers back into tensors (pointer-mode transfers);
* ``lmcache_memcpy_async`` with raw pointers: the baseline calls ``cudaMemcpy``
  through libcudart whenever that library can be loaded, which cannot address
  {{ cookiecutter.device_name }} memory.

Imported lazily by ``{{ cookiecutter.class_prefix }}DeviceSpec.ops_cls``, after ``import lmcache`` finished.
"""

from __future__ import annotations

import ctypes
import math
from typing import ClassVar

import torch

from ._lmcache_compat import DeviceOps, TransferDirection, torch_ops
from .device import DEVICE_TYPE, TORCH_MODULE_NAME


class {{ cookiecutter.class_prefix }}DeviceOps(DeviceOps):
    """LMCache ops for {{ cookiecutter.device_name }}: the torch baseline plus pointer-safe overrides."""

    device_type: ClassVar[str] = DEVICE_TYPE

    def ensure_native(self) -> None:
        """Bind native kernels. This package has none yet, so the torch baseline stays.

        TODO(vendor): when you have device kernels, import their module here and
        call ``self.bind_native(module)``; every public callable of the module
        replaces the baseline op of the same name (guide, Part 2). Keep the
        baseline's exact names and signatures; prefix helpers with ``_``.

        Failure policy: soft. If the module is missing, log a warning saying how
        to rebuild it and return: raising here removes ``lmcache.device_ops``
        for the whole process.
        """
        self._native_bound = False

    def tensor_from_ptr(
        self,
        ptr: int,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> torch.Tensor:
        """A zero-copy {{ cookiecutter.device_name }} tensor over device memory at ``ptr``.

        The tensor does not own the memory: the caller keeps it alive.

        TODO(vendor): if your runtime offers its own zero-copy constructor, use it;
        this generic version works for any torch backend that implements
        ``Tensor.set_(storage, ...)``.
        """
        if ptr == 0:
            raise ValueError("tensor_from_ptr needs a non-zero device pointer")
        target = torch.device(device)
        if target.index is None:
            target = torch.device(target.type, getattr(torch, TORCH_MODULE_NAME).current_device())
        nbytes = math.prod(shape) * dtype.itemsize
        storage = torch._C._construct_storage_from_data_pointer(ptr, target, nbytes)
        return torch.empty(0, dtype=dtype, device=target).set_(storage, 0, shape, _contiguous_strides(shape))

    def lmcache_memcpy_async(
        self,
        dest: int | torch.Tensor,
        src: int | torch.Tensor,
        nbytes: int,
        direction: TransferDirection,
        host_buffer_offset: int,
        host_buffer_alignments: int,
    ) -> None:
        """Copy ``nbytes`` between host memory and {{ cookiecutter.device_name }} memory.

        Tensor operands use the torch baseline (a ``copy_``). Raw pointers are
        wrapped in zero-copy views (``tensor_from_ptr`` for the device side) and
        copied with one ``copy_`` on the current stream, never through
        libcudart. ``host_buffer_offset``/``host_buffer_alignments`` only serve
        CUDA's pinned-chunk splitting and are ignored here.
        """
        if isinstance(dest, torch.Tensor) or isinstance(src, torch.Tensor):
            torch_ops.lmcache_memcpy_async(dest, src, nbytes, direction, host_buffer_offset, host_buffer_alignments)
            return
        if nbytes <= 0:
            raise ValueError(f"nbytes must be positive, got {nbytes}")
        if int(direction) == int(TransferDirection.D2H):
            host_ptr, device_ptr = dest, src
        elif int(direction) == int(TransferDirection.H2D):
            host_ptr, device_ptr = src, dest
        else:
            raise ValueError(f"unsupported transfer direction {direction!r}: expected H2D or D2H")
        device_view = self.tensor_from_ptr(device_ptr, (nbytes,), torch.uint8, torch.device(DEVICE_TYPE))
        host_view = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(host_ptr), dtype=torch.uint8)
        if int(direction) == int(TransferDirection.D2H):
            host_view.copy_(device_view, non_blocking=True)
        else:
            device_view.copy_(host_view, non_blocking=True)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
