# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""KV-cache operations LMCache runs on {{ cookiecutter.device_name }} tensors.

``{{ cookiecutter.class_prefix }}DeviceOps`` inherits LMCache's torch baseline: every op
is implemented with ordinary torch calls, so it already works on any device whose
torch backend supports indexing and copies. It overrides only what the baseline
gets wrong for a non-CUDA device:

* ``tensor_from_ptr``: the base class raises; LMCache needs it to turn device
  pointers back into tensors (pointer-mode transfers);
* ``lmcache_memcpy_async`` with raw pointers: the baseline calls ``cudaMemcpy``
  through libcudart whenever that library can be loaded, which cannot address
  {{ cookiecutter.device_name }} memory;
* ``multi_layer_block_kv_transfer``: one ``shape_desc`` describes every layer
  of a call, but the baseline never checks that the layers agree, and layers of
  another shape or dtype are stored as wrong bytes; this refuses them.
{%- if cookiecutter.lmcache_driven != 'no' %}
  With raw pointers (LMCache-driven server) the baseline also rebuilds the chunk
  objects as CPU tensors, but the server passes addresses in its
  {{ cookiecutter.device_name }} staging buffer;
* ``record_completion_on_stream`` / ``record_event_on_stream``: the baseline
  publishes at once, before queued device work has finished; these synchronize
  the stream first (``runtime.py``){{ "; the native ops publish from host
  functions instead" if cookiecutter.native_ops == "yes" else "" }}.
{%- endif %}

Imported lazily by ``{{ cookiecutter.class_prefix }}DeviceSpec.ops_cls``, after
``import lmcache`` finished. Device-independent helpers come with the shims
(``_lmcache_compat``).
"""

# Future
from __future__ import annotations

# Standard
from typing import ClassVar
import ctypes
{%- if cookiecutter.lmcache_driven != 'no' %}
import functools
{%- endif %}
import math
{%- if cookiecutter.native_ops == 'yes' %}
import os
{%- endif %}

# Third Party
import torch

# Local
from ._lmcache_compat import (
    DeviceOps,
    EngineKVFormat,
    PageBufferShapeDesc,
    TransferDirection,
    as_baseline_bytes,
{%- if cookiecutter.lmcache_driven != 'no' %}
    check_host_pinned,
{%- endif %}
    check_one_layer_layout,
    contiguous_strides,
    host_pieces,
{%- if cookiecutter.native_ops == 'yes' %}
    init_logger,
    native_ops_torch_problem,
{%- endif %}
{%- if cookiecutter.lmcache_driven != 'no' %}
    pointer_mode_operands,
{%- endif %}
{%- if cookiecutter.native_ops == 'yes' %}
    report_slow_path,
{%- endif %}
    torch_ops,
)
from .names import DEVICE_TYPE, TORCH_MODULE_NAME
{%- if cookiecutter.lmcache_driven != 'no' %}
from .runtime import after_stream_work
{%- endif %}
{%- if cookiecutter.native_ops == 'yes' %}

logger = init_logger(__name__)
#: Set to 0 to keep LMCache's torch baseline instead of the native ops.
NATIVE_ENV_VAR = "{{ cookiecutter.__native_env_var }}"
{%- endif %}


class {{ cookiecutter.class_prefix }}DeviceOps(DeviceOps):
    """LMCache ops for {{ cookiecutter.device_name }}: the torch baseline plus pointer-safe
    overrides."""

    device_type: ClassVar[str] = DEVICE_TYPE
{%- if cookiecutter.native_ops == 'yes' %}

    def ensure_native(self) -> None:
        """Bind ``native_ops`` (C++ kernels from ``_kernels.cpp``) over the torch
        baseline.

        Every public callable of ``native_ops`` replaces the baseline op of the
        same name on this instance (guide, Part 2); anything it does not define
        stays on the baseline. ``{{ cookiecutter.__native_env_var }}=0`` keeps the
        baseline (for comparisons and bisecting).

        Failure policy: soft. If the compiled module is missing (a source
        checkout, or a wheel built without a compiler) or was built against
        another torch than the one installed, log how to fix it and keep the
        baseline: raising here would remove ``lmcache.device_ops``.
        """
        self._native_bound = False
        if os.environ.get(NATIVE_ENV_VAR) == "0":
            logger.info(
                "%s: LMCache's torch baseline, as %s=0 asks",
                type(self).__name__,
                NATIVE_ENV_VAR,
            )
            return
        # Before loading the module: one built for another torch's C++ ABI fails to
        # load, or crashes.
        if problem := native_ops_torch_problem(torch.__version__):
            report_slow_path(
                "native ops not bound",
                f"{type(self).__name__} runs LMCache's torch baseline: {problem}",
            )
            return
        try:
            # Local
            from . import native_ops
        except ImportError as exc:
            report_slow_path(
                "native ops not bound",
                f"{type(self).__name__} runs LMCache's torch baseline: the native "
                f"ops did not load ({exc}). Rebuild the wheel with a C++ compiler "
                "and the torch you deploy: python -m build --wheel --no-isolation",
            )
            return
        if not native_ops._launches_kernels():
            report_slow_path(
                "native ops not bound",
                f"{type(self).__name__} runs LMCache's torch baseline: "
                f"torch.{TORCH_MODULE_NAME} has no launch entry point for the native "
                "ops' kernels (fill in the TODO(vendor) of native_ops._launch_on and "
                "_launches_kernels).",
            )
            return
        self.bind_native(native_ops)
        self._native_bound = True
{%- else %}

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
{%- endif %}

    def tensor_from_ptr(
        self,
        ptr: int,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
    ) -> torch.Tensor:
        """A zero-copy {{ cookiecutter.device_name }} tensor over device memory at ``ptr``
        (see ``device_tensor``).

        A ``device`` without an index means the device that owns the memory,
        never the current one: LMCache passes
        ``torch.device("{{ cookiecutter.device_name }}")``.
        """
        return device_tensor(ptr, shape, dtype, torch.device(device))

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
        copied with ``copy_`` on the current stream, never through libcudart: one
        copy per pinned registration the host range crosses (``host_pieces``), as
        LMCache's MUSA backend splits them.
        """
        if isinstance(dest, torch.Tensor) or isinstance(src, torch.Tensor):
            torch_ops.lmcache_memcpy_async(
                dest, src, nbytes, direction, host_buffer_offset, host_buffer_alignments
            )
            return
        if nbytes <= 0:
            raise ValueError(f"nbytes must be positive, got {nbytes}")
        if int(direction) == int(TransferDirection.D2H):
            host_ptr, device_ptr = dest, src
        elif int(direction) == int(TransferDirection.H2D):
            host_ptr, device_ptr = src, dest
        else:
            raise ValueError(
                f"unsupported transfer direction {direction!r}: expected H2D or D2H"
            )
        device_view = self.tensor_from_ptr(
            device_ptr, (nbytes,), torch.uint8, torch.device(DEVICE_TYPE)
        )
        host_view = torch.frombuffer(
            (ctypes.c_uint8 * nbytes).from_address(host_ptr), dtype=torch.uint8
        )
        to_host = int(direction) == int(TransferDirection.D2H)
        pieces = host_pieces(nbytes, host_buffer_offset, host_buffer_alignments)
        for start, size in pieces:
{%- if cookiecutter.lmcache_driven != 'no' %}
            check_host_pinned(host_ptr + start, size, "lmcache_memcpy_async")
{%- endif %}
            on_host = host_view[start : start + size]
            on_device = device_view[start : start + size]
            if to_host:
                on_host.copy_(on_device, non_blocking=True)
            else:
                on_device.copy_(on_host, non_blocking=True)

    def multi_layer_block_kv_transfer(
        self,
        paged_buffer_ptrs_tensor: torch.Tensor | list,
        lmcache_objects_ptrs: list[int] | list[torch.Tensor],
        block_ids: torch.Tensor | list[int],
        device: torch.device | str,
        direction: TransferDirection,
        shape_desc: PageBufferShapeDesc,
        lmcache_chunk_size: int,
        engine_kv_format: EngineKVFormat,
        skip_prefix_n_blocks: int,
    ) -> None:
        """Gather (D2H) or scatter (H2D) whole KV blocks between paged caches and chunk
        objects.

        Keep this exact signature, annotations included: LMCache's engine-driven
        path reads the annotation of ``lmcache_objects_ptrs`` to decide whether
        it may pass tensors, and falls back to raw pinned pointers otherwise.
{%- if cookiecutter.lmcache_driven != 'no' %}

        With raw pointers (the LMCache-driven server), the chunk objects are in
        the cache context's {{ cookiecutter.device_name }} staging buffer, so they are rebuilt
        here as device tensors; then the torch baseline does the copy.
{%- endif %}
        TODO(vendor): call your device kernel here once you have one.
        """
        check_one_layer_layout(paged_buffer_ptrs_tensor)
        objects: list[torch.Tensor] | list[int] = lmcache_objects_ptrs
        paged: torch.Tensor | list = paged_buffer_ptrs_tensor
{%- if cookiecutter.lmcache_driven != 'no' %}
        if lmcache_objects_ptrs and isinstance(lmcache_objects_ptrs[0], int):
            objects, paged = pointer_mode_operands(
                paged_buffer_ptrs_tensor,
                lmcache_objects_ptrs,
                shape_desc,
                lmcache_chunk_size,
                engine_kv_format,
                torch.device(device),
                self.tensor_from_ptr,
            )
{%- endif %}
        paged, objects, shape_desc = as_baseline_bytes(paged, objects, shape_desc)
        torch_ops.multi_layer_block_kv_transfer(
            paged,
            objects,
            block_ids,
            device,
            direction,
            shape_desc,
            lmcache_chunk_size,
            engine_kv_format,
            skip_prefix_n_blocks,
        )
{%- if cookiecutter.lmcache_driven != 'no' %}

    def record_completion_on_stream(
        self, cuda_stream_ptr: int, kind: str, payload: bytes
    ) -> None:
        """Publish a completion once the work queued on the stream before it has
        finished: synchronize, then publish (``runtime.py``, TODO(vendor)
        there)."""
        publish = functools.partial(
            torch_ops.record_completion_on_stream, cuda_stream_ptr, kind, payload
        )
        after_stream_work(cuda_stream_ptr, publish)

    def record_event_on_stream(
        self,
        cuda_stream_ptr: int,
        event_type_name: str,
        session_id: str,
        str_metadata: dict[str, str],
        int_metadata: dict[str, int],
    ) -> None:
        """Publish an observability event after the queued device work (see above)."""
        publish = functools.partial(
            torch_ops.record_event_on_stream,
            cuda_stream_ptr,
            event_type_name,
            session_id,
            dict(str_metadata),
            dict(int_metadata),
        )
        after_stream_work(cuda_stream_ptr, publish)
{%- endif %}


def device_tensor(
    ptr: int, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """A contiguous tensor over {{ cookiecutter.device_name }} memory at ``ptr``; it does not
    own the memory.

    TODO(vendor): if your runtime offers its own zero-copy constructor, use it;
    this generic version works for any torch backend that implements
    ``Tensor.set_(storage, ...)``. ``pointer_device`` is the emulator's
    cudaPointerGetAttributes: ask your runtime which device owns ``ptr``.
    """
    if ptr == 0:
        raise ValueError("tensor_from_ptr needs a non-zero device pointer")
    if device.index is None:
        device = torch.device(
            DEVICE_TYPE, getattr(torch, TORCH_MODULE_NAME).pointer_device(ptr)
        )
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        storage = torch._C._construct_storage_from_data_pointer(ptr, device, nbytes)
        return torch.empty(0, dtype=dtype, device=device).set_(
            storage, 0, shape, contiguous_strides(shape)
        )
    except Exception as exc:
        raise RuntimeError(
            f"cannot view {device} memory at 0x{ptr:x} as {tuple(shape)} {dtype}: {exc}"
        ) from exc
