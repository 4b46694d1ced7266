# SPDX-License-Identifier: Apache-2.0
"""The rungs of a backend of its own device type: the sample's runtime calls, each
replaced by the vendor's (the runtime module, IPC, events, pinning, kernels).

Data only; imports only the ladder's ``Step``.
"""

# Future
from __future__ import annotations

# Local
from .step import Step

OWN_DEVICE_STEPS: tuple[Step, ...] = (
    Step(
        "device",
        "find the device",
        ("device.py:{prefix}DeviceSpec.is_available",),
        "your extension's import, {torch}.is_available(), {torch}.device_count()",
        "TestDiscovery, TestBackendShape",
        "selection",
        needs="device_ops",
    ),
    Step(
        "thread-context",
        "bind a context on LMCache's threads",
        ("runtime.py:bind_thread_context",),
        "a context per thread (aclrtSetDevice; none on CUDA: one context for "
        "every thread)",
        "TestNpuPinMemory, TestIPCWrapper",
        "thread context",
        needs="runtime",
    ),
    Step(
        "stream-handle",
        "a stream's native handle",
        (
            "device.py:{prefix}DeviceSpec.get_stream_handle",
            "cache_context.py:HostCallbackStream.ptr",
        ),
        "the stream's pointer (stream.cuda_stream, stream.npu_stream)",
        "TestCacheContext, TestNpuCacheContext",
        "stream handle",
        needs="device_ops",
        sample=(
            ("device.py:{prefix}DeviceSpec.get_stream_handle", "stream_handle"),
            ("cache_context.py:HostCallbackStream.ptr", "stream_handle"),
        ),
    ),
    Step(
        "stream-sync",
        "wait for a stream's work by its handle",
        ("runtime.py:after_stream_work",),
        "aclrtSynchronizeStream, musaStreamSynchronize (the emulator's waits "
        "release the GIL; your binding need not)",
        "TestStreamOrder, TestNpuDeviceOpsOrdering",
        "stream sync",
        needs="runtime",
        sample=(("runtime.py:after_stream_work", "synchronize_stream_handle"),),
    ),
    Step(
        "host-functions",
        "a C host function on a stream: launched, on a subscribed thread, or none",
        (
            "runtime.py:host_function_model",
            "runtime.py:host_function_launcher",
            "runtime.py:report_processing",
            "_recorders.cpp",
        ),
        "cudaLaunchHostFunc; aclrtSubscribeReport, aclrtLaunchCallback, "
        "aclrtProcessReport (the emulator's _HOST_FUNCS models)",
        "TestHostFunctionModels, TestStreamOrder, TestEventIpcOrdering",
        "host functions",
        needs="runtime",
        sample=(
            ("runtime.py:host_function_model", "host_func_launcher"),
            ("runtime.py:host_function_launcher", "host_func_launcher"),
            ("runtime.py:report_processing", "report_subscriber"),
            ("runtime.py:report_processing", "report_processor"),
        ),
    ),
    Step(
        "pinning",
        "pin host memory, or declare none",
        (
            "pin_memory.py:PINS_HOST_MEMORY",
            "pin_memory.py:HOST_REGISTER_MAPPED",
            "pin_memory.py:PAGE_SIZE",
            "pin_memory.py:_device_reads_host_memory",
            "pin_memory.py:host_range_is_pinned",
            "pin_memory.py:{prefix}PinMemoryBackend.pin_memory",
            "pin_memory.py:{prefix}PinMemoryBackend.unpin_memory",
        ),
        "cudaHostRegister, cudaHostUnregister, cudaPointerGetAttributes "
        "(aclrtHostRegister, aclrtHostUnregister)",
        "TestHostMemory, TestNpuPinMemory, TestCudaPinMemory",
        "pinned memory",
        needs="pin_memory",
        sample=(
            ("pin_memory.py:_device_reads_host_memory", "is_emulator"),
            ("pin_memory.py:host_range_is_pinned", "host_is_pinned"),
            ("pin_memory.py:{prefix}PinMemoryBackend.pin_memory", "host_register"),
            (
                "pin_memory.py:{prefix}PinMemoryBackend.unpin_memory",
                "host_unregister",
            ),
        ),
    ),
    Step(
        "host-access",
        "where kernels reach pinned host memory",
        (
            "_host_access.py:host_memory_mapped_at_same_address",
            "_host_access.py:keep_device_address",
            "_host_access.py:kernel_host_address",
        ),
        "cudaHostGetDevicePointer, cudaPointerGetAttributes (aclrtHostRegister's "
        "devPtr)",
        "TestHostMemory, TestNativePointerMode",
        "host access",
        needs="_host_access",
        sample=(
            (
                "_host_access.py:host_memory_mapped_at_same_address",
                "host_memory_mapped_at_same_address",
            ),
            ("_host_access.py:keep_device_address", "host_device_pointer"),
            ("_host_access.py:kernel_host_address", "host_is_pinned"),
        ),
    ),
    Step(
        "ipc-memory",
        "export, open and close device memory across processes",
        (
            "ipc_wrapper.py:_export_handle",
            "ipc_wrapper.py:_open_handle",
            "ipc_wrapper.py:_close_handle",
            "runtime.py:importers_must_be_allowed",
            "runtime.py:allow_importer",
            "runtime.py:memory_is_vmm",
            "runtime.py:export_shareable",
            "runtime.py:open_shareable",
        ),
        "cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle "
        "(aclrtIpcMemSetImportPid: each importer allowed; VMM memory: "
        "cuMemExportToShareableHandle, a file descriptor); "
        "{torch}.get_device_properties(i).uuid",
        "TestIPCWrapper, TestNpuIpcWrapper, TestCudaIpcWrapper",
        "ipc memory",
        needs="ipc_wrapper",
        sample=(
            ("ipc_wrapper.py:_export_handle", "ipc_export_handle"),
            ("ipc_wrapper.py:_open_handle", "ipc_open_handle"),
            ("ipc_wrapper.py:_close_handle", "ipc_close_handle"),
            ("runtime.py:importers_must_be_allowed", "ipc_allow_importer"),
            ("runtime.py:allow_importer", "ipc_allow_importer"),
            ("runtime.py:memory_is_vmm", "ipc_memory_is_vmm"),
            ("runtime.py:export_shareable", "ipc_export_fd"),
            ("runtime.py:open_shareable", "ipc_open_fd"),
        ),
    ),
    Step(
        "events",
        "share events across processes",
        (
            "event_ipc.py:{prefix}EventIPCBackend.check_event_support",
            "event_ipc.py:{prefix}EventIPCBackend.wait_event",
            "event_ipc.py:{prefix}EventIPCBackend._on",
        ),
        "{torch}.Event(interprocess=True), event.ipc_handle(), "
        "{torch}.Event.from_ipc_handle(), {torch}.device(i)",
        "TestEventIpcOrdering, TestNpuEventIpc, TestMusaEventIpc",
        "interprocess events",
        needs="event_ipc",
    ),
    Step(
        "zero-copy",
        "a tensor over device memory at a pointer",
        ("device_ops.py:device_tensor",),
        "Tensor.set_ on torch._C._construct_storage_from_data_pointer (or your "
        "runtime's own); the device that owns a pointer (cudaPointerGetAttributes)",
        "TestOpsPointer, TestNpuTensorFromPtr, TestCudaTensorFromPtr",
        "tensor from ptr",
        needs="device_ops",
        sample=(("device_ops.py:device_tensor", "pointer_device"),),
    ),
    Step(
        "lmcache-driven",
        "offer LMCache-driven transfer",
        ("device.py:{prefix}DeviceSpec.lmcache_driven_unproven",),
        "IPC memory and interprocess events ported (the steps above); a cheap probe "
        "of what else they need (driver, firmware)",
        "TestLMCacheDriven, TestE2ELMCacheDriven",
        "transfer modes",
        needs="ipc_wrapper",
    ),
    Step(
        "build",
        "build the native ops with your toolchain",
        (
            "setup.py:vendor_build",
            "pyproject.toml:[build-system]",
            "pyproject.toml:[project]",
            "pyproject.toml:[tool.cibuildwheel]",
            "pyproject.toml:[tool.cibuildwheel.linux]",
        ),
        "your compiler (CXX), SDK, torch extension libraries; cibuildwheel, your image",
        "TestNativeOps, TestDoctorPort",
        "native build",
        needs="native_ops",
    ),
    Step(
        "kernel-launch",
        "launch kernels on a stream",
        (
            "native_ops.py:_launches_kernels",
            "native_ops.py:_launch_on",
            "native_ops.py:_copy_on",
            "native_ops.py:lmcache_memcpy_async",
            "_kernels.cpp:Launch",
            "_kernels.cpp:MemcpyAsync",
        ),
        "cudaLaunchKernel, aclrtLaunchKernel with a bounded parameter block, and "
        "cudaMemcpyAsync, aclrtMemcpyAsync, on the current stream (the emulator's "
        "kernel_launcher, memcpy_async_launcher); the device that owns a pointer",
        "TestNativeOps, TestNativeTransfers",
        "native ops",
        needs="native_ops",
        sample=(
            ("native_ops.py:_launches_kernels", "kernel_launcher"),
            ("native_ops.py:_launch_on", "kernel_launcher"),
            ("native_ops.py:_copy_on", "memcpy_async_launcher"),
            ("native_ops.py:lmcache_memcpy_async", "pointer_device"),
        ),
    ),
    Step(
        "kernels",
        "your device kernels",
        (
            "native_ops.py",
            "native_ops.py:NATIVE_KV_FORMATS",
            "_native_plan.py",
            "_kernels.cpp",
            "_kernels.cpp:Translate",
            "device_ops.py:{prefix}DeviceOps.ensure_native",
            "device_ops.py:{prefix}DeviceOps.multi_layer_block_kv_transfer",
            "tests/test_sample_kernels.py",
        ),
        "your copy kernels or DMA descriptors, on device addresses (no address "
        "translator: the emulator's kernel_address_translator)",
        "TestNativeTransfers, TestNativePointerMode, TestOpsParity",
        "native copy",
        needs="device_ops",
        sample=(("native_ops.py:_launch_on", "kernel_address_translator"),),
    ),
)
