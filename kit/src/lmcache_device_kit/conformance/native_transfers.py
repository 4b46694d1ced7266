# SPDX-License-Identifier: Apache-2.0
"""The native ops' transfers on the engine-driven call shape (tensors): equal to the
baseline, in stream order, strided caches as they lie, ids checked at the call.

Gated on the package shipping ``native_ops`` (``requires``). Which formats run
natively is the module's declaration (``native_contract.py``). The binding itself is
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
from lmcache_device_kit.conformance.native_contract import (
    detected_format,
    transfer_path,
    transfers,
)
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
from lmcache_device_kit.harness.worker_kv import KV_DTYPES, padding_intact, strided

#: The geometries transferred, in the order of the tests' ids. Which path each takes
#: is the plugin's declaration (``native_contract``): the sample kernels take all but
#: flash_hnd natively.
LAYOUTS = ("flash_nhd", "flashinfer_nhd", "mla", "flash_hnd")


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
    @pytest.mark.parametrize("dtype", list(KV_DTYPES.values()), ids=list(KV_DTYPES))
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_native_transfers_equal_the_baseline_both_ways(
        self, native: Any, layout: str, dtype: torch.dtype, skip_blocks: int
    ) -> None:
        """D2H and H2D through the bound op equal the CPU baseline byte for byte;
        the formats the plugin declares (``NATIVE_KV_FORMATS``) run natively, the
        others on the baseline."""
        shape, hints = KV_LAYOUTS[layout]
        source = seeded_kv(shape, seed=11, dtype=dtype)
        kv_format = detected_format(source, hints)
        path = transfer_path(native, kv_format)
        before = transfers(native)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        got = gather_to_cpu(on_device(source), BLOCK_IDS, 2, layout_hints=hints)
        assert all(same_bytes(g, e) for g, e in zip(got, expected, strict=True))
        zeros = {k: torch.zeros_like(v) for k, v in source.items()}
        into = on_device(zeros)
        skip_tokens = skip_blocks * BS
        # torch has no CPU index_copy for fp8, which LMCache's baseline scatters
        # with: the reference scatters the same bytes as uint8.
        raw = (lambda t: t.view(torch.uint8)) if dtype.itemsize == 1 else (lambda t: t)
        reference = (({k: raw(v) for k, v in zeros.items()}, list(map(raw, expected))),)
        for kv, chunks in (*reference, (into, expected)):
            scatter(
                kv,
                BLOCK_IDS,
                chunks,
                2,
                skip_first_n_tokens=skip_tokens,
                layout_hints=hints,
            )
        assert all(same_bytes(into[k], zeros[k]) for k in zeros)
        after = transfers(native)
        ran = {p: after[p] - before[p] for p in after}
        # The CPU transfers reach the plugin's op too on lmcache 0.5.4/0.5.5 (resolved
        # process-wide there), on the baseline: a fallback count may grow either way.
        if path == "native":
            took = ran["native"] >= 2
        else:
            took = ran["native"] == 0 and ran["fallback"] >= 2
        assert took, (
            f"expected the {path} path for {layout} ({kv_format}): NATIVE_KV_FORMATS "
            f"{'names' if path == 'native' else 'does not name'} it; took {ran}"
        )

    def test_native_transfers_run_in_stream_order_not_on_the_host_at_call_time(
        self, native: Any, runtime: Any
    ) -> None:
        """A native gather queued behind pending work writes nothing until that work
        has run, then the right bytes: kernels are launched on the device's current
        stream (not run on the host, not on a stream of their own)."""
        shape, hints = KV_LAYOUTS["flash_nhd"]
        source = seeded_kv(shape, seed=12)
        path = transfer_path(native, detected_format(source, hints))
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = on_device(source)
        # Pinned: a kernel is given no pageable chunk, and waits for none.
        out = [torch.zeros_like(chunk, pin_memory=True) for chunk in expected]
        before = transfers(native)[path]
        with held(runtime.current_stream()) as hold:
            gather_into(kv, BLOCK_IDS, 2, layout_hints=hints, out=out)
            hold.settle()
            early = [int(chunk.count_nonzero()) for chunk in out]
        runtime.synchronize()
        assert transfers(native)[path] > before, f"the {path} transfer did not run"
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
        writes them and leaves the padding as it was, on the path the plugin declares.
        A copy that takes the blocks as back to back passes every contiguous test."""
        device = kit_backend.current().device_type
        layout, memory, block_dim = STRIDED[case]
        shape, hints = KV_LAYOUTS[layout]
        source = seeded_kv(shape, seed=14)
        path = transfer_path(native, detected_format(source, hints))
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        before = transfers(native)[path]
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
        after = transfers(native)[path]
        assert after >= before + 2, f"the {path} transfers did not run"

    @pytest.mark.parametrize("direction", ["D2H", "H2D"])
    def test_a_block_id_one_past_the_cache_is_an_index_error_before_anything_is_copied(  # noqa: E501
        self, native: Any, runtime: Any, direction: str
    ) -> None:
        """Ids are checked where they enter the kernel: one past the last block raises
        IndexError at the call, as the baseline does, and copies nothing. Unchecked, a
        device copies a neighbouring allocation's bytes, or faults the stream."""
        shape, hints = KV_LAYOUTS["flash_nhd"]
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
