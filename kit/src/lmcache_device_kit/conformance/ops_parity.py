# SPDX-License-Identifier: Apache-2.0
"""The plugin's ops give byte-identical results to LMCache's torch baseline on the CPU.

Transfers go through LMCache's own engine-driven call sites
(``gather_paged_kv_to_cpu`` = D2H, ``scatter_cpu_to_paged_kv`` = H2D), which
resolve the ops from the KV tensors' device: the backend's device tensors reach its
spec's ``ops_cls``, CPU tensors reach LMCache's CPU baseline. The pointer-mode ops
(raw addresses, as an LMCache-driven server passes them) are ``ops_pointers.py``.

Imports torch (through ``support``); lmcache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import importlib

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.backend_shape import registered_spec
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import (
    BLOCK_IDS,
    BS,
    KV_LAYOUTS,
    gather_to_cpu,
    same_bytes,
    seeded_kv,
)
from lmcache_device_kit.harness.worker_kv import KV_DTYPES

BLOCKS_PER_CHUNK = 2
LAYOUTS = KV_LAYOUTS


def on_device(kv: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    device = kit_backend.current().device_type
    return {name: t.to(device) for name, t in kv.items()}


def device_ops() -> Any:
    """The ops LMCache resolves for the backend's device."""
    # First Party
    from lmcache.v1.platform import resolve_device_ops

    return resolve_device_ops(kit_backend.current().device_type)


class BaseOpsParityTests(ConformanceTests):
    """Which ops LMCache resolves, the device's stream handles, and transfers equal
    to the CPU baseline."""

    def test_kv_tensors_of_this_device_resolve_to_the_plugin_ops(
        self, spec: Any
    ) -> None:
        """LMCache routes the device's tensors to the spec's DeviceOps, a class of the
        plugin, not the baseline."""
        ops_cls, backend = type(device_ops()), kit_backend.current()
        assert ops_cls is spec.ops_cls
        # the plugin's own, or those of the built-in it extends
        assert backend.extends or ops_cls.__module__.startswith(backend.package + ".")

    def test_each_device_stream_has_its_own_native_handle_and_other_objects_are_refused(  # noqa: E501
        self, spec: Any
    ) -> None:
        """get_stream_handle, which LMCache's base class says every platform must
        override (its GDS path needs it)."""
        module = getattr(torch, spec.torch_module_name)
        default, other = module.current_stream(0), module.Stream(0)
        handles = spec.get_stream_handle(default), spec.get_stream_handle(other)
        assert all(isinstance(handle, int) for handle in handles)
        assert handles[0] != handles[1]
        with pytest.raises(RuntimeError, match="native handle"):
            spec.get_stream_handle(object())

    def test_lmcache_stream_facade_reaches_the_spec_for_a_device_stream(
        self, spec: Any
    ) -> None:
        """lmcache.v1.platform.stream.stream_handle(device, stream) answers for this
        device instead of raising."""
        facade = pytest.importorskip(
            "lmcache.v1.platform.stream",
            reason="lmcache before 0.5.6 has no stream facade",
        )
        stream = getattr(torch, spec.torch_module_name).Stream(0)
        device = torch.device(kit_backend.current().device_type, 0)
        assert facade.stream_handle(device, stream) == spec.get_stream_handle(stream)

    @pytest.mark.parametrize("dtype", list(KV_DTYPES.values()), ids=list(KV_DTYPES))
    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_gather_d2h_matches_the_cpu_baseline(
        self, layout: str, dtype: torch.dtype
    ) -> None:
        """multi_layer_block_kv_transfer D2H: chunks gathered from the device equal
        the CPU result."""
        shape, hints = LAYOUTS[layout]
        kv_cpu = seeded_kv(shape, seed=1, dtype=dtype)
        expected = gather_to_cpu(
            kv_cpu, BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints
        )
        got = gather_to_cpu(
            on_device(kv_cpu), BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints
        )
        assert len(got) == len(expected) == len(BLOCK_IDS) // BLOCKS_PER_CHUNK
        for chunk_got, chunk_expected in zip(got, expected, strict=True):
            assert chunk_got.device.type == "cpu"
            assert same_bytes(chunk_got, chunk_expected)

    @pytest.mark.parametrize(
        "skip_tokens", [0, BS, 3 * BS], ids=["skip0", "skip1block", "skip3blocks"]
    )
    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_scatter_h2d_matches_the_cpu_baseline(
        self, layout: str, skip_tokens: int
    ) -> None:
        """multi_layer_block_kv_transfer H2D, with skipped prefix blocks: device KV
        equals the CPU result."""
        # First Party
        from lmcache.v1.multiprocess.transfer_context.base import (
            scatter_cpu_to_paged_kv,
        )

        shape, hints = LAYOUTS[layout]
        source = seeded_kv(shape, seed=2)
        chunks = gather_to_cpu(source, BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints)
        kv_cpu = {name: torch.zeros_like(t) for name, t in source.items()}
        kv_dev = on_device(kv_cpu)
        for kv in (kv_cpu, kv_dev):
            scatter_cpu_to_paged_kv(
                kv,
                BLOCK_IDS,
                chunks,
                BLOCKS_PER_CHUNK,
                skip_first_n_tokens=skip_tokens,
                layout_hints=hints,
            )
        assert any(t.any() for t in kv_cpu.values())
        for name in kv_cpu:
            assert kv_dev[name].device.type == kit_backend.current().device_type
            assert same_bytes(kv_dev[name], kv_cpu[name])

    def test_memcpy_tensor_mode_matches_the_cpu_baseline(self) -> None:
        """lmcache_memcpy_async with tensor operands copies the same bytes as on the
        CPU."""
        backend = kit_backend.current()
        compat = importlib.import_module(f"{backend.package}._lmcache_compat")
        h2d = compat.TransferDirection.H2D
        src = torch.randn(1024).to(torch.float16)
        expected = torch.zeros_like(src)
        compat.torch_ops.lmcache_memcpy_async(expected, src, 1000, h2d, 0, 64)
        dest = torch.zeros(1024, dtype=torch.float16, device=backend.device_type)
        device_ops().lmcache_memcpy_async(dest, src, 1000, h2d, 0, 64)
        assert same_bytes(dest, expected)

    def test_cpu_kv_caches_in_the_same_process_keep_lmcaches_own_ops(self) -> None:
        """With the plugin loaded, CPU tensors still resolve to LMCache's ops, this
        device's tensors to the plugin's."""
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        package = kit_backend.current().package + "."
        cpu_ops = resolve_device_ops("cpu")
        assert not type(cpu_ops).__module__.startswith(package), type(cpu_ops)
        ops_cls = type(device_ops())
        assert ops_cls is registered_spec().ops_cls  # the spec's, LMCache resolved
        assert kit_backend.current().extends or ops_cls.__module__.startswith(package)
