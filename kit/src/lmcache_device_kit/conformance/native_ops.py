# SPDX-License-Identifier: Apache-2.0
"""The native ops module honours the guide's integration contract (Part 2): bound
over the baseline, nothing but baseline ops, and a soft fall back.

Gated on the package shipping ``native_ops`` (``requires``): without it the class is
skipped with the reason. When it ships, the ops must really be bound (a build that
silently fell back to the baseline fails here). Their transfers are
``native_transfers.py``.

Imports torch, through ``support.py``; LMCache and the plugin only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
from typing import Any
import importlib
import inspect
import textwrap

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.native_contract import native_symbol_problems
from lmcache_device_kit.conformance.support import run_python
from lmcache_device_kit.doctor.calls import release

#: Names of LMCache's own native module that must never appear on a device's ops, as
#: LMCache's own test checks:
#: tests/v1/platform/test_device_ops.py::test_package_exports_resolved_device_ops.
NATIVE_ONLY_NAMES = (
    "TransferDirection",
    "EngineKVFormat",
    "GPUKVFormat",
    "is_cross_layer",
    "is_kv_list",
    "is_layer_list",
    "is_mla",
)


def device_ops() -> Any:
    """The ops LMCache resolves for the backend's device."""
    # First Party
    from lmcache.v1.platform import resolve_device_ops

    return resolve_device_ops(kit_backend.current().device_type)


class BaseNativeOpsTests(ConformanceTests):
    """The binding: what the native module binds, and what happens when it cannot."""

    requires = frozenset({"native_ops"})

    def test_native_ops_are_bound_over_the_baseline(self, native: Any) -> None:
        """ensure_native() bound the module: the ops instance calls the native
        functions."""
        ops = device_ops()
        assert ops._native_bound is True
        assert ops.multi_layer_block_kv_transfer is native.multi_layer_block_kv_transfer
        assert ops.lmcache_memcpy_async is native.lmcache_memcpy_async

    def test_every_public_native_symbol_is_a_baseline_op_with_its_parameters(
        self, native: Any
    ) -> None:
        """bind_native binds every public callable and type: each must be a torch_ops
        function, same parameters in order, or a native-only name LMCache itself calls
        on this release, shaped as it calls it (``native_symbol_problems``)."""
        # First Party
        from lmcache.v1.platform import torch_ops

        public = [name for name in dir(native) if not name.startswith("_")]
        assert any(hasattr(torch_ops, n) for n in public), "the module binds no op"
        installed = release(metadata.version("lmcache"))
        problems = native_symbol_problems(native, torch_ops, installed)
        assert problems == [], "; ".join(problems)

    def test_bound_ops_gain_none_of_the_names_lmcache_keeps_off_device_ops(
        self, native: Any
    ) -> None:
        """LMCache detects features with hasattr(device_ops, ...); its own
        test_device_ops.py forbids these names."""
        ops = device_ops()
        assert ops._native_bound is True
        assert [name for name in NATIVE_ONLY_NAMES if hasattr(ops, name)] == []
        assert hasattr(ops, "PageBufferShapeDesc")

    def test_engine_driven_keeps_tensor_mode_with_native_ops(self, native: Any) -> None:
        """LMCache still passes tensors (not raw pinned pointers) to the bound transfer
        op."""
        # First Party
        from lmcache.v1.multiprocess.transfer_context.base import (
            _detect_block_transfer_accepts_tensor,
        )
        import lmcache

        op = device_ops().multi_layer_block_kv_transfer
        if inspect.signature(
            _detect_block_transfer_accepts_tensor
        ).parameters:  # lmcache 0.5.6: asks per callable
            assert _detect_block_transfer_accepts_tensor(op) is True
        else:  # lmcache 0.5.4/0.5.5: inspects the process-wide lmcache.device_ops
            assert lmcache.device_ops.multi_layer_block_kv_transfer == op
            assert _detect_block_transfer_accepts_tensor() is True

    def test_native_ops_that_cannot_load_fail_soft_to_the_baseline(
        self, native: Any
    ) -> None:
        """Without its native ops module (a wheel built without a compiler: it fails to
        import, whatever its compiled module is called), LMCache still loads the
        plugin, on the baseline, and the plugin reports the slow path with its mark
        (names.SLOW_PATH_MARK). What it says to fix is the plugin's own wording (the
        sample's is tested in its tests/test_sample_kernels.py)."""
        backend = kit_backend.current()
        code = textwrap.dedent(
            f"""
            import sys
            sys.modules["{backend.package}.native_ops"] = None
            import lmcache
            from lmcache.v1.platform import resolve_device_ops
            ops = resolve_device_ops("{backend.device_type}")
            print(type(ops).__name__, ops._native_bound, hasattr(lmcache, "device_ops"))
            """
        )
        done = run_python(code)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-2:] == ["False", "True"]
        assert backend.slow_path_mark in done.stderr, done.stderr[-3000:]

    def test_native_switch_keeps_the_baseline(self, native: Any) -> None:
        """The ops module's NATIVE_ENV_VAR=0 keeps LMCache's torch baseline (for
        comparisons and bisecting)."""
        backend = kit_backend.current()
        ops_module = importlib.import_module(type(device_ops()).__module__)
        done = run_python(
            "import lmcache; from lmcache.v1.platform import resolve_device_ops; "
            f"print(resolve_device_ops('{backend.device_type}')._native_bound)",
            {ops_module.NATIVE_ENV_VAR: "0"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip().splitlines()[-1] == "False"


class BaseNativeTorchPinTests(ConformanceTests):
    """A wheel's native ops are built against one torch: with another, the plugin
    keeps the baseline and says which torch to install, before loading the module."""

    requires = frozenset({"native_ops", "wheel"})

    def test_native_ops_stay_unbound_under_another_torch_and_name_the_one_to_install(
        self, native: Any
    ) -> None:
        """The wheel pins the torch its module is compiled against (``torch==X``);
        under any other torch the module is not loaded (another torch's C++ ABI fails
        to load it, or crashes), LMCache runs the baseline, and the slow-path report
        names the pip command that installs the pinned torch."""
        # Standard
        import importlib.metadata

        backend = kit_backend.current()
        (dist,) = importlib.metadata.packages_distributions()[backend.package]
        requires = importlib.metadata.requires(dist) or []
        (pin,) = [r for r in requires if r.startswith("torch==")]
        code = textwrap.dedent(
            f"""
            import torch
            torch.__version__ = "{pin.split("==")[1]}.post1"  # another torch
            import lmcache
            from lmcache.v1.platform import resolve_device_ops
            print(resolve_device_ops("{backend.device_type}")._native_bound)
            """
        )
        done = run_python(code)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-1] == "False"
        assert backend.slow_path_mark in done.stderr, done.stderr[-3000:]
        assert f"pip install '{pin}'" in done.stderr, done.stderr[-3000:]
