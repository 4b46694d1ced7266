# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Cross-process ordering for LMCache-driven transfers: events exported by handle.

The worker records a {{ cookiecutter.device_name }} event after its forward pass and
exports it; the server imports it and makes its copy stream wait on it (and the
reverse on completion). LMCache's ``DefaultEventIPCBackend`` implements this over
any CUDA-style ``Event`` with ``interprocess=True``, ``ipc_handle()`` and
``Event.from_ipc_handle(device, handle)``;
``torch.{{ cookiecutter.__torch_module_name }}.Event`` provides them.

Imported lazily by ``{{ cookiecutter.class_prefix }}DeviceSpec.event_ipc_backend``.
"""

# Future
from __future__ import annotations

# Standard
from collections import deque
from contextlib import AbstractContextManager, nullcontext
import threading

# Third Party
import torch

# Local
from ._lmcache_compat import DefaultEventIPCBackend
from .names import DEVICE_TYPE, TORCH_MODULE_NAME

#: Exported events kept alive, newest last: a destroyed event's handle is stale on a
#: device, and the importer may open it later. LMCache 0.5.5+ keeps as many itself;
#: 0.5.4 keeps none.
EXPORTED_EVENTS_KEPT = 2048


class {{ cookiecutter.class_prefix }}EventIPCBackend(DefaultEventIPCBackend):
    """LMCache's default event IPC over ``torch.{{ cookiecutter.__torch_module_name }}``, with a real
    capability probe."""

    def __init__(self) -> None:
        super().__init__(
            event_module=getattr(torch, TORCH_MODULE_NAME, None),
            device_type=DEVICE_TYPE,
        )
        self._kept: deque[object] = deque(maxlen=EXPORTED_EVENTS_KEPT)
        # (a stream that queued a wait, the event it waits on), oldest first
        self._waits: deque[tuple[object, object]] = deque()
        self._waits_lock = threading.Lock()

    def check_event_support(self, device: object) -> None:
        """Raise RuntimeError unless interprocess events really work on ``device``.

        LMCache's default check only inspects signatures; this also creates an
        interprocess event and exports its handle, so a runtime that declares
        IPC but cannot do it fails here, before any transfer.
        TODO(vendor): if your runtime has its own event ABI, implement the whole
        EventIPCBackend protocol here instead of subclassing the default.
        """
        # LMCache's base class substitutes its active device's module for None
        if getattr(torch, TORCH_MODULE_NAME, None) is None:
            raise RuntimeError(
                f"torch.{TORCH_MODULE_NAME} is not loaded: "
                f"no {DEVICE_TYPE} events are available"
            )
        super().check_event_support(device)
        try:
            handle = self.export_event(self.create_event(device), device)
        except Exception as exc:
            raise RuntimeError(
                f"{DEVICE_TYPE} interprocess events are declared but unusable "
                f"({exc!r}); use engine_driven transfer on this host"
            ) from exc
        if not isinstance(handle, bytes | bytearray) or not handle:
            raise RuntimeError(
                f"{DEVICE_TYPE} Event.ipc_handle() returned {handle!r}, "
                "expected non-empty bytes"
            )

    def create_event(self, device: object) -> object:
        """An interprocess event on ``device`` itself: events belong to the device
        current at creation."""
        with self._on(device):
            return super().create_event(device)

    def export_event(self, event: object, device: object) -> bytes:
        """The event's handle; the event stays alive for the next
        ``EXPORTED_EVENTS_KEPT`` exports."""
        with self._on(device):
            handle = super().export_event(event, device)
        self._kept.append(event)
        return handle

    def import_event(self, handle: bytes, device: object) -> object:
        with self._on(device):
            return super().import_event(handle, device)

    def wait_event(self, event: object, stream: object) -> None:
        """Queue ``stream``'s wait on ``event``, and hold ``event`` until the stream has
        run out of work (so past the wait): a queued wait refers to its event until
        then, and LMCache drops an imported event when its handler returns (0.5.4,
        0.5.5; from 0.5.6 it holds imports itself, ``hold_imported_event``).
        TODO(vendor): nothing, unless your runtime keeps an import alive for its waits.
        """
        super().wait_event(event, stream)
        with self._waits_lock:
            self._waits.append((stream, event))
            while self._waits and _has_run(self._waits[0][0]):
                self._waits.popleft()

    def _on(self, device: object) -> AbstractContextManager[object]:
        """``device`` made current (LMCache's NPU backend does the same); TODO(vendor):
        your runtime's guard."""
        index = getattr(device, "index", None)
        if index is None:
            return nullcontext()
        return getattr(torch, TORCH_MODULE_NAME).device(index)  # type: ignore[no-any-return]


def _has_run(stream: object) -> bool:
    """Whether ``stream`` has run everything queued on it (a wait queued before
    included); a failed stream has (its work will not run, and its waits refer to
    nothing any more). No event is recorded for it: a wait costs no allocation."""
    query = getattr(stream, "query", None)
    try:
        return query is None or bool(query())
    except RuntimeError:
        return True
