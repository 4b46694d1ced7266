# SPDX-License-Identifier: Apache-2.0
"""LMCache's MUSA pointer-transfer tests, ported to this plugin's device ops.

Source: LMCache 0.5.6 tests/v1/platform/devices/musa/test_pointer_transfer.py. The
LMCache-driven server passes ``multi_layer_block_kv_transfer`` a table of layer
addresses and chunk addresses in the staging buffer; MUSA rebuilds them as views
before its kernel, and its tests record the views built (fake pointers, a fake
device, the kernel replaced). Here the operands are real device
memory and each transfer runs two ways: the ops as bound (``bound``: the native
kernels, which take the addresses themselves and build no view, where the plugin
has them) and the plugin's torch-ops path (``torch_ops``: the class's method, which
views the addresses through ``tensor_from_ptr`` and hands the views to LMCache's
torch baseline).

Departures (each also in README.md beside this module):
- The views are recorded on the ``torch_ops`` path as ``tensor_from_ptr`` calls
  (pointer, shape, dtype); the plugin's helper takes no stride, so MUSA's stride is
  dropped, and the staged chunk's view is checked apart from the layers' (the
  plugin views the chunks first). On both paths the staged chunk's bytes must be
  the blocks of each layer in table order: that is what the views are for.
- Chunks of two blocks, ids ``[2, 0]``, instead of one block ``[0]``: the bytes
  then show which blocks were copied, and in which order.
- MUSA's padded MLA blocks (``block_stride_elems`` 40 for 4 x 8) are checked by
  the bytes staged (each block's 4 rows, never its padding) on both paths, in a test
  of their own; the view case runs with tight blocks, its recorded views having no
  stride to compare.
- Inverted: a 2-byte ``element_size`` without ``shape_desc.dtype`` is copied bit
  for bit rather than refused: the plugin's kernels copy by element size, as
  LMCache's CUDA kernels do, and its torch path copies the bytes whatever 2-byte
  dtype views them (MUSA refuses because its views feed dtype-typed kernels). Kept:
  an element size no dtype has is refused (``ValueError``).
- Separate K/V layer lists (``TWO_X_NL_X_NB_BS_NH_HS``) through a pointer table
  need LMCache 0.5.6's baseline; on older releases the plugin refuses them, naming
  the release needed, and that refusal is what is asserted there.
"""

# Future
from __future__ import annotations

# Standard
from importlib.metadata import version
from typing import Any

# Third Party
from packaging.version import Version
import pytest
import torch

# First Party
from lmcache.lmcache_native import EngineKVFormat, TransferDirection
from lmcache.v1.platform import resolve_device_ops
from lmcache.v1.platform.ops_types import PageBufferShapeDesc
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    runtime_name,
)

NB, BS = 3, 4
#: Two blocks per chunk, the last block first.
BLOCK_IDS = [2, 0]
CHUNK = BS * len(BLOCK_IDS)


def desc(nl: int, nh: int, hs: int, element_size: int, **extra: Any) -> Any:
    shape_desc = PageBufferShapeDesc()
    shape_desc.nl, shape_desc.nb, shape_desc.bs = nl, NB, BS
    shape_desc.nh, shape_desc.hs, shape_desc.element_size = nh, hs, element_size
    for name, value in extra.items():
        setattr(shape_desc, name, value)
    return shape_desc


def bits(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random bit patterns (NaN payloads too) as ``dtype``, on the device."""
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randint(-(2**15), 2**15, shape, dtype=torch.int32, generator=generator)
    wide = raw.to(torch.int16) if dtype.itemsize == 2 else raw
    return wide.view(dtype).to(device_type())


def blocks(layer: torch.Tensor) -> torch.Tensor:
    """The chunk's tokens of one layer or plane: its blocks ``BLOCK_IDS``, in order."""
    picked = layer.cpu()[BLOCK_IDS]
    return picked.reshape(CHUNK, -1)


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.equal(got.contiguous().view(torch.uint8), want.view(torch.uint8))


class BaseMusaPointerTransferTests(PortTests):
    """LMCache's musa/test_pointer_transfer.py against the plugin's pointer-mode
    transfer, on both paths (``transfer``)."""

    @pytest.fixture(params=["bound", "torch_ops"])
    def transfer(
        self,
        request: pytest.FixtureRequest,
        lmcache_driven: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> Any:
        """``transfer(layers, chunk, shape_desc, format)``: one D2H pointer-mode call
        from the layers' addresses into ``chunk``'s; returns the ``tensor_from_ptr``
        calls."""
        ops = resolve_device_ops(device_type())
        calls: list[tuple[int, tuple[int, ...], torch.dtype]] = []
        view = type(ops).tensor_from_ptr

        def recorded(self, ptr, shape, dtype, device):
            calls.append((ptr, tuple(shape), dtype))
            return view(self, ptr, shape, dtype, device)

        monkeypatch.setattr(type(ops), "tensor_from_ptr", recorded)
        method = ops.multi_layer_block_kv_transfer
        if request.param == "torch_ops":
            method = type(ops).multi_layer_block_kv_transfer.__get__(ops)

        def run(layers: list[torch.Tensor], chunk: torch.Tensor, shape_desc, fmt):
            table = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64)
            ids = torch.tensor(BLOCK_IDS, dtype=torch.int64)
            device = layers[0].device
            method(
                table, [chunk.data_ptr()], ids, device, TransferDirection.D2H,
                shape_desc, CHUNK, fmt, 0,
            )  # fmt: skip
            getattr(torch, runtime_name()).synchronize()
            return calls

        run.path = request.param  # type: ignore[attr-defined]
        return run

    def test_pointer_operands_are_viewed_as_each_layer_and_the_staged_chunk(
        self, transfer: Any
    ) -> None:
        """Paged and staging pointers become views of the right shape, in table
        order."""
        layers = [bits((NB, BS, 8), torch.bfloat16, seed) for seed in (1, 2)]
        chunk = torch.zeros(2, CHUNK, 8, dtype=torch.bfloat16, device=device_type())
        shape_desc = desc(2, 1, 8, 2, dtype=torch.bfloat16, block_stride_elems=BS * 8)
        calls = transfer(layers, chunk, shape_desc, EngineKVFormat.NL_X_NB_BS_HS)
        want = torch.stack([blocks(layer) for layer in layers])
        assert same_bits(chunk.cpu(), want)
        if transfer.path == "torch_ops":
            paged = [c for c in calls if c[0] != chunk.data_ptr()]
            assert paged == [
                (layers[0].data_ptr(), (3, 4, 8), torch.bfloat16),
                (layers[1].data_ptr(), (3, 4, 8), torch.bfloat16),
            ]
            assert (chunk.data_ptr(), (2, CHUNK, 8), torch.bfloat16) in calls

    def test_padded_blocks_are_staged_as_their_rows_without_the_padding(
        self, transfer: Any
    ) -> None:
        """MUSA's padded case (``block_stride_elems`` 40 for blocks of 4 x 8): each
        block is viewed with its stride, so only its own 4 rows reach the staged
        chunk."""
        layers = [bits((NB, 5, 8), torch.bfloat16, seed) for seed in (1, 2)]
        chunk = torch.zeros(2, CHUNK, 8, dtype=torch.bfloat16, device=device_type())
        shape_desc = desc(2, 1, 8, 2, dtype=torch.bfloat16, block_stride_elems=40)
        transfer(layers, chunk, shape_desc, EngineKVFormat.NL_X_NB_BS_HS)
        want = torch.stack([blocks(layer[:, :BS]) for layer in layers])
        assert same_bits(chunk.cpu(), want)

    def test_pointer_transfer_copies_an_ambiguous_two_byte_dtype_bit_for_bit(
        self, transfer: Any
    ) -> None:
        """Without ``shape_desc.dtype``, 2-byte elements still arrive unchanged."""
        layers = [bits((NB, BS, 8), torch.bfloat16, 3)]
        chunk = torch.zeros(1, CHUNK, 8, dtype=torch.bfloat16, device=device_type())
        transfer(layers, chunk, desc(1, 1, 8, 2), EngineKVFormat.NL_X_NB_BS_HS)
        assert same_bits(chunk.cpu(), blocks(layers[0])[None])

    def test_pointer_transfer_refuses_an_element_size_no_dtype_has(
        self, transfer: Any
    ) -> None:
        layers = [torch.zeros(NB, BS, 8, dtype=torch.uint8, device=device_type())]
        chunk = torch.zeros(1, CHUNK, 8, dtype=torch.uint8, device=device_type())
        with pytest.raises(ValueError, match="element_size"):
            transfer(layers, chunk, desc(1, 1, 8, 3), EngineKVFormat.NL_X_NB_BS_HS)

    def test_kv_list_pointer_operands_preserve_key_then_value_order(
        self, transfer: Any
    ) -> None:
        """A table [K0, K1, V0, V1] stages every K layer, then every V layer."""
        planes = [bits((NB, BS, 2, 4), torch.float32, seed) for seed in range(4)]
        chunk = torch.zeros(2, 2, CHUNK, 8, dtype=torch.float32, device=device_type())
        shape_desc = desc(2, 2, 4, 4, kv_size=2, dtype=torch.float32)
        fmt = EngineKVFormat.TWO_X_NL_X_NB_BS_NH_HS
        if Version(version("lmcache")).release < (0, 5, 6):
            with pytest.raises(NotImplementedError, match="0.5.6"):
                transfer(planes, chunk, shape_desc, fmt)
            return
        calls = transfer(planes, chunk, shape_desc, fmt)
        want = torch.stack([blocks(p) for p in planes]).reshape(2, 2, CHUNK, 8)
        assert same_bits(chunk.cpu(), want)
        if transfer.path == "torch_ops":
            paged = [c for c in calls if c[0] != chunk.data_ptr()]
            assert paged == [
                (p.data_ptr(), (3, 4, 2, 4), torch.float32) for p in planes
            ]
            assert (chunk.data_ptr(), (2, 2, CHUNK, 8), torch.float32) in calls
