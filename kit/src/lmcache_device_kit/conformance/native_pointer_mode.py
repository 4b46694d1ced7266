# SPDX-License-Identifier: Apache-2.0
"""The native ops on the LMCache-driven server's call shape (pointer mode).

The server passes a table of layer addresses, chunk addresses in the cache
context's staging buffer and block ids in device memory; the kernels must run
there too (not the baseline) with the bytes of LMCache's CPU gather, as the
baseline they fall back to must (strided caches included), read the ids on the
device as LMCache's CUDA kernel does, and fail as a device fails on an id outside
the cache. Skipped without native ops or without LMCache-driven transfer
(``requires``).

Imports torch (through ``support``); lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import functools
import importlib

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.native_contract import transfer_path, transfers
from lmcache_device_kit.conformance.streams import held
from lmcache_device_kit.conformance.support import (
    BLOCK_IDS,
    BS,
    LAYERS,
    STRIDED,
    context_transfer,
    gather_to_cpu,
    run_python,
    same_bytes,
    seeded_kv,
)
from lmcache_device_kit.harness import lmcache_calls
from lmcache_device_kit.harness.worker_kv import padding_intact, planes_of, strided

#: Per-layer shapes of a cache context's layers (exportable: 64 KiB and more);
#: ``kv_planes``: each of a layer's (K, V) planes, an allocation of its own.
POINTER_MODE_SHAPES = {
    "flash_nhd": (2, 32, BS, 2, 32),
    "mla": (32, BS, 64),
    "kv_planes": (32, BS, 2, 32),
}


def pointer_mode_kv(layout: str, seed: int) -> dict[str, Any]:
    """A worker's layers on the CPU: tensors, or (K, V) tuples for ``kv_planes``."""
    shape = POINTER_MODE_SHAPES[layout]
    if layout != "kv_planes":
        return seeded_kv(shape, seed)
    planes = list(seeded_kv(shape, seed, layers=2 * LAYERS).values())
    return {f"layer.{i}": (planes[2 * i], planes[2 * i + 1]) for i in range(LAYERS)}


def on(device: str, layer: Any, case: str = "") -> Any:
    """A layer on ``device``: strided as STRIDED[case] says, if it names one."""
    if isinstance(layer, tuple):
        return tuple(plane.to(device) for plane in layer)
    if case in STRIDED:
        return strided(layer, device, *STRIDED[case][1:])
    return layer.to(device)


def context_of(kv: dict[str, Any], chunk: int, hints: dict[str, str]) -> Any:
    """A cache context over ``kv``, built by LMCache's factory as the server does."""
    # First Party
    from lmcache.v1.platform.cache_context import create_cache_context
    from lmcache.v1.platform.kv_wrap import wrap_kv_caches

    return create_cache_context(wrap_kv_caches(kv), chunk, hints)


def directions() -> Any:
    """LMCache's ``TransferDirection``, as the plugin's compat layer finds it."""
    package = kit_backend.current().package
    return importlib.import_module(f"{package}._lmcache_compat").TransferDirection


class BaseNativePointerModeTests(ConformanceTests):
    """The kernels on a cache context's staging buffer: bytes, ids' lifetime, bounds."""

    requires = frozenset({"native_ops", "lmcache_driven"})

    @pytest.mark.parametrize("path", ["native", "baseline"])
    @pytest.mark.parametrize("case", sorted(POINTER_MODE_SHAPES) + list(STRIDED))
    def test_pointer_mode_transfers_equal_lmcaches_gather_natively_and_on_the_baseline(  # noqa: E501
        self, native: Any, runtime: Any, case: str, path: str
    ) -> None:
        """The LMCache-driven server's call shape (a table of layer addresses, chunks
        in the staging buffer) runs the kernels, or the ops class's torch baseline
        (what they fall back to), D2H and H2D, with the bytes of LMCache's CPU gather;
        per-layer (K, V) planes too: the chunk holds every K, then every V; strided
        caches too, their padding never written."""
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        device = kit_backend.current().device_type
        layout = STRIDED[case][0] if case in STRIDED else case
        if layout == "kv_planes" and not lmcache_calls.wraps_plane_sequences():
            pytest.skip(
                "this lmcache wraps only tensors: plane tuples arrive with 0.5.6"
            )
        hints = {"kv_layout": "NHD"}
        source = pointer_mode_kv(layout, seed=13)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = {name: on(device, layer, case) for name, layer in source.items()}
        chunk = 2 * BS
        context = context_of(kv, chunk, hints)
        staging = [
            context.get_temp_kernel_group_buffer(i, 0) for i in range(len(expected))
        ]
        ids = torch.tensor(BLOCK_IDS, dtype=torch.long, device=context.device)
        ops = resolve_device_ops(device)
        copy = ops.multi_layer_block_kv_transfer  # bound to the native op
        # The format the context hands the op; the plugin declares its path.
        kv_format = context.get_engine_kv_format(0).name
        taken = transfer_path(native, kv_format)
        if path == "baseline":
            copy = functools.partial(type(ops).multi_layer_block_kv_transfer, ops)

        def transfer(direction: Any) -> None:
            # Counted around the call alone: on lmcache 0.5.4/0.5.5 the CPU helpers of
            # this test reach these ops too (LMCache resolves them process-wide there).
            before = transfers(native)
            addresses = [buffer.data_ptr() for buffer in staging]
            context_transfer(context, addresses, ids, direction, chunk, copy)
            ran = {p: int(path == "native" and p == taken) for p in before}
            assert transfers(native) == {p: before[p] + ran[p] for p in before}, (
                f"expected the {taken} path for {kv_format}, as NATIVE_KV_FORMATS says"
            )
            runtime.synchronize()

        transfer(directions().D2H)
        got = [buffer.cpu().reshape(-1).view(torch.uint8) for buffer in staging]
        want = [chunk_bytes.reshape(-1).view(torch.uint8) for chunk_bytes in expected]
        assert all(same_bytes(g, w) for g, w in zip(got, want, strict=True))
        for layer in kv.values():
            for plane in planes_of(layer):
                plane.zero_()
        transfer(directions().H2D)
        back = {name: on("cpu", layer) for name, layer in kv.items()}
        restored = gather_to_cpu(back, BLOCK_IDS, 2, layout_hints=hints)
        assert all(same_bytes(r, e) for r, e in zip(restored, expected, strict=True))
        assert all(padding_intact(layer) for layer in kv.values()), "padding written"
        context.close()

    def test_a_queued_kernel_keeps_the_ids_memory_alive_but_not_their_python_object(
        self, native: Any, runtime: Any
    ) -> None:
        """The block ids' memory outlives the caller's tensor until the kernel has run,
        and the kernel does not hold the tensor itself: releasing its last reference on
        the stream thread would take the GIL there, so the device would wait for
        Python."""
        # Standard
        import weakref

        hints = {"kv_layout": "NHD"}
        source = seeded_kv(POINTER_MODE_SHAPES["flash_nhd"], seed=14)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        device = kit_backend.current().device_type
        kv = {name: t.to(device) for name, t in source.items()}
        context = context_of(kv, 2 * BS, hints)
        staging = [
            context.get_temp_kernel_group_buffer(i, 0) for i in range(len(expected))
        ]

        def transfer(ids: torch.Tensor) -> None:
            addresses = [buffer.data_ptr() for buffer in staging]
            context_transfer(context, addresses, ids, directions().D2H, 2 * BS)

        # Outside the hold, as a server's first transfer: the op reads the context's
        # pointer table from the device once, and a tensor built from a list is a
        # blocking copy.
        transfer(torch.tensor(BLOCK_IDS, dtype=torch.long, device=context.device))
        runtime.synchronize()
        for buffer in staging:
            buffer.zero_()
        ids = torch.tensor(BLOCK_IDS, dtype=torch.long, device=context.device)
        tensor = weakref.ref(ids)
        with held(runtime.current_stream()):
            transfer(ids)
            del ids
            assert tensor() is None, "the queued kernel holds the ids tensor (Python's)"
        runtime.synchronize()
        got = [buffer.cpu().reshape(-1).view(torch.uint8) for buffer in staging]
        want = [chunk_bytes.reshape(-1).view(torch.uint8) for chunk_bytes in expected]
        assert all(same_bytes(g, w) for g, w in zip(got, want, strict=True))
        context.close()

    def test_a_device_block_id_outside_the_cache_fails_the_stream_not_the_bytes(
        self, native: Any, runtime: Any
    ) -> None:
        """An id past the cache, read by the kernel on the device, fails the next
        synchronization (a device's sticky error); no byte of the staging is written.
        In a process of its own: as on a device, the error leaves the stream
        unusable."""
        code = """
import torch, lmcache
from lmcache.v1.platform import resolve_device_ops
from lmcache.v1.platform.cache_context import create_cache_context
from lmcache.v1.platform.kv_wrap import wrap_kv_caches
from PACKAGE._lmcache_compat import TransferDirection
kv = dict((f"layer.{i}", torch.ones(SHAPE, dtype=torch.float16).to("DEVICE"))
          for i in range(3))
context = create_cache_context(wrap_kv_caches(kv), CHUNK, {"kv_layout": "NHD"})
staging = context.get_temp_kernel_group_buffer(0, 0)
staging.zero_()
beyond = torch.tensor([3, 32], dtype=torch.long, device=context.device)
resolve_device_ops("DEVICE").multi_layer_block_kv_transfer(
    context.get_kernel_group_kv_pointers(0), [staging.data_ptr()], beyond,
    context.device, TransferDirection.D2H, context.get_shape_desc(0), CHUNK,
    context.get_engine_kv_format(0), 0)
try:
    torch.TORCH_MODULE.synchronize()
except RuntimeError as exc:
    print("raised:", exc)
with torch.TORCH_MODULE.stream(torch.TORCH_MODULE.Stream()):  # not the failed one
    print("written:", int(staging.view(torch.uint8).cpu().count_nonzero()))
"""
        backend = kit_backend.current()
        for name, value in {
            "PACKAGE": backend.package,
            "DEVICE": backend.device_type,
            "TORCH_MODULE": backend.torch_module_name,
            "SHAPE": str(POINTER_MODE_SHAPES["flash_nhd"]),
            "CHUNK": str(2 * BS),
        }.items():
            code = code.replace(name, value)
        done = run_python(code)
        # What the error says is the plugin's own wording (the sample's: its
        # tests/test_sample_kernels.py).
        assert "raised:" in done.stdout, done.stderr[-3000:]
        assert done.stdout.strip().splitlines()[-1] == "written: 0", done.stdout
