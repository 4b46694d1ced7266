# SPDX-License-Identifier: Apache-2.0
"""The IPC wrapper as LMCache's server uses it: descriptors, views, mappings and
their lifetime.

A device runtime maps an exported allocation once per process, however often
its handle is opened, and one close unmaps it for every user; the layers of a
KV cache often share one allocation. These tests hold the wrapper to those
rules (the CPU emulator enforces them: a closed mapping cannot be used).

Imports torch (through ``support``); lmcache only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import threading

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import (
    on_emulator,
    open_mappings,
    run_python,
    seeded_kv,
)

#: Per layer (2, blocks, block_size, heads, head_size): large enough to be exportable.
SHAPE = (2, 32, 16, 2, 32)


def kv_caches(seed: int = 0) -> dict[str, torch.Tensor]:
    return seeded_kv(SHAPE, seed, device=kit_backend.current().device_type)


def codec() -> Any:
    """LMCache's ``DeviceIPCWrapper``: its Serialize/Deserialize are the wire codec."""
    # First Party
    from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper

    return DeviceIPCWrapper


def received(spec: Any, tensor: Any) -> Any:
    """The wrapper of ``tensor`` as the server receives it: through LMCache's codec."""
    return codec().Deserialize(codec().Serialize(spec.ipc_wrapper_cls.wrap(tensor)))


class BaseIPCWrapperTests(ConformanceTests):
    """Views of the exported memory and the mappings behind them: aliasing, offsets,
    strides, planes, threads, devices, and when a close unmaps."""

    requires = frozenset({"lmcache_driven"})

    def test_wrapped_tensor_aliases_the_original_memory(
        self, lmcache_driven: Any
    ) -> None:
        """to_tensor() maps the same memory: equal bytes, and a write through it shows
        in the original."""
        tensor = kv_caches()["layer.1"]
        wrapper = received(lmcache_driven, tensor)
        view = wrapper.to_tensor()
        assert (
            view.device == tensor.device
            and view.shape == tensor.shape
            and view.dtype == tensor.dtype
        )
        assert torch.equal(view.cpu(), tensor.cpu())
        view[1, 3].fill_(7.0)
        assert bool((tensor[1, 3].cpu() == 7.0).all())
        wrapper.close()

    def test_an_interior_view_is_mapped_at_its_offset_and_another_process_writes_only_it(  # noqa: E501
        self, lmcache_driven: Any
    ) -> None:
        """A layer that starts inside a larger allocation: another process reads it and
        writes it, neighbours untouched."""
        pool = kv_caches()["layer.2"]
        before = pool.cpu()
        layer = pool[1, 5:20]  # same handle as the pool, a byte offset inside it
        checksum = str(float(layer.double().sum().cpu()))
        payload = codec().Serialize(lmcache_driven.ipc_wrapper_cls.wrap(layer))
        done = run_python(
            f"""
import lmcache, torch
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
wrapper = DeviceIPCWrapper.Deserialize(bytes.fromhex({payload.hex()!r}))
view = wrapper.to_tensor()
print(view.shape, view.stride(), float(view.double().sum().cpu()))
view.fill_(-3.0)
wrapper.close()
"""
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == checksum
        after = pool.cpu()
        assert bool((after[1, 5:20] == -3.0).all())
        after[1, 5:20] = before[1, 5:20]
        assert torch.equal(after, before), "bytes outside the wrapped view changed"
        assert "still open at exit" not in done.stderr

    def test_a_strided_view_is_rebuilt_with_its_strides(
        self, lmcache_driven: Any
    ) -> None:
        """A non-contiguous layer (blocks with a step, heads transposed) comes back
        element for element."""
        layer = kv_caches(seed=3)["layer.0"][:, ::3].transpose(2, 3)
        wrapper = received(lmcache_driven, layer)
        view = wrapper.to_tensor()
        assert view.stride() == layer.stride() and torch.equal(view.cpu(), layer.cpu())
        wrapper.close()

    def test_layers_sharing_one_allocation_stay_mapped_until_the_last_wrapper_closes(
        self, lmcache_driven: Any
    ) -> None:
        """Closing one layer's wrapper leaves its neighbour's usable; the last close
        unmaps; closing twice is harmless."""
        pool = kv_caches(seed=4)["layer.0"]
        first = received(lmcache_driven, pool[0])
        second = received(lmcache_driven, pool[1])
        assert first.handle == second.handle, "both layers live in one allocation"
        mappings = open_mappings() if on_emulator() else 0
        first_view, second_view = first.to_tensor(), second.to_tensor()
        first.to_tensor()  # a second reference from the same wrapper
        if on_emulator():
            assert open_mappings() == mappings + 1, (
                "one mapping per (process, allocation)"
            )
        first.close()
        first.close()
        assert torch.equal(second_view.cpu(), pool[1].cpu()), (
            "closing one layer unmapped its neighbour"
        )
        second.close()
        if on_emulator():
            assert open_mappings() == mappings, (
                "the last close must unmap the allocation"
            )
            with pytest.raises(RuntimeError, match="closed"):
                # the emulator refuses memory whose mapping was closed
                first_view.cpu()
        second.close()
        reopened = received(lmcache_driven, pool[1])
        assert torch.equal(reopened.to_tensor().cpu(), pool[1].cpu()), (
            "an allocation maps again after its last close"
        )
        reopened.close()

    def test_a_layers_k_v_planes_come_back_as_a_tuple_of_aliases_and_unmap_together(
        self, lmcache_driven: Any
    ) -> None:
        """A layer registered as separate (K, V) planes (vLLM's Ascend plugin): the
        server gets the same tuple, each plane aliasing its own allocation; close
        unmaps both."""
        device = kit_backend.current().device_type
        keys, values = (
            seeded_kv(SHAPE[1:], seed, device=device)["layer.0"] for seed in (8, 9)
        )
        wrapper = received(lmcache_driven, (keys, values))
        assert wrapper == lmcache_driven.ipc_wrapper_cls.wrap((keys, values))
        mappings = open_mappings() if on_emulator() else 0
        planes = wrapper.to_tensor()
        assert isinstance(planes, tuple) and len(planes) == 2
        for view, plane in zip(planes, (keys, values), strict=True):
            assert view.shape == plane.shape and torch.equal(view.cpu(), plane.cpu())
        planes[1][4].fill_(5.0)
        assert bool((values[4].cpu() == 5.0).all())
        assert not bool((keys[4].cpu() == 5.0).all()), "a write to V must not reach K"
        if on_emulator():
            assert open_mappings() == mappings + 2, "one mapping per plane's allocation"
        wrapper.close()
        if on_emulator():
            assert open_mappings() == mappings, "close must unmap every plane"
        one_plane = received(lmcache_driven, [keys])
        (single,) = one_plane.to_tensor()  # a sequence of one plane: a 1-tuple
        assert torch.equal(single.cpu(), keys.cpu())
        one_plane.close()
        with pytest.raises(ValueError, match="planes"):
            lmcache_driven.ipc_wrapper_cls.wrap(())

    def test_closing_a_wrapper_unmaps_even_while_its_tensors_live(
        self, lmcache_driven: Any, emulator: Any
    ) -> None:
        """close() releases a dead worker's memory: the mapping does not wait for the
        garbage collector (mappings are observable on the CPU emulator only)."""
        wrapper = received(lmcache_driven, kv_caches()["layer.0"])
        mappings = open_mappings()
        view = wrapper.to_tensor()
        assert open_mappings() == mappings + 1
        wrapper.close()
        assert open_mappings() == mappings and view.numel() > 0

    def test_a_wrapper_built_in_another_thread_maps_the_same_memory(
        self, lmcache_driven: Any
    ) -> None:
        """LMCache's server threads wrap and map KV caches off the main thread."""
        tensor = kv_caches(seed=6)["layer.1"]
        results: list[Any] = []

        def build() -> None:
            try:
                wrapper = received(lmcache_driven, tensor)
                results.append((wrapper, wrapper.to_tensor()))
            except Exception as exc:  # pragma: no cover - reported below
                results.append(exc)

        worker = threading.Thread(target=build)
        worker.start()
        worker.join(60)
        (result,) = results
        assert not isinstance(result, Exception), result
        wrapper, view = result
        assert torch.equal(view.cpu(), tensor.cpu())
        wrapper.close()

    def test_memory_of_the_second_device_is_wrapped_and_mapped_on_that_device(
        self, lmcache_driven: Any, runtime: Any
    ) -> None:
        """TP=2 on one host: a layer on device 1 while device 0 is current maps as
        device 1's memory."""
        device = kit_backend.current().device_type
        if runtime.device_count() < 2:
            pytest.skip(f"needs two {device} devices")
        layer = seeded_kv(SHAPE, 7, device=f"{device}:1")["layer.0"]
        assert runtime.current_device() == 0
        wrapper = received(lmcache_driven, layer)
        view = wrapper.to_tensor()
        assert view.device == torch.device(device, 1) and torch.equal(
            view.cpu(), layer.cpu()
        )
        wrapper.close()
