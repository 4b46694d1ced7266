# SPDX-License-Identifier: Apache-2.0
"""LMCache's CUDA pinning test, ported to this plugin's pin-memory backend.

Source: LMCache 0.5.6 tests/v1/platform/devices/cuda/test_cuda_pin_memory.py. A
runtime keeps a failed call's error until something reads it, and the next kernel
launch may then fail on the caller's behalf; LMCache's callers fall back to pageable
copies when pinning fails, so a refused pin or unpin must leave the next launch
working. Ported as it is, against the plugin's backend and the device.

Departures (each also in README.md beside this module): none; the module-level
skip on a non-CUDA runtime becomes the suite's ``runtime`` fixture. On the CPU
emulator the last assertion cannot fail (it keeps no pending last-error); the
refusals' ``is False`` can. On a device, all of it can.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit.conformance.ports.common import PortTests, device_type


class BaseCudaPinMemoryTests(PortTests):
    """LMCache's cuda/test_cuda_pin_memory.py against the plugin's pin-memory
    backend."""

    @pytest.mark.parametrize("operation", ["pin", "unpin"])
    def test_a_refused_registration_does_not_fail_the_next_kernel_launch(
        self, lmcache_driven: Any, runtime: Any, operation: str
    ) -> None:
        device = torch.device(device_type())
        torch.zeros(1, device=device)
        backend_cls = lmcache_driven.pin_memory_backend
        assert backend_cls is not None
        backend = backend_cls()
        host = torch.empty(4096, dtype=torch.uint8)
        if operation == "pin":
            # A NULL pointer is refused, as cudaHostRegister refuses it.
            assert backend.pin_memory(0, 0) is False
        else:
            assert backend.unpin_memory(host.data_ptr()) is False

        assert torch.ones(4, device=device).sum().item() == 4
