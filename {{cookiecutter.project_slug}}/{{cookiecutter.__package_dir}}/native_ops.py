# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""What ``{{ cookiecutter.class_prefix }}DeviceOps.ensure_native()`` binds (``bind_native``).

``bind_native`` rebinds *every public callable and type* of this module onto the
ops instance, replacing the torch-baseline op of the same name. So:

* public callables here must be ``lmcache.v1.platform.torch_ops`` function names,
  with the same parameters in the same order (``tests/test_conformance.py``'s
  ``TestNativeOps`` checks this contract);
* helpers are ``_``-prefixed, so they are not bound, and so are LMCache's types
  (reached through ``_compat``): a public type here would land on
  ``lmcache.device_ops``, where LMCache detects features with ``hasattr``;
* each op is a Python function with the baseline's annotations, not the raw
  pybind function: LMCache reads the annotation of ``lmcache_objects_ptrs`` to
  keep engine-driven transfers in tensor mode (a bare pybind function would
  silently switch them to pointer mode with pinned staging);
* inputs the kernels do not handle fall back to the torch baseline, reported
  once per process as a slow path (``_lmcache_compat.report_slow_path``).

The kernels (``_kernels``, compiled from ``_kernels.cpp`` by the wheel build)
are launched on the device's current stream, as LMCache's CUDA kernels are: they
really run as the CPU emulator's device kernels, on its streams. Which kernel
runs, with which arguments, is planned in ``_native_plan.py``.
{%- if cookiecutter.lmcache_driven != 'no' %}
The completion and event recorders publish from host functions that run no
Python (``_recorders.cpp``, as LMCache's CUDA recorder), where the runtime can
launch them (``runtime.py``).
{%- endif %}
TODO(vendor): replace them with your device kernels; keep these signatures.

What the conformance suite reads here, besides the ops (two names, both data, so
``bind_native`` leaves them off the ops): ``NATIVE_KV_FORMATS``, the formats your
kernels transfer (it expects the native path for those, LMCache's baseline for the
others it transfers), and ``paths_taken``, counted by every op on every path (it
tells a native transfer from a fall back by it). Nothing else: not ``_kernels``, not
``_native_plan``, not how your kernels are launched.
"""

# Future
from __future__ import annotations

# Standard
from collections import Counter as _Counter
from typing import Any as _Any

# Third Party
import torch

# Local
from . import _kernels  # type: ignore[attr-defined]
from . import _lmcache_compat as _compat
from ._host_access import kernel_host_address as _kernel_host_address
from ._lmcache_compat import host_pieces as _host_pieces
from ._lmcache_compat import report_slow_path as _report_slow_path
from ._lmcache_compat import torch_ops
from ._native_plan import FORMATS as _PLANNED_FORMATS
{%- if cookiecutter.lmcache_driven != 'no' %}
from ._native_plan import pointer_plan as _pointer_plan
{%- endif %}
from ._native_plan import tensor_plan as _tensor_plan
from .names import DEVICE_TYPE, TORCH_MODULE_NAME
{%- if cookiecutter.lmcache_driven != 'no' %}
from .runtime import host_function_launcher as _host_function_launcher
from .runtime import report_processing as _report_processing
{%- endif %}

#: The LMCache ``EngineKVFormat`` names (``.name``) the kernels transfer: every other
#: format goes to LMCache's torch baseline (a slow path). The conformance suite reads it
#: and expects each path as declared (a frozenset: ``bind_native`` binds no data).
#: TODO(vendor): the formats your kernels take.
NATIVE_KV_FORMATS: frozenset[str] = _PLANNED_FORMATS
#: How often each op took each path in this process, by ``"<op>:<path>"``: ``native``
#: (the kernels), ``fallback`` (the torch baseline)
{%- if cookiecutter.lmcache_driven != 'no' %}, ``synchronized`` (a recorder
#: without host functions)
{%- endif %}.
#: The conformance suite reads it: keep counting when you replace the kernels.
paths_taken: _Counter[str] = _Counter()


def multi_layer_block_kv_transfer(
    paged_buffer_ptrs_tensor: torch.Tensor | list,
    lmcache_objects_ptrs: list[int] | list[torch.Tensor],
    block_ids: torch.Tensor | list[int],
    device: torch.device | str,
    direction: _compat.TransferDirection,
    shape_desc: _compat.PageBufferShapeDesc,
    lmcache_chunk_size: int,
    engine_kv_format: _compat.EngineKVFormat,
    skip_prefix_n_blocks: int,
) -> None:
    """Native version of ``torch_ops.multi_layer_block_kv_transfer`` (same contract)."""
    args = (
        paged_buffer_ptrs_tensor,
        lmcache_objects_ptrs,
        block_ids,
        device,
        direction,
        shape_desc,
        lmcache_chunk_size,
        engine_kv_format,
        skip_prefix_n_blocks,
    )
    plan = _tensor_plan(*args){{ " or _pointer_plan(*args)" if cookiecutter.lmcache_driven != "no" else "" }}
    if plan is None:
        paths_taken["multi_layer_block_kv_transfer:fallback"] += 1
        _report_slow_path(
            "native fallback",
            "multi_layer_block_kv_transfer handed "
            f"{getattr(engine_kv_format, 'name', engine_kv_format)} KV caches to "
            "LMCache's torch baseline: the kernels do not handle these inputs",
        )
        _class_op("multi_layer_block_kv_transfer", *args)
        return
    paths_taken["multi_layer_block_kv_transfer:native"] += 1
    kernel, on_device, kernel_args = plan
    kernel(*_launch_on(on_device), *kernel_args)


def lmcache_memcpy_async(
    dest: int | torch.Tensor,
    src: int | torch.Tensor,
    nbytes: int,
    direction: _compat.TransferDirection,
    host_buffer_offset: int,
    host_buffer_alignments: int,
) -> None:
    """Native version of ``torch_ops.lmcache_memcpy_async``: for raw pointers, one
    async copy by the runtime's copy engine (``_kernels.memcpy_async``, as LMCache's
    CUDA backend uses cudaMemcpyAsync) per pinned registration the host range crosses
    (``_host_pieces``). A pageable piece is copied by the ops class's ``copy_``
    instead, synchronously: no copy engine reads it later.
    TODO(vendor): ``pointer_device`` is the emulator's: ask your runtime which device
    owns ``on_device`` (cudaPointerGetAttributes)."""
    if isinstance(dest, int) and isinstance(src, int) and nbytes > 0:
        if int(direction) not in (
            int(_compat.TransferDirection.H2D),
            int(_compat.TransferDirection.D2H),
        ):
            raise ValueError(
                f"unsupported transfer direction {direction!r}: expected H2D or D2H"
            )
        paths_taken["lmcache_memcpy_async:native"] += 1
        to_device = int(direction) == int(_compat.TransferDirection.H2D)
        on_device, on_host = (dest, src) if to_device else (src, dest)
        device = torch.device(DEVICE_TYPE, _runtime().pointer_device(on_device))
        copier, stream = _copy_on(device)
        pieces = _host_pieces(nbytes, host_buffer_offset, host_buffer_alignments)
        for start, size in pieces:
            if _kernel_host_address(on_host + start, size, device.index) is None:
                offset = host_buffer_offset + start
                piece = (dest + start, src + start, size, direction, offset)
                _class_op("lmcache_memcpy_async", *piece, host_buffer_alignments)
                continue
            kind = 1 if to_device else 2  # cudaMemcpyHostToDevice, ...DeviceToHost
            _kernels.memcpy_async(copier, dest + start, src + start, size, kind, stream)
        return
    paths_taken["lmcache_memcpy_async:fallback"] += 1
    torch_ops.lmcache_memcpy_async(
        dest, src, nbytes, direction, host_buffer_offset, host_buffer_alignments
    )
{%- if cookiecutter.lmcache_driven != 'no' %}


def record_completion_on_stream(
    cuda_stream_ptr: int,
    kind: str,
    payload: bytes,
) -> None:
    """Native version of ``torch_ops.record_completion_on_stream``: a host function on
    the stream publishes it once the work queued before it has run; without host
    functions, the ops class's synchronizing path."""
    _record(
        "record_completion_on_stream",
        _kernels.record_completion,
        cuda_stream_ptr,
        kind,
        payload,
    )


def drain_recorded_completions() -> list[tuple[str, bytes]]:
    """The completions published so far, oldest first: the host functions', then
    the synchronizing path's (LMCache's baseline buffer)."""
    return [*_kernels.drain_completions(), *torch_ops.drain_recorded_completions()]


def record_event_on_stream(
    cuda_stream_ptr: int,
    event_type_name: str,
    session_id: str,
    str_metadata: dict[str, str],
    int_metadata: dict[str, int],
) -> None:
    """Native version of ``torch_ops.record_event_on_stream`` (as the completions
    above; timestamped when the host function runs, as LMCache's CUDA recorder)."""
    args = (cuda_stream_ptr, event_type_name, session_id, str_metadata, int_metadata)
    _record("record_event_on_stream", _kernels.record_event, *args)


def drain_recorded_events() -> list[
    tuple[str, str, float, dict[str, str], dict[str, int]]
]:
    """The events published so far, oldest first (as the completions above)."""
    return [*_kernels.drain_events(), *torch_ops.drain_recorded_events()]


def _record(op: str, native: _Any, *args: object) -> None:
    """A recorder ``op``: from a host function where the runtime launches them
    (``native(launcher, *args)``; ``args[0]``: the stream), else the ops class's
    synchronizing path."""
    launcher = _host_function_launcher()
    if launcher is None:
        paths_taken[f"{op}:synchronized"] += 1
        _class_op(op, *args)
        return
    paths_taken[f"{op}:native"] += 1
    reports = _report_processing()
    if reports is not None:  # the model "subscribed": a thread processes the stream's
        _kernels.subscribe_reports(*reports, args[0])
    native(launcher, *args)
{%- endif %}


def _runtime() -> _Any:
    return getattr(torch, TORCH_MODULE_NAME)


def _launches_kernels() -> bool:
    """Whether the runtime gives native code the launch entry point these kernels use
    (the capability): ``ensure_native`` keeps LMCache's torch baseline without it.

    TODO(vendor): True once ``_launch_on`` calls your runtime's launch.
    """
    runtime = getattr(torch, TORCH_MODULE_NAME, None)  # None: no device (discovery)
    names = ("kernel_launcher", "kernel_address_translator", "memcpy_async_launcher")
    return all(callable(getattr(runtime, n, None)) for n in (*names, "stream_handle"))


def _launch_on(device: torch.device) -> tuple[int, int, int]:
    """(kernel launcher, stream handle, address translator): launch on ``device``'s
    current stream.

    TODO(vendor): your runtime's launch entry point and current stream pointer
    (your kernels need no address translator: pass 0 and drop it in _kernels.cpp).
    """
    runtime = _runtime()
    stream = runtime.stream_handle(runtime.current_stream(device))
    return runtime.kernel_launcher(), stream, runtime.kernel_address_translator()


def _copy_on(device: torch.device) -> tuple[int, int]:
    """(async copy, stream handle): copy on ``device``'s current stream.

    TODO(vendor): your runtime's async copy (cudaMemcpyAsync) and stream pointer.
    """
    runtime = _runtime()
    stream = runtime.stream_handle(runtime.current_stream(device))
    return runtime.memcpy_async_launcher(), stream


def _class_op(name: str, *args: object) -> None:
    """The ops class's method ``name`` (the plugin's own, else LMCache's torch
    baseline): inputs the kernels do not handle, copies no kernel may run (pageable
    host memory: the class's ``copy_`` waits for it as a device's copy engine does).

    The class's, not the instance's: ``bind_native`` put this module's function
    on the instance.
    """
    ops = _compat.resolve_device_ops(DEVICE_TYPE)
    getattr(type(ops), name)(ops, *args)
