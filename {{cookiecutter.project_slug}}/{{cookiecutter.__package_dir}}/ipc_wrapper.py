# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""How a worker hands one layer's KV cache to the LMCache server (LMCache-driven mode).

The worker wraps each {{ cookiecutter.device_name }} KV layer (``wrap``): one tensor, or
the layer's planes as the engine registered them (per-layer ``(K, V)`` tuples, as
vLLM's Ascend plugin registers them; LMCache's NPU wrapper takes both forms, as this
one does). LMCache serializes the wrapper and sends it to the server, which rebuilds
it and maps the *same* device memory (``to_tensor``: the same form, aliases, never a
copy). Both sides then read and write the engine's KV blocks directly.
{% if cookiecutter.ownership == 'in_tree' %}The wrapper travels as a msgspec
descriptor (``to_wire`` / ``from_wire``): ``{{ cookiecutter.class_prefix }}IPCData``,
which this contribution adds to LMCache's wire allowlist in
``lmcache/v1/platform/base/ipc_wire.py``.

Imported lazily (``ipc_wrapper_cls``, or LMCache's wire codec), never during
``import lmcache``: LMCache's base class imports ``lmcache.torch_dev``.
{%- else %}lmcache 0.5.4/0.5.5 pickle the wrapper (its
attributes are plain data; ``__getstate__`` leaves the mapping behind); 0.5.6
sends a msgspec descriptor (``to_wire`` / ``from_wire``, registered through
``_lmcache_compat.wire``: the kit's ``lmcache_device_kit.compat.wire``).

Imported lazily (``ipc_wrapper_cls``, or LMCache's wire codec through the alias
module ``wire.register`` installed), never during ``import lmcache``:
LMCache's base class imports ``lmcache.torch_dev``.
{%- endif %}
"""
{%- set wire = "" if cookiecutter.ownership == "in_tree" else "wire." %}
{%- set wire_data = wire ~ cookiecutter.class_prefix ~ "IPCData" %}
{%- set plane_data = wire ~ cookiecutter.class_prefix ~ "PlaneData" %}
{#- a wheel's descriptor classes are made at run time (the kit's WireType): no static type #}
{%- set wire_type = wire_data if cookiecutter.ownership == "in_tree" else "Any" %}
{%- set ipc_wire = "" if cookiecutter.ownership == "in_tree" else "wire.ipc_wire." %}

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from typing import {{ "Any, " if cookiecutter.ownership == "wheel" else "" }}ClassVar, NamedTuple
import threading

# Third Party
import torch
{%- if cookiecutter.ownership == 'in_tree' %}

# First Party
from lmcache.v1.platform.base.ipc_wire import (
{#- isort (LMCache's order_by_type): the constant, then the classes #}
{%- for name in ["DTYPES"] + (["TensorMetadata", cookiecutter.class_prefix ~ "IPCData", cookiecutter.class_prefix ~ "PlaneData"] | sort(case_sensitive=False)) %}
    {{ name }},
{%- endfor %}
)
{%- endif %}

# Local
from . import _ipc_rendezvous
from ._lmcache_compat import DeviceIPCWrapper, init_logger{{ ", wire" if cookiecutter.ownership == "wheel" else "" }}
from .device_ops import device_tensor
from .names import DEVICE_TYPE, TORCH_MODULE_NAME
from .runtime import on_device

logger = init_logger(__name__)

# The allocations this process has opened, by handle: handle -> [address, references].
# A device runtime gives one mapping per (process, allocation) however often it
# is opened, and one close unmaps it for every user, while the layers of a KV
# cache often share one allocation: so opens are counted here and the handle is
# closed only when the last reference goes. An unclosed mapping keeps the
# exporter's memory resident, even after the exporter exits.
_MAPPED_ALLOCATIONS: dict[bytes, list[int]] = {}
_MAPPINGS_LOCK = threading.Lock()


def _runtime() -> object:
    return getattr(torch, TORCH_MODULE_NAME)


def _export_handle(address: int, device_index: int) -> tuple[bytes, int, int]:
    """``(handle, offset of address in the allocation, allocation size)`` for memory
    of device ``device_index``.

    TODO(vendor): return your runtime's IPC handle for the allocation holding
    ``address`` (what cudaIpcGetMemHandle, or your driver's export call, gives),
    as bytes. This version uses the CPU emulator's handles.
    """
    with on_device(device_index) as runtime:  # a worker's heartbeat thread re-exports
        return runtime.ipc_export_handle(address)  # type: ignore[no-any-return]


def _open_handle(handle: bytes, nbytes: int, device_index: int) -> int:
    """Map an exported allocation of ``nbytes`` in this process: its device address
    here.

    TODO(vendor): open the handle with your runtime on ``device_index``
    (cudaIpcOpenMemHandle-like). Called once per allocation and process.
    """
    with on_device(device_index) as runtime:  # the server maps on threads of its own
        return int(runtime.ipc_open_handle(handle, nbytes, device_index))


def _close_handle(address: int, device_index: int) -> None:
    """Unmap an allocation opened by ``_open_handle``, for every user in this process.

    TODO(vendor): your runtime's close call (cudaIpcCloseMemHandle-like).
    """
    with on_device(device_index) as runtime:
        runtime.ipc_close_handle(address)


#: One layer as the engine registered it: a tensor, or its planes ((K, V) tuples).
Layer = torch.Tensor | Sequence[torch.Tensor]


class Plane(NamedTuple):
    """One exported tensor view: its allocation's handle and the view's place in it."""

    handle: bytes
    alloc_offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int

    @classmethod
    def export(cls, tensor: torch.Tensor, device_index: int) -> Plane:
        address = tensor.untyped_storage().data_ptr()
        exported = _ipc_rendezvous.export(address, device_index, _export_handle)
        handle, alloc_offset, nbytes = exported
        return cls(
            handle,
            alloc_offset,
            nbytes,
            tensor.dtype,
            tuple(tensor.shape),
            tuple(tensor.stride()),
            int(tensor.storage_offset()),
        )


class {{ cookiecutter.class_prefix }}IPCWrapper(DeviceIPCWrapper):
    """One {{ cookiecutter.device_name }} KV layer exported through device IPC memory
    handles: a ``Plane`` per tensor; ``bare``: registered as a tensor, not a sequence
    (only then are the base class's single-tensor fields set, as NPU's wrapper does)."""

    device_type: ClassVar[str] = DEVICE_TYPE
    planes: tuple[Plane, ...]
    bare: bool

    def __init__(self, value: Layer) -> None:
        tensors = [value] if isinstance(value, torch.Tensor) else list(value)
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise ValueError(
                f"{type(self).__name__} wraps a {DEVICE_TYPE} tensor or one layer's "
                f"planes (a non-empty sequence of tensors), got {value!r:.80}"
            )
        device = tensors[0].device
        if device.type != DEVICE_TYPE or any(t.device != device for t in tensors):
            raise ValueError(
                f"{type(self).__name__} wraps {DEVICE_TYPE} tensors on one device, "
                f"got {', '.join(str(t.device) for t in tensors)}"
            )
        index = device.index
        if index is None:
            index = _runtime().current_device()  # type: ignore[attr-defined]
        self._init_planes(
            tuple(Plane.export(t, index) for t in tensors),
            isinstance(value, torch.Tensor),
            self._get_device_uuid(index),
        )

    def _init_planes(self, planes: tuple[Plane, ...], bare: bool, uuid: str) -> None:
        self.planes, self.bare, self.device_uuid = planes, bare, uuid
        if bare:
            (plane,) = planes
            self.handle, self.dtype, self.shape = plane.handle, plane.dtype, plane.shape
            self.stride, self.storage_offset = plane.stride, plane.storage_offset
        # this wrapper's references in _MAPPED_ALLOCATIONS, one handle per reference
        self._opened: list[bytes] = []

    @classmethod
    def wrap(cls, value: Layer) -> {{ cookiecutter.class_prefix }}IPCWrapper:
        """The factory LMCache's ``resolve_kv_wrapper_factory`` returns for this
        device."""
        return cls(value)

    def to_tensor(self) -> torch.Tensor | tuple[torch.Tensor, ...]:  # type: ignore[override]
        """The worker's layer, mapped into this process (same memory, no copy): a
        tensor, or the tuple of its planes in registration order.

        Takes one reference per plane on the process's mapping of its allocation
        (opened on first use); ``close`` gives back every reference this wrapper
        took.
        """
        index = self._get_device_index_from_uuid(self.device_uuid)
        views = tuple(self._map(plane, index) for plane in self.planes)
        return views[0] if self.bare else views

    def _map(self, plane: Plane, index: int) -> torch.Tensor:
        itemsize = plane.dtype.itemsize
        if plane.alloc_offset % itemsize:
            raise ValueError(
                f"storage offset {plane.alloc_offset} is not aligned to {plane.dtype}"
            )
        with _MAPPINGS_LOCK:
            entry = _MAPPED_ALLOCATIONS.get(plane.handle)
            if entry is None:
                wire, nbytes = plane.handle, plane.nbytes
                entry = [_ipc_rendezvous.map_wire(wire, nbytes, index, _open_handle), 0]
                _MAPPED_ALLOCATIONS[plane.handle] = entry
            entry[1] += 1
            self._opened.append(plane.handle)
        typed = device_tensor(
            entry[0],
            (plane.nbytes // itemsize,),
            plane.dtype,
            torch.device(DEVICE_TYPE, index),
        )
        return typed.as_strided(
            plane.shape,
            plane.stride,
            plane.alloc_offset // itemsize + plane.storage_offset,
        )

    def close(self) -> None:
        """Give back this wrapper's references; an allocation's last user unmaps it
        (idempotent).

        Tensors from ``to_tensor`` must not be used after the last close. A
        failing unmap is logged, not raised: close runs on teardown paths that
        must go on to the next wrapper.
        """
        with _MAPPINGS_LOCK:
            opened, self._opened = self.__dict__.get("_opened", []), []
            for handle in opened:
                entry = _MAPPED_ALLOCATIONS.get(handle)
                if entry is None:
                    continue
                entry[1] -= 1
                if entry[1] > 0:
                    continue
                del _MAPPED_ALLOCATIONS[handle]
                try:
                    _close_handle(
                        entry[0], self._get_device_index_from_uuid(self.device_uuid)
                    )
                except Exception:
                    logger.warning(
                        "closing the %s IPC mapping at 0x%x failed",
                        DEVICE_TYPE,
                        entry[0],
                        exc_info=True,
                    )

    def __eq__(self, other: object) -> bool:
        # The base class compares the single-tensor fields a plane wrapper leaves unset.
        return (
            type(other) is type(self)
            and (self.planes, self.bare, self.device_uuid)
            == (other.planes, other.bare, other.device_uuid)  # type: ignore[attr-defined]
        )

    def __hash__(self) -> int:
        return hash((self.planes, self.bare, self.device_uuid))

    def __getstate__(self) -> dict[str, object]:
        """What pickle sends (lmcache 0.5.4/0.5.5): everything but this process's
        references."""
        return {**self.__dict__, "_opened": []}

    def to_wire(self) -> {{ wire_type }}:
        """The lmcache 0.5.6+ wire descriptor: each plane's handle and view."""
        return {{ wire_data }}(
            version=1,
            bare=self.bare,
            planes=tuple(
                {{ plane_data }}(
                    handle=plane.handle,
                    alloc_offset=plane.alloc_offset,
                    nbytes=plane.nbytes,
                    metadata={{ ipc_wire }}TensorMetadata(
                        str(plane.dtype).removeprefix("torch."),
                        plane.shape,
                        plane.stride,
                        plane.storage_offset,
                        self.device_uuid,
                    ),
                )
                for plane in self.planes
            ),
        )

    @classmethod
    def from_wire(  # type: ignore[override]
        cls,
        data: {{ wire_type }},
    ) -> {{ cookiecutter.class_prefix }}IPCWrapper:
        """Rebuild from a validated descriptor without opening anything yet."""
        wrapper = object.__new__(cls)
        planes = tuple(
            Plane(
                p.handle,
                p.alloc_offset,
                p.nbytes,
                {{ ipc_wire }}DTYPES[p.metadata.dtype],
                tuple(p.metadata.shape),
                tuple(p.metadata.stride),
                p.metadata.storage_offset,
            )
            for p in data.planes
        )
        wrapper._init_planes(planes, data.bare, data.planes[0].metadata.device_uuid)
        return wrapper
{%- if cookiecutter.ownership == 'wheel' %}


# lmcache 0.5.6's codec only accepts wrappers that live under
# lmcache.v1.platform.devices; wire.register installed an alias module
# there that resolves to this class (a no-op on releases that pickle wrappers).
wire.publish_wrapper_class({{ cookiecutter.class_prefix }}IPCWrapper)
{%- endif %}
