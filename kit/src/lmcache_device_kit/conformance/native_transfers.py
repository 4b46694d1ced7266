# SPDX-License-Identifier: Apache-2.0
"""The native ops' transfers on the engine-driven call shape (tensors): equal to the
baseline, in stream order, strided caches as they lie, ids checked at the call.

Gated on the package shipping ``native_ops`` (``requires``). The binding itself is
``native_ops.py``; the LMCache-driven server's call shape, ``native_pointer_mode.py``.

Imports torch (through ``support``); lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.streams import held
from lmcache_device_kit.conformance.support import (
    BLOCK_IDS,
    BS,
    KV_LAYOUTS,
    STRIDED,
    gather_to_cpu,
    same_bytes,
    seeded_kv,
)
from lmcache_device_kit.harness.worker_kv import padding_intact, strided

#: Formats the sample kernels handle, and one they hand back to the baseline.
NATIVE_LAYOUTS = {
    name: KV_LAYOUTS[name] for name in ("flash_nhd", "flashinfer_nhd", "mla")
}
FALLBACK_LAYOUTS = {"flash_hnd": KV_LAYOUTS["flash_hnd"]}


def on_device(kv: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    device = kit_backend.current().device_type
    return {name: t.to(device) for name, t in kv.items()}


def scatter(kv: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """LMCache's ``scatter_cpu_to_paged_kv`` (the H2D call site)."""
    # First Party
    from lmcache.v1.multiprocess.transfer_context.base import scatter_cpu_to_paged_kv

    scatter_cpu_to_paged_kv(kv, *args, **kwargs)


def gather_into(kv: dict[str, Any], *args: Any, **kwargs: Any) -> None:
    """LMCache's ``gather_paged_kv_to_cpu`` (the D2H call site), not synchronized."""
    # First Party
    from lmcache.v1.multiprocess.transfer_context.base import gather_paged_kv_to_cpu

    gather_paged_kv_to_cpu(kv, *args, **kwargs)


class BaseNativeTransfersTests(ConformanceTests):
    """Bytes, order and bounds of the native transfers, against LMCache's baseline."""

    requires = frozenset({"native_ops"})

    @pytest.mark.parametrize("skip_blocks", [0, 1, 3], ids=["skip0", "skip1", "skip3"])
    @pytest.mark.parametrize(
        "dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"]
    )
    @pytest.mark.parametrize("layout", list(NATIVE_LAYOUTS) + list(FALLBACK_LAYOUTS))
    def test_native_transfers_equal_the_baseline_both_ways(
        self, native: Any, layout: str, dtype: torch.dtype, skip_blocks: int
    ) -> None:
        """D2H and H2D through the bound op equal the CPU baseline byte for byte;
        supported formats run natively."""
        shape, hints = {**NATIVE_LAYOUTS, **FALLBACK_LAYOUTS}[layout]
        source = seeded_kv(shape, seed=11, dtype=dtype)
        before = dict(native._calls)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        got = gather_to_cpu(on_device(source), BLOCK_IDS, 2, layout_hints=hints)
        assert all(same_bytes(g, e) for g, e in zip(got, expected, strict=True))
        zeros = {k: torch.zeros_like(v) for k, v in source.items()}
        into = on_device(zeros)
        skip_tokens = skip_blocks * BS
        for kv in (zeros, into):
            scatter(
                kv,
                BLOCK_IDS,
                expected,
                2,
                skip_first_n_tokens=skip_tokens,
                layout_hints=hints,
            )
        assert all(same_bytes(into[k], zeros[k]) for k in zeros)
        path = "native" if layout in NATIVE_LAYOUTS else "fallback"
        key = f"multi_layer_block_kv_transfer:{path}"
        assert native._calls[key] >= before.get(key, 0) + 2, (
            f"expected the {path} path for {layout}"
        )

    def test_native_transfers_run_in_stream_order_not_on_the_host_at_call_time(
        self, native: Any, runtime: Any
    ) -> None:
        """A native gather queued behind pending work writes nothing until that work
        has run, then the right bytes: kernels are launched on the device's current
        stream (not run on the host, not on a stream of their own)."""
        shape, hints = NATIVE_LAYOUTS["flash_nhd"]
        source = seeded_kv(shape, seed=12)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = on_device(source)
        # Pinned: a kernel is given no pageable chunk, and waits for none.
        out = [torch.zeros_like(chunk, pin_memory=True) for chunk in expected]
        before = native._calls["multi_layer_block_kv_transfer:native"]
        with held(runtime.current_stream()) as hold:
            gather_into(kv, BLOCK_IDS, 2, layout_hints=hints, out=out)
            hold.settle()
            early = [int(chunk.count_nonzero()) for chunk in out]
        runtime.synchronize()
        assert native._calls["multi_layer_block_kv_transfer:native"] > before, (
            "the native kernel did not run"
        )
        assert early == [0] * len(out), (
            "the kernel ran ahead of the current stream's work "
            "(on the host or another stream)"
        )
        pairs = zip(out, expected, strict=True)
        assert all(same_bytes(got, want) for got, want in pairs)

    @pytest.mark.parametrize("case", list(STRIDED))
    def test_strided_caches_copy_each_blocks_bytes_and_never_the_padding(
        self, native: Any, case: str
    ) -> None:
        """Blocks apart in memory: a gather reads each block's own bytes and a scatter
        writes them and leaves the padding as it was, on the native path. A copy that
        takes the blocks as back to back passes every contiguous test."""
        device = kit_backend.current().device_type
        layout, memory, block_dim = STRIDED[case]
        shape, hints = NATIVE_LAYOUTS[layout]
        source = seeded_kv(shape, seed=14)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        before = native._calls["multi_layer_block_kv_transfer:native"]
        views = {k: strided(v, device, memory, block_dim) for k, v in source.items()}
        got = gather_to_cpu(views, BLOCK_IDS, 2, layout_hints=hints)
        assert all(same_bytes(g, e) for g, e in zip(got, expected, strict=True))
        want = {k: torch.zeros_like(v) for k, v in source.items()}
        into = {k: strided(v, device, memory, block_dim) for k, v in want.items()}
        for kv in (want, into):
            scatter(kv, BLOCK_IDS, expected, 2, layout_hints=hints)
        for name, view in into.items():
            assert same_bytes(view, want[name])
            assert padding_intact(view), "the padding was written"
        after = native._calls["multi_layer_block_kv_transfer:native"]
        assert after >= before + 2, "the native kernels did not run"

    @pytest.mark.parametrize("direction", ["D2H", "H2D"])
    def test_a_block_id_one_past_the_cache_is_an_index_error_before_anything_is_copied(  # noqa: E501
        self, native: Any, runtime: Any, direction: str
    ) -> None:
        """Ids are checked where they enter the kernel: one past the last block raises
        IndexError at the call, as the baseline does, and copies nothing. Unchecked, a
        device copies a neighbouring allocation's bytes, or faults the stream."""
        shape, hints = NATIVE_LAYOUTS["flash_nhd"]
        source = seeded_kv(shape, seed=13)
        ids = [*BLOCK_IDS[:-1], shape[1]]  # shape[1]: the layer's block count
        chunks = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        out = [torch.zeros_like(chunk) for chunk in chunks]
        kv = on_device(source)
        with pytest.raises(IndexError):
            if direction == "D2H":
                gather_into(kv, ids, 2, layout_hints=hints, out=out)
            else:
                scatter(kv, ids, chunks[::-1], 2, layout_hints=hints)
        runtime.synchronize()  # a kernel that ran past its allocation raises here
        assert all(int(chunk.count_nonzero()) == 0 for chunk in out)
        assert all(same_bytes(kv[k], source[k]) for k in source)
