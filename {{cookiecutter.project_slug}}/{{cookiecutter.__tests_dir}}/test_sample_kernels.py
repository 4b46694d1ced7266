# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The sample kernels' own tests, on the CPU emulator: the copy kernel
(``_kernels.copy_bytes``) reads pinned host memory at the address the runtime maps it
at and fails its stream on memory its device cannot reach; and what the sample's code
says when its native ops cannot run, or its kernel reads a block id outside the cache.

Why a file of this project's, not a class of the kit: it launches the sample kernels
by their private names and takes the emulator's launch entry point away, which your
kernels and runtime need not have, and it matches the sample's messages, which are
not yours; the kit's conformance suite reads only what ``native_ops`` declares (its
docstring) and checks the behaviour behind these messages. The emulator's rule
``TestSampleKernels`` holds is the README's emulator-rule table's (host memory
mapping). Marked ``host_memory_mapping``: ``TestHostMemory`` runs it again in the
other mapping. TODO(vendor): replace them with your kernels' own tests, or delete
them with the sample kernels.

Imports torch and the kit's test helpers; the plugin only through fixtures.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any
import textwrap

# Third Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import (
    page_aligned,
    run_python,
    same_bytes,
)
import pytest
import torch

DEVICE = "{{ cookiecutter.device_name }}"
NBYTES = 1 << 16
PAGEABLE = "pageable host memory"
SEPARATE = "separate device address"
UNMAPPED = "without the mapped flag"
#: The emulator's flag mapping a registration for kernels (cudaHostRegisterMapped's).
MAPPED = 0x02


def copy_kernel(native: Any, dest: int, src: int, nbytes: int) -> None:
    """The sample copy kernel, launched as the native ops launch it, on device 0."""
    launch = native._launch_on(torch.device(DEVICE, 0))
    native._kernels.copy_bytes(*launch, dest, src, nbytes)


def host_bytes(fill: int) -> torch.Tensor:
    return torch.full((NBYTES,), fill, dtype=torch.uint8)


@pytest.fixture
def device(native: Any, emulator: Any) -> Iterator[Any]:
    """The emulator; a stream failure a test provoked is forgotten afterwards."""
    yield emulator
    emulator.inject_faults()


@pytest.mark.host_memory_mapping
class TestSampleKernels(ConformanceTests):
    """The sample copy kernel and the emulator's host memory mapping."""

    requires = frozenset({"native_ops", "emulator"})

    def test_a_kernel_reaches_pinned_host_memory_at_the_device_address_the_runtime_gives(  # noqa: E501
        self, native: Any, device: Any
    ) -> None:
        """Allocated pinned or registered, a range is read by a kernel at the address
        ``host_device_pointer`` (cudaHostGetDevicePointer) gives: its host address where
        the device maps it there, a separate one otherwise."""
        allocated, registered = host_bytes(1).pin_memory(), page_aligned(NBYTES, 2)
        assert device.host_register(registered.data_ptr(), NBYTES, MAPPED)
        try:
            for memory in (allocated, registered):
                address = device.host_device_pointer(memory.data_ptr() + 16)
                same = device.host_memory_mapped_at_same_address
                assert (address == memory.data_ptr() + 16) is same
                target = torch.zeros(NBYTES - 16, dtype=torch.uint8, device=DEVICE)
                copy_kernel(native, target.data_ptr(), address, NBYTES - 16)
                device.synchronize()
                assert same_bytes(target, memory[16:])
        finally:
            assert device.host_unregister(registered.data_ptr())

    def test_a_kernel_given_host_memory_its_device_cannot_reach_fails_its_stream(
        self, native: Any, device: Any
    ) -> None:
        """Pageable memory fails a kernel's stream on every runtime, and so does memory
        registered without the mapped flag; so do the host address of pinned memory
        where the device maps it elsewhere, and an access past a mapped range's end."""
        pageable, pinned = host_bytes(3), host_bytes(4).pin_memory()
        unmapped = page_aligned(NBYTES, 5)
        assert device.host_register(unmapped.data_ptr(), NBYTES)
        alias = device.host_device_pointer(pinned.data_ptr())
        cases = [(pageable.data_ptr(), NBYTES, PAGEABLE)]
        cases += [(unmapped.data_ptr(), NBYTES, UNMAPPED)]
        if not device.host_memory_mapped_at_same_address:
            cases += [
                (pinned.data_ptr(), NBYTES, SEPARATE),
                (alias, NBYTES + 1, "outside"),
            ]
        target = torch.zeros(NBYTES + 1, dtype=torch.uint8, device=DEVICE)
        for address, nbytes, reason in cases:
            copy_kernel(native, target.data_ptr(), address, nbytes)
            with pytest.raises(RuntimeError, match=reason):
                device.synchronize()
            device.inject_faults()
        assert device.host_unregister(unmapped.data_ptr())
        assert int(target.count_nonzero()) == 0


class TestSampleMessages(ConformanceTests):
    """What the sample's code says when its native ops cannot run, and when its kernel
    reads a block id outside the cache (the kit checks the behaviour, not the words)."""

    requires = frozenset({"native_ops", "emulator"})

    @pytest.mark.parametrize(
        ("breakage", "fix"),
        [
            # As if the wheel was built without a compiler:
            ('sys.modules[PACKAGE + ".native_ops"] = None', "--no-isolation"),
            # A runtime before the kernels' launch is ported to it: the emulator
            # without the launch entry point the sample kernels use.
            (
                "delattr(getattr(torch, TORCH_MODULE), 'kernel_launcher')",
                "native_ops._launch_on",
            ),
        ],
        ids=["no-compiled-module", "no-kernel-launch"],
    )
    def test_native_ops_that_cannot_run_stay_on_the_baseline_saying_what_to_fix(
        self, native: Any, breakage: str, fix: str
    ) -> None:
        """Without the compiled kernels, or on a runtime without their launch entry
        point, the ops run LMCache's baseline, and the slow-path report names the
        fix: a rebuild without isolation, or the TODO(vendor) of
        ``native_ops._launch_on``."""
        backend = kit_backend.current()
        code = textwrap.dedent(
            f"""
            import sys, torch
            PACKAGE = "{backend.package}"
            TORCH_MODULE = "{backend.torch_module_name}"
            {breakage}
            import lmcache
            from lmcache.v1.platform import resolve_device_ops
            ops = resolve_device_ops("{backend.device_type}")
            print(type(ops).__name__, ops._native_bound, hasattr(lmcache, "device_ops"))
            """
        )
        done = run_python(code)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-2:] == ["False", "True"]
        kind = f"{backend.slow_path_mark} native ops not bound"
        report = [line for line in done.stderr.splitlines() if kind in line]
        assert report, done.stderr[-3000:]
        assert fix in report[0]

    def test_the_device_ids_kernel_names_the_block_id_outside_the_cache(
        self, native: Any, device: Any
    ) -> None:
        """``block_copy`` reads its ids on the device: one outside the cache fails the
        stream, and the next synchronization names it and the cache's range; no block
        is copied."""
        block, blocks = 16, 4
        layer = torch.ones(blocks * block, dtype=torch.uint8, device=DEVICE)
        chunk = torch.zeros(2 * block, dtype=torch.uint8, device=DEVICE)
        ids = torch.tensor([1, blocks], dtype=torch.long, device=DEVICE)
        native._kernels.block_copy(
            *native._launch_on(torch.device(DEVICE, 0)),
            [layer.data_ptr()],
            0,
            block,
            block,
            1,
            [chunk.data_ptr()],
            2,
            ids,
            blocks,
            0,
            True,
        )
        with pytest.raises(RuntimeError, match=r"block id 4 out of range \[0, 4\)"):
            device.synchronize()
        device.inject_faults()
        assert int(chunk.count_nonzero()) == 0
