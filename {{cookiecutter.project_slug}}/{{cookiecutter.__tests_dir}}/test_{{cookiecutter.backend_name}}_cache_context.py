# SPDX-License-Identifier: {{ cookiecutter.license }}
"""The server's cache context over a worker's mapped KV caches.

As ``npu/test_npu_cache_context.py`` does for NPU: the host-callback stream adapter
and the ops' completion and event recorders (the server publishes through them only
after its stream's queued copies have run), ``close`` and the spec's hook run against
test doubles on any host; on the device, a context built from wrapped KV caches
holds their pointer tables and stages chunks in device memory.
"""

# Standard
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
    cache_context,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.device_ops import (
    {{ cookiecutter.class_prefix }}DeviceOps,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.ipc_wrapper import (
    {{ cookiecutter.class_prefix }}IPCWrapper,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)

Context = cache_context.{{ cookiecutter.class_prefix }}CacheContext
HostCallbackStream = cache_context.HostCallbackStream
Wrapper = {{ cookiecutter.class_prefix }}IPCWrapper
NL, NB, BS, NH, HS, CHUNK = 3, 8, 16, 2, 64, 32


def _stub_runtime(monkeypatch: pytest.MonkeyPatch, calls: list[Any]) -> None:
    """A runtime whose streams have handle 0x1234 and record their synchronizations."""
    runtime = SimpleNamespace(
        stream_handle=lambda stream: 0x1234,
        synchronize_stream_handle=lambda handle: calls.append(("sync", handle)),
    )
    monkeypatch.setattr(torch, TORCH_MODULE_NAME, runtime, raising=False)


def test_host_callback_stream_ptr_is_the_native_handle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _stub_runtime(monkeypatch, [])
    assert HostCallbackStream(object()).ptr == 0x1234


def test_host_callback_runs_after_the_streams_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Any] = []
    _stub_runtime(monkeypatch, calls)
    HostCallbackStream(object()).launch_host_func(calls.append, 42)
    assert calls == [("sync", 0x1234), 42]


@pytest.mark.parametrize("fail", [False, True])
@pytest.mark.parametrize("event", [False, True])
def test_publication_waits_for_the_stream(
    monkeypatch: pytest.MonkeyPatch, fail: bool, event: bool
) -> None:
    """Nothing is published before the stream's queued work has run, nor after
    its synchronization failed."""
    ops = {{ cookiecutter.class_prefix }}DeviceOps()
    ops.drain_recorded_completions()
    ops.drain_recorded_events()
    synchronized: list[int] = []

    def synchronize(handle: int) -> None:
        assert ops.drain_recorded_completions() == []
        assert ops.drain_recorded_events() == []
        synchronized.append(handle)
        if fail:
            raise RuntimeError("stream failed")

    runtime = SimpleNamespace(synchronize_stream_handle=synchronize)
    monkeypatch.setattr(torch, TORCH_MODULE_NAME, runtime, raising=False)

    def publish() -> None:
        if event:
            ops.record_event_on_stream(123, "store", "session", {"k": "v"}, {"n": 1})
        else:
            ops.record_completion_on_stream(123, "store", b"payload")

    if fail:
        with pytest.raises(RuntimeError, match="stream failed"):
            publish()
        assert ops.drain_recorded_completions() == []
        assert ops.drain_recorded_events() == []
        return
    publish()
    assert synchronized == [123]
    if event:
        (record,) = ops.drain_recorded_events()
        assert (record[0], record[1], record[3], record[4]) == (
            "store",
            "session",
            {"k": "v"},
            {"n": 1},
        )
    else:
        assert ops.drain_recorded_completions() == [("store", b"payload")]


class _Double(Context):
    """A context with test doubles instead of mapped caches (its __init__ needs
    the device)."""

    def __init__(self, calls: list[str], wrappers: int, fail: bool = False) -> None:
        def synchronize() -> None:
            calls.append("synchronize")
            if fail:
                raise RuntimeError("device lost")

        def closer(name: str) -> Callable[[], None]:
            return lambda: calls.append(name)

        self._stream = SimpleNamespace(synchronize=synchronize)
        names = ["first", "second"][:wrappers]
        self._wrappers = [SimpleNamespace(close=closer(n)) for n in names]
        self._closed = False
        self._group_pointers = []
        self._views = {}


@pytest.mark.parametrize("wrappers", [0, 1, 2])
def test_close_synchronizes_before_releasing_the_mappings(wrappers: int) -> None:
    """Close waits for queued copies, unmaps every wrapper and is idempotent."""
    calls: list[str] = []
    context = _Double(calls, wrappers)
    context.close()
    context.close()
    assert calls == ["synchronize", *["first", "second"][:wrappers]]


def test_close_releases_the_mappings_when_the_device_is_lost() -> None:
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="device lost"):
        _Double(calls, 2, fail=True).close()
    assert calls == ["synchronize", "first", "second"]


def test_device_spec_creates_the_cache_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spec hook constructs the context with LMCache's arguments."""
    created: dict[str, Any] = {}

    def fake_init(self: object, kv_caches: object, chunk: int = 256) -> None:
        created.update(kv_caches=kv_caches, chunk=chunk)

    monkeypatch.setattr(Context, "__init__", fake_init)
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    context = spec.create_cache_context(["wrapped"], 128)
    assert isinstance(context, Context)
    assert created == {"kv_caches": ["wrapped"], "chunk": 128}


def test_a_context_without_caches_is_refused() -> None:
    with pytest.raises(ValueError, match="got none"):
        Context([])


@requires_device
def test_context_over_wrapped_caches_tables_and_stages_on_the_device() -> None:
    layers = [torch.zeros(2, NB, BS, NH, HS, device=DEVICE_TYPE) for _ in range(NL)]
    wrappers = [Wrapper.wrap(layer) for layer in layers]
    context = Context(wrappers, CHUNK)
    try:
        pointers = context.get_kernel_group_kv_pointers(0)
        assert pointers.dtype == torch.int64 and pointers.device.type == DEVICE_TYPE
        mapped = [t.data_ptr() for t in context.kv_caches_]
        assert pointers.cpu().tolist() == mapped
        shape, dtype = context.get_kernel_group_shape_dtype(CHUNK, 0)
        assert tuple(shape) == (2, NL, CHUNK, NH * HS) and dtype == torch.float32
        staged = context.get_temp_kernel_group_buffer(1, 0)
        assert staged.shape == shape and staged.device.type == DEVICE_TYPE
        flat = context.get_temp_object_group_buffer(1, 0)
        assert flat.data_ptr() == staged.data_ptr()
        assert flat.nbytes == shape.numel() * dtype.itemsize
        with pytest.raises(ValueError, match="Invalid batch_idx"):
            context.get_temp_kernel_group_buffer(context.max_batch_size, 0)
    finally:
        context.close()
