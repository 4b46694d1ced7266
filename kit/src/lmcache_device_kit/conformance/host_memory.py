# SPDX-License-Identifier: Apache-2.0
"""The native kernels reach host memory only as a device can: pinned, at the address
the runtime maps it at.

A runtime maps pinned host memory for its kernels at the host address (CUDA's unified
addressing) or at a separate device address (Ascend's ``aclrtHostRegister`` returns
one), and no kernel that runs later can read pageable memory. The CPU emulator runs
either way (``..._HOST_ALIASES=0``: the host address; by default a separate one) and
fails the stream of a kernel given an address its device could not reach. Every test
here runs in the suite's mode, and again, in a process of its own, in the other one
(the last test), with the plugin's own tests marked ``host_memory_mapping`` (the
sample's copy kernel on raw addresses: the render's ``tests/test_sample_kernels.py``).
Skipped without native ops or without the emulator. Reads of the plugin: its ops, and
what its native ops module declares (``native_contract``).

Imports torch (as ``support.py`` does): import it from tests only, after
``conftest.py`` set the environment; imports neither lmcache nor the plugin.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from pathlib import Path
from typing import Any
import importlib
import mmap
import sys

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.native_contract import (
    detected_format,
    paths_taken,
    transfer_path,
    transfers,
)
from lmcache_device_kit.conformance.support import (
    BLOCK_IDS,
    BS,
    KV_LAYOUTS,
    context_transfer,
    gather_to_cpu,
    page_aligned,
    same_bytes,
    seeded_kv,
)
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.spawn import child_env

#: The emulator's switch (its variable, suffixed): ``0`` maps pinned host memory at
#: its host address.
MODE_SUFFIX = "_HOST_ALIASES"
NBYTES = 1 << 16
#: The marker of the tests that depend on how the device maps pinned host memory
#: (this class's, and a plugin's own kernel tests): the last test here runs them all
#: again in the other mapping.
MAPPING_MARKER = "host_memory_mapping"


def device_type() -> str:
    return kit_backend.current().device_type


def host_bytes(fill: int) -> torch.Tensor:
    return torch.full((NBYTES,), fill, dtype=torch.uint8)


def device_ops() -> Any:
    """The ops LMCache resolves for the device (the plugin's, natives bound)."""
    # First Party
    from lmcache.v1.platform import resolve_device_ops

    return resolve_device_ops(device_type())


def transfer_direction() -> Any:
    """The package's ``TransferDirection`` (its LMCache layer's)."""
    package = kit_backend.current().package
    return importlib.import_module(f"{package}._lmcache_compat").TransferDirection


@pytest.mark.host_memory_mapping
class BaseHostMemoryTests(ConformanceTests):
    """Pinned and pageable host memory, at the addresses the runtime maps."""

    requires = frozenset({"native_ops", "emulator"})

    @pytest.fixture
    def device(self, native: Any, emulator: Any) -> Iterator[Any]:
        """The emulator; a stream failure a test provoked is forgotten afterwards."""
        yield emulator
        emulator.inject_faults()

    def test_pointer_copies_give_the_kernel_pinned_memory_and_copy_pageable_memory_at_once(  # noqa: E501
        self, native: Any, device: Any, lmcache_driven: Any
    ) -> None:
        """Pointer copies from and to host memory pinned through the plugin's pin
        backend (in two registrations, as LMCache's lazy L1) run the copy kernel at the
        address the registration maps; pageable memory never reaches the kernel: it is
        copied before the call returns."""
        TransferDirection = transfer_direction()

        half = NBYTES // 2
        registered, pageable = page_aligned(NBYTES, 5), host_bytes(6)
        pins = lmcache_driven.pin_memory_backend()
        halves = [registered.data_ptr(), registered.data_ptr() + half]
        assert all(pins.pin_memory(address, half) for address in halves)
        ops, key = device_ops(), "lmcache_memcpy_async:native"
        on_device = torch.zeros(NBYTES, dtype=torch.uint8, device=device_type())
        h2d, d2h = TransferDirection.H2D, TransferDirection.D2H
        try:
            before = paths_taken(native)[key]
            ops.lmcache_memcpy_async(
                on_device.data_ptr(), halves[0], NBYTES, h2d, 0, half
            )
            device.synchronize()
            assert same_bytes(on_device, registered)
            assert paths_taken(native)[key] == before + 1
            ops.lmcache_memcpy_async(
                on_device.data_ptr(), pageable.data_ptr(), NBYTES, h2d, 0, NBYTES
            )
            device.synchronize()
            assert same_bytes(on_device, pageable)
            back = host_bytes(0)
            ops.lmcache_memcpy_async(
                back.data_ptr(), on_device.data_ptr(), NBYTES, d2h, 0, NBYTES
            )
            assert same_bytes(back, pageable), (
                "a pageable destination filled after return"
            )
            registered.zero_()
            ops.lmcache_memcpy_async(
                halves[0], on_device.data_ptr(), NBYTES, d2h, 0, half
            )
            device.synchronize()
            assert same_bytes(registered, pageable)
        finally:
            assert all(pins.unpin_memory(address) for address in halves)

    @pytest.mark.parametrize("flags", [0, 2], ids=["as-the-shm-pool", "as-lazy-l1"])
    def test_a_range_pinned_with_any_flags_lmcache_passes_is_mapped_for_the_kernels(
        self, native: Any, device: Any, lmcache_driven: Any, flags: int
    ) -> None:
        """LMCache's lazy L1 pins with cudaHostRegisterMapped (``flags=2``), its SHM
        pool with none, and the kernels read both: every registration asks the runtime
        for the mapping (a range pinned without it reaches copies, not kernels)."""
        ops, key = device_ops(), "lmcache_memcpy_async:native"
        memory, pins = page_aligned(NBYTES, 9), lmcache_driven.pin_memory_backend()
        assert pins.pin_memory(memory.data_ptr(), NBYTES, flags) is True
        on_device = torch.zeros(NBYTES, dtype=torch.uint8, device=device_type())
        try:
            before = paths_taken(native)[key]
            h2d = transfer_direction().H2D
            ops.lmcache_memcpy_async(
                on_device.data_ptr(), memory.data_ptr(), NBYTES, h2d, 0, NBYTES
            )
            device.synchronize()
            assert same_bytes(on_device, memory)
            assert paths_taken(native)[key] == before + 1
        finally:
            assert pins.unpin_memory(memory.data_ptr()) is True

    @pytest.mark.parametrize("chunks", ["pinned", "pageable"])
    def test_engine_driven_kernels_read_pinned_chunks_and_pageable_ones_as_pinned_copies(  # noqa: E501
        self, native: Any, device: Any, chunks: str
    ) -> None:
        """LMCache's engine-driven gather and scatter run the kernel on host chunks at
        the address the device maps them at; pageable chunks reach it as pinned
        temporaries, awaited before the call returns, as LMCache 0.5.7 stages them."""
        # First Party
        from lmcache.v1.multiprocess.transfer_context.base import (
            gather_paged_kv_to_cpu,
            scatter_cpu_to_paged_kv,
        )

        shape, hints = KV_LAYOUTS["flash_nhd"]
        source = seeded_kv(shape, seed=21)
        kv_format = detected_format(source, hints)
        if transfer_path(native, kv_format) != "native":
            pytest.skip(f"NATIVE_KV_FORMATS does not name {kv_format}: no kernel runs")
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = {name: t.to(device_type()) for name, t in source.items()}
        out = [torch.zeros_like(c, pin_memory=chunks == "pinned") for c in expected]
        before = transfers(native)
        gather_paged_kv_to_cpu(kv, BLOCK_IDS, 2, layout_hints=hints, out=out)
        if chunks == "pinned":
            device.synchronize()
        assert all(same_bytes(o, e) for o, e in zip(out, expected, strict=True))
        for layer in kv.values():
            layer.zero_()
        scatter_cpu_to_paged_kv(kv, BLOCK_IDS, out, 2, layout_hints=hints)
        device.synchronize()
        after = transfers(native)
        assert after == {**before, "native": before["native"] + 2}, (
            "a transfer left the kernels"
        )
        back = {name: layer.cpu() for name, layer in kv.items()}
        restored = gather_to_cpu(back, BLOCK_IDS, 2, layout_hints=hints)
        assert all(same_bytes(r, e) for r, e in zip(restored, expected, strict=True))

    def test_a_runtime_that_cannot_say_what_is_pinned_gets_lmcaches_baseline(
        self, native: Any, device: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without a pointer-attribute query (``host_is_pinned``) no host chunk is known
        to be reachable by a kernel: the transfer runs on LMCache's torch baseline (the
        slow path), byte-exact, instead of raising AttributeError at the first
        transfer."""
        # First Party
        from lmcache.v1.multiprocess.transfer_context.base import (
            gather_paged_kv_to_cpu,
        )

        monkeypatch.delattr(device, "host_is_pinned")
        shape, hints = KV_LAYOUTS["flash_nhd"]
        source = seeded_kv(shape, seed=22)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = {name: t.to(device_type()) for name, t in source.items()}
        out = [torch.zeros_like(c, pin_memory=True) for c in expected]
        before = transfers(native)["fallback"]
        gather_paged_kv_to_cpu(kv, BLOCK_IDS, 2, layout_hints=hints, out=out)
        device.synchronize()
        assert all(same_bytes(o, e) for o, e in zip(out, expected, strict=True))
        assert transfers(native)["fallback"] == before + 1

    def test_pointer_mode_reads_pinned_host_chunks_at_their_device_address_refuses_pageable(  # noqa: E501
        self, native: Any, device: Any, lmcache_driven: Any
    ) -> None:
        """Chunk addresses in host memory pinned through the plugin's pin backend
        (LMCache's compiled-kernel call shape) reach the kernel at their device address;
        a pageable one is refused at the call, with the reason, before anything is
        queued."""
        # First Party
        from lmcache.v1.platform.cache_context import create_cache_context
        from lmcache.v1.platform.kv_wrap import wrap_kv_caches

        TransferDirection = transfer_direction()

        shape, hints = (2, 32, BS, 2, 32), {"kv_layout": "NHD"}
        source = seeded_kv(shape, seed=22)
        expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
        kv = {name: t.to(device_type()) for name, t in source.items()}
        context = create_cache_context(wrap_kv_caches(kv), 2 * BS, hints)
        ids = torch.tensor(BLOCK_IDS, dtype=torch.long, device=context.device)
        pins = lmcache_driven.pin_memory_backend()
        nbytes = expected[0].numel() * expected[0].element_size()
        stride = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE  # a page each, as L1's
        memory = page_aligned(stride * len(expected))
        chunks = [
            memory[i * stride : i * stride + nbytes].view(e.dtype).view(e.shape)
            for i, e in enumerate(expected)
        ]
        assert all(pins.pin_memory(c.data_ptr(), nbytes) for c in chunks)

        def gather(addresses: list[int]) -> None:
            context_transfer(context, addresses, ids, TransferDirection.D2H, 2 * BS)

        try:
            gather([c.data_ptr() for c in chunks])
            device.synchronize()
            assert all(same_bytes(c, e) for c, e in zip(chunks, expected, strict=True))
            pageable = [torch.zeros_like(e) for e in expected]
            with pytest.raises(ValueError, match="pageable"):
                gather([c.data_ptr() for c in pageable])
            device.synchronize()
        finally:
            assert all(pins.unpin_memory(c.data_ptr()) for c in chunks)
            context.close()

    def test_every_test_here_also_passes_with_host_memory_mapped_the_other_way(
        self, native: Any, device: Any, request: pytest.FixtureRequest
    ) -> None:
        """This class's tests again, and every other test of the suite's directory
        marked ``host_memory_mapping`` (the plugin's own kernel tests), in a process
        whose emulator maps pinned host memory the other way (``..._HOST_ALIASES``)."""
        other = "0" if not device.host_memory_mapped_at_same_address else "1"
        here = request.node.path
        tests = str(Path(here).parent)
        argv = [sys.executable, "-m", "pytest", tests, "-p", "no:cacheprovider"]
        argv += ["-q", "-rs", "-n", "0", "-m", MAPPING_MARKER]
        argv += ["-k", "not the_other_way"]
        mode = kit_backend.current().emulator_env_var + MODE_SUFFIX
        env = child_env({mode: other})
        done = spawn.run(argv, env=env, timeout=300, cwd=Path(here).parent.parent)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        lines = done.stdout.strip().splitlines()
        assert " passed" in lines[-1], lines[-1]
        # Only what this variant lacks may skip, as it does in this process.
        skipped = [line for line in lines if line.startswith("SKIPPED")]
        assert all("LMCache-driven" in line for line in skipped), skipped
