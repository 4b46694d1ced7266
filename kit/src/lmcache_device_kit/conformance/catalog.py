# SPDX-License-Identifier: Apache-2.0
"""Every conformance class of the kit, in the order a project runs them: one list.

Why it exists: two suites run the same classes. A wheel project's
``tests/test_conformance.py`` subclasses each one by hand (a vendor reads them
there); an in-tree contribution carries no test that imports the kit (LMCache's tree
does not depend on it), so the template runs the classes beside it, from a directory
of its own, subclassed from this list (``subclasses``). The template's tests hold the
wheel project's file to this list, class for class.

Imports the classes' modules only: like them, it must not import lmcache, torch or
the plugin at import time.
"""

# Future
from __future__ import annotations

# First Party
from lmcache_device_kit.conformance import (
    backend_shape,
    bad_input,
    builtin_extension,
    cache_context,
    cache_context_staging,
    cluster,
    cluster_faults,
    cluster_p2p,
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
from lmcache_device_kit.conformance.base import ConformanceTests

#: The base classes, in the order of a project's ``tests/test_conformance.py``.
BASES: tuple[type[ConformanceTests], ...] = (
    backend_shape.BaseBackendShapeTests,
    discovery.BaseDiscoveryTests,
    discovery.BaseInTreeDiscoveryTests,
    discovery_wheel.BaseWheelDiscoveryTests,
    builtin_extension.BaseBuiltinExtensionTests,
    registry_faults.BaseRegistryFaultsTests,
    bad_input.BaseBadInputTests,
    host_memory.BaseHostMemoryTests,
    lmcache_surface.BaseLMCacheSurfaceTests,
    doctor.BaseDoctorTests,
    doctor_live.BaseDoctorLiveTests,
    doctor_paths.BaseDoctorPathsTests,
    doctor_port.BaseDoctorPortTests,
    ipc_wrapper.BaseIPCWrapperTests,
    ipc_importers.BaseIPCImportersTests,
    ipc_wrapper_codecs.BaseIPCWrapperCodecTests,
    cache_context.BaseCacheContextTests,
    cache_context_staging.BaseCacheContextStagingTests,
    lmcache_driven.BaseTransferRoutingTests,
    lmcache_driven.BaseLMCacheDrivenTests,
    stream_order.BaseStreamOrderTests,
    host_function_models.BaseHostFunctionModelsTests,
    ops_parity.BaseOpsParityTests,
    ops_pointers.BaseOpsPointerTests,
    native_ops.BaseNativeOpsTests,
    native_ops.BaseNativeTorchPinTests,
    native_transfers.BaseNativeTransfersTests,
    native_pointer_mode.BaseNativePointerModeTests,
    e2e_engine_driven.BaseE2EEngineDrivenTests,
    e2e_lmcache_driven.BaseE2ELMCacheDrivenTests,
    e2e_hybrid.BaseE2EHybridModelTests,
    faults.BaseFaultsTests,
    injected_faults.BaseInjectedFaultsTests,
    injected_faults.BaseInjectedServerFaultsTests,
    emulator_counters.BaseEmulatorCountersTests,
    emulator_counters.BaseEmulatorCounterFilesTests,
    runtime_calls.BaseRuntimeCallsTests,
)
#: The classes a project runs apart from ``BASES``, each in a test module of its own
#: (``tests/test_cluster.py``): marked ``cluster``, so its default run deselects them
#: and a session of their own (``pytest -m cluster``) runs them.
APART: tuple[type[ConformanceTests], ...] = (
    cluster.BaseClusterTests,
    cluster_faults.BaseClusterFaultTests,
    cluster_p2p.BaseClusterP2PTests,
)


def subclass_name(base: type[ConformanceTests]) -> str:
    """The name a project gives its subclass of ``base``: ``BaseXTests`` ->
    ``TestX``."""
    name = base.__name__
    if not (name.startswith("Base") and name.endswith("Tests")):
        raise ValueError(f"{name}: a conformance class is named Base<What>Tests")
    return "Test" + name[len("Base") : -len("Tests")]


def subclasses(module: str) -> dict[str, type[ConformanceTests]]:
    """A ``Test<X>`` subclass of every class in ``BASES``, by name, defined in
    ``module`` (a test module's ``__name__``), as pytest collects them from it:
    ``globals().update(subclasses(__name__))``."""
    return {
        subclass_name(base): type(subclass_name(base), (base,), {"__module__": module})
        for base in BASES
    }
