# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""LMCache's conformance tests, run against this backend: the kit's classes, subclassed.

Each ``Base...Tests`` class of ``lmcache_device_kit.conformance`` holds one part of
what LMCache needs from a device backend; pytest runs a subclass's tests against the
backend ``conftest.py`` chose. A class that needs what this backend does not have
(its ``requires``: LMCache-driven transfer, native ops, the CPU emulator) is skipped
with the reason. A newer kit brings its new tests with it: bump its pin.

To hold your device to more, add your own tests in files of your own
(``tests/test_<what>.py``); to see one class's tests, read its module in the kit.
"""

# Future
from __future__ import annotations

# Third Party
from lmcache_device_kit.conformance import (
    backend_shape,
    e2e_engine_driven,
    e2e_hybrid,
    e2e_lmcache_driven,
    faults,
    injected_faults,
)


class TestBackendShape(backend_shape.BaseBackendShapeTests):
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
