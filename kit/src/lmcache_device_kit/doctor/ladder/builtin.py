# SPDX-License-Identifier: Apache-2.0
"""The rungs of a backend that extends a built-in on the built-in's device type (a
CUDA look-alike): which built-in it extends, how its runtime is recognised, what of
the built-in's it overrides; and the device's numbers, which every backend gives.

Data only; imports only the ladder's ``Step``.
"""

# Future
from __future__ import annotations

# Local
from .step import Step

BUILTIN_STEPS: tuple[Step, ...] = (
    Step(
        "builtin",
        "extend LMCache's built-in backend of your device type",
        ("device.py:{prefix}DeviceSpec",),
        "none: the built-in's spec is the base class (names.py: EXTENDS); "
        "LMCACHE_DEVICE_BACKEND picks yours where both are available",
        "TestBuiltinExtension, TestDiscovery",
        "device type",
        needs="detect",
    ),
    Step(
        "runtime-detect",
        "recognise your runtime, not the built-in's",
        ("detect.py:runtime_present",),
        "your torch build's version field (torch.version.hip for ROCm), a module or "
        "driver library only your stack ships",
        "TestBuiltinExtension, TestBackendShape",
        "vendor runtime",
        needs="detect",
    ),
    Step(
        "builtin-overrides",
        "override what your runtime lacks of the built-in's",
        (
            "device.py:{prefix}DeviceSpec.ops_cls",
            "device.py:{prefix}DeviceSpec.is_lmcache_driven_available",
            "device.py:{prefix}DeviceSpec.lmcache_driven_unproven",
        ),
        "your kernels, built with your compiler (bind_native); the built-in's IPC "
        "memory and interprocess events (cudaIpcGetMemHandle, cudaEventCreate)",
        "TestOpsParity, TestLMCacheDriven",
        "ops",
        needs="detect",
    ),
)
#: Every backend's last rung: the numbers of what a request costs on its device.
DEVICE_NUMBERS = Step(
    "device-numbers",
    "your device's numbers, for what a request costs",
    ("pyproject.toml:[tool.lmcache-device-kit.device]",),
    "its bus, memory, launch and sync figures, in pyproject.toml",
    "TestDoctorPort",
    "device numbers",
)
