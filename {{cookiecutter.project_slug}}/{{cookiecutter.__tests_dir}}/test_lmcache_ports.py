# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache's per-device tests (CUDA, NPU, MUSA), ported to this plugin: the kit's
classes, subclassed.

Each ``Base...Tests`` class of ``lmcache_device_kit.conformance.ports`` holds one of
LMCache's ``tests/v1/platform/devices/{cuda,npu,musa}/`` files, ported: the same
scenarios and assertions against this backend's classes on its device. Every
departure from the originals, and what was not ported, is listed in the kit's
``lmcache_device_kit/conformance/ports/README.md`` (and in each module's docstring).

Not part of this project's own suite (``pyproject.toml`` ignores this file): it is
the ``devices`` suite of the kit's contract runner (``nox -s lmcache_contract``;
``python -m lmcache_device_kit.contract --suite devices``), which runs it against the
installed wheel, counted apart from LMCache's own tests, and prints the departures.
"""

# Future
from __future__ import annotations

# Third Party
from lmcache_device_kit.conformance.ports import (
    cuda_ipc_wrapper,
    cuda_pin_memory,
    cuda_tensor_from_ptr,
    event_ipc_ordering,
    gpu_cache_context,
    musa_event_ipc,
    musa_pin_memory,
    musa_pointer_transfer,
    npu_cache_context,
    npu_device_ops_ordering,
    npu_event_ipc,
    npu_ipc_wrapper,
    npu_pin_memory,
    npu_tensor_from_ptr,
)


class TestCudaIpcWrapper(cuda_ipc_wrapper.BaseCudaIpcWrapperTests):
    pass


class TestCudaPinMemory(cuda_pin_memory.BaseCudaPinMemoryTests):
    pass


class TestCudaTensorFromPtr(cuda_tensor_from_ptr.BaseCudaTensorFromPtrTests):
    pass


class TestEventIpcOrdering(event_ipc_ordering.BaseEventIpcOrderingTests):
    pass


class TestGpuCacheContext(gpu_cache_context.BaseGpuCacheContextTests):
    pass


class TestMusaEventIpc(musa_event_ipc.BaseMusaEventIpcTests):
    pass


class TestMusaPinMemory(musa_pin_memory.BaseMusaPinMemoryTests):
    pass


class TestMusaPointerTransfer(musa_pointer_transfer.BaseMusaPointerTransferTests):
    pass


class TestNpuCacheContext(npu_cache_context.BaseNpuCacheContextTests):
    pass


class TestNpuDeviceOpsOrdering(npu_device_ops_ordering.BaseNpuDeviceOpsOrderingTests):
    pass


class TestNpuEventIpc(npu_event_ipc.BaseNpuEventIpcTests):
    pass


class TestNpuIpcWrapper(npu_ipc_wrapper.BaseNpuIpcWrapperTests):
    pass


class TestNpuPinMemory(npu_pin_memory.BaseNpuPinMemoryTests):
    pass


class TestNpuTensorFromPtr(npu_tensor_from_ptr.BaseNpuTensorFromPtrTests):
    pass
