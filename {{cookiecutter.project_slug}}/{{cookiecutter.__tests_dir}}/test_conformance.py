# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache's conformance tests, run against this backend: the kit's classes, subclassed.

Each ``Base...Tests`` class of ``lmcache_device_kit.conformance`` holds one part of
what LMCache needs from a device backend; pytest runs a subclass's tests against the
backend ``conftest.py`` chose. A class that needs what this backend does not have
(its ``requires``: LMCache-driven transfer, native ops, the CPU emulator, a wheel
of its own or a place in LMCache's tree, ops of its own or a built-in it extends)
is skipped with the reason. A newer kit
brings its new tests with it: bump its pin.

To hold your device to more, add your own tests in files of your own
(``tests/test_<what>.py``); to see one class's tests, read its module in the kit.
"""

# Future
from __future__ import annotations

# Third Party
from lmcache_device_kit.conformance import (
    backend_shape,
    bad_input,
    builtin_extension,
    cache_context,
    cache_context_staging,
    discovery,
    discovery_wheel,
    doctor,
    doctor_live,
    doctor_paths,
    doctor_port,
    e2e_engine_driven,
    e2e_hybrid,
    e2e_lmcache_driven,
    emulator_counters,
    faults,
    host_function_models,
    host_memory,
    injected_faults,
    ipc_importers,
    ipc_wrapper,
    ipc_wrapper_codecs,
    lmcache_driven,
    lmcache_surface,
    native_ops,
    native_pointer_mode,
    native_transfers,
    ops_parity,
    ops_pointers,
    registry_faults,
    runtime_calls,
    stream_order,
)


class TestBackendShape(backend_shape.BaseBackendShapeTests):
    pass


class TestDiscovery(discovery.BaseDiscoveryTests):
    pass


class TestInTreeDiscovery(discovery.BaseInTreeDiscoveryTests):
    pass


class TestWheelDiscovery(discovery_wheel.BaseWheelDiscoveryTests):
    pass


class TestBuiltinExtension(builtin_extension.BaseBuiltinExtensionTests):
    pass


class TestRegistryFaults(registry_faults.BaseRegistryFaultsTests):
    pass


class TestBadInput(bad_input.BaseBadInputTests):
    pass


class TestHostMemory(host_memory.BaseHostMemoryTests):
    pass


class TestLMCacheSurface(lmcache_surface.BaseLMCacheSurfaceTests):
    pass


class TestDoctor(doctor.BaseDoctorTests):
    pass


class TestDoctorLive(doctor_live.BaseDoctorLiveTests):
    pass


class TestDoctorPaths(doctor_paths.BaseDoctorPathsTests):
    pass


class TestDoctorPort(doctor_port.BaseDoctorPortTests):
    pass


class TestIPCWrapper(ipc_wrapper.BaseIPCWrapperTests):
    pass


class TestIPCImporters(ipc_importers.BaseIPCImportersTests):
    pass


class TestIPCWrapperCodec(ipc_wrapper_codecs.BaseIPCWrapperCodecTests):
    pass


class TestCacheContext(cache_context.BaseCacheContextTests):
    pass


class TestCacheContextStaging(cache_context_staging.BaseCacheContextStagingTests):
    pass


class TestTransferRouting(lmcache_driven.BaseTransferRoutingTests):
    pass


class TestLMCacheDriven(lmcache_driven.BaseLMCacheDrivenTests):
    pass


class TestStreamOrder(stream_order.BaseStreamOrderTests):
    pass


class TestHostFunctionModels(host_function_models.BaseHostFunctionModelsTests):
    pass


class TestOpsParity(ops_parity.BaseOpsParityTests):
    pass


class TestOpsPointer(ops_pointers.BaseOpsPointerTests):
    pass


class TestNativeOps(native_ops.BaseNativeOpsTests):
    pass


class TestNativeTorchPin(native_ops.BaseNativeTorchPinTests):
    pass


class TestNativeTransfers(native_transfers.BaseNativeTransfersTests):
    pass


class TestNativePointerMode(native_pointer_mode.BaseNativePointerModeTests):
    pass


class TestE2EEngineDriven(e2e_engine_driven.BaseE2EEngineDrivenTests):
    pass


class TestE2ELMCacheDriven(e2e_lmcache_driven.BaseE2ELMCacheDrivenTests):
    pass


class TestE2EHybridModel(e2e_hybrid.BaseE2EHybridModelTests):
    pass


class TestFaults(faults.BaseFaultsTests):
    pass


class TestInjectedFaults(injected_faults.BaseInjectedFaultsTests):
    pass


class TestInjectedServerFaults(injected_faults.BaseInjectedServerFaultsTests):
    pass


class TestEmulatorCounters(emulator_counters.BaseEmulatorCountersTests):
    pass


class TestEmulatorCounterFiles(emulator_counters.BaseEmulatorCounterFilesTests):
    pass


class TestRuntimeCalls(runtime_calls.BaseRuntimeCallsTests):
    pass
