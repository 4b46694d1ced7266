# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The sample copy kernel (``_kernels.copy_bytes``) on raw host addresses, on the CPU
emulator: it reads pinned host memory at the address the runtime maps it at, and
fails its stream on memory its device cannot reach.

Why a file of this project's, not a class of the kit: it launches one of the sample
kernels by its private name, which your kernels need not have; the kit's conformance
suite reads only what ``native_ops`` declares (its docstring). The emulator's rule it
holds is the README's emulator-rule table's (host memory mapping). Marked
``host_memory_mapping``: ``TestHostMemory`` runs it again in the other mapping.
TODO(vendor): replace it with your kernels' own tests, or delete it with the sample
kernels.

Imports torch and the kit's test helpers; the plugin only through fixtures.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from typing import Any

# Third Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.support import same_bytes
import pytest
import torch

DEVICE = "{{ cookiecutter.device_name }}"
NBYTES = 1 << 16
PAGEABLE = "pageable host memory"
SEPARATE = "separate device address"


def copy_kernel(native: Any, dest: int, src: int, nbytes: int) -> None:
    """The sample copy kernel, launched as the native ops launch it, on device 0."""
    launch = native._launch_on(torch.device(DEVICE, 0))
    native._kernels.copy_bytes(*launch, dest, src, nbytes)


def host_bytes(fill: int) -> torch.Tensor:
    return torch.full((NBYTES,), fill, dtype=torch.uint8)


@pytest.mark.host_memory_mapping
class TestSampleKernels(ConformanceTests):
    """The sample copy kernel and the emulator's host memory mapping."""

    requires = frozenset({"native_ops", "emulator"})

    @pytest.fixture
    def device(self, native: Any, emulator: Any) -> Iterator[Any]:
        """The emulator; a stream failure a test provoked is forgotten afterwards."""
        yield emulator
        emulator.inject_faults()

    def test_a_kernel_reaches_pinned_host_memory_at_the_device_address_the_runtime_gives(  # noqa: E501
        self, native: Any, device: Any
    ) -> None:
        """Allocated pinned or registered, a range is read by a kernel at the address
        ``host_device_pointer`` (cudaHostGetDevicePointer) gives: its host address where
        the device maps it there, a separate one otherwise."""
        allocated, registered = host_bytes(1).pin_memory(), host_bytes(2)
        assert device.host_register(registered.data_ptr(), NBYTES)
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
        """Pageable memory fails a kernel's stream on every runtime; so does the host
        address of pinned memory where the device maps it elsewhere, and an access past
        the end of a mapped range."""
        pageable, pinned = host_bytes(3), host_bytes(4).pin_memory()
        alias = device.host_device_pointer(pinned.data_ptr())
        cases = [(pageable.data_ptr(), NBYTES, PAGEABLE)]
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
        assert int(target.count_nonzero()) == 0
