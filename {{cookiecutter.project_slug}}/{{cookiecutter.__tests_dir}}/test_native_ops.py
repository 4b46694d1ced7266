# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The native ops module honours the guide's integration contract (Part 2).

Gated on the package shipping ``native_ops``: without it every test is skipped
with the reason. When it ships, the ops must really be bound (a build that
silently fell back to the baseline fails here).
"""

# Future
from __future__ import annotations

# Standard
import inspect
import textwrap

# Third Party
from _support import (
    BLOCK_IDS,
    BS,
    KV_LAYOUTS,
    STRIDED,
    gather_to_cpu,
    held,
    run_python,
    same_bytes,
    seeded_kv,
)
from lmcache_device_kit.harness.worker_kv import padding_intact, strided
import pytest
import torch

# First Party
from lmcache.v1.multiprocess.transfer_context.base import (
    _detect_block_transfer_accepts_tensor,
    gather_paged_kv_to_cpu,
    scatter_cpu_to_paged_kv,
)
from lmcache.v1.platform import resolve_device_ops, torch_ops
import lmcache

DEVICE = "{{ cookiecutter.device_name }}"
PACKAGE = "{{ cookiecutter.__package }}"
SLOW_PATH_MARK = "{{ cookiecutter.backend_name }} slow path:"
#: Formats the sample kernels handle, and one they hand back to the baseline.
NATIVE_LAYOUTS = {
    name: KV_LAYOUTS[name] for name in ("flash_nhd", "flashinfer_nhd", "mla")
}
FALLBACK_LAYOUTS = {"flash_hnd": KV_LAYOUTS["flash_hnd"]}
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


def test_native_ops_are_bound_over_the_baseline(native) -> None:  # type: ignore[no-untyped-def]
    """ensure_native() bound the module: the ops instance calls the native functions."""
    ops = resolve_device_ops(DEVICE)
    assert ops._native_bound is True
    assert ops.multi_layer_block_kv_transfer is native.multi_layer_block_kv_transfer
    assert ops.lmcache_memcpy_async is native.lmcache_memcpy_async


def test_every_public_native_symbol_is_a_baseline_op_with_its_parameters(
    native,
) -> None:  # type: ignore[no-untyped-def]
    """bind_native binds every public callable and type: each must be a torch_ops
    function, same parameters in order."""
    public = {
        name: getattr(native, name) for name in dir(native) if not name.startswith("_")
    }
    bindable = {n: f for n, f in public.items() if callable(f) or isinstance(f, type)}
    assert bindable, "the native module binds no op"
    for name, fn in bindable.items():
        assert not isinstance(fn, type), (
            f"type {name} is public: bind_native would put it on lmcache.device_ops"
        )
        assert hasattr(torch_ops, name), (
            f"{name} is not a torch_ops function: bind_native would add a stray op"
        )
        ours = list(inspect.signature(fn).parameters)
        theirs = list(inspect.signature(getattr(torch_ops, name)).parameters)
        assert ours == theirs, f"{name}{ours} differs from torch_ops.{name}{theirs}"


def test_bound_ops_gain_none_of_the_names_lmcache_keeps_off_device_ops(native) -> None:  # type: ignore[no-untyped-def]
    """LMCache detects features with hasattr(device_ops, ...); its own
    test_device_ops.py forbids these names."""
    ops = resolve_device_ops(DEVICE)
    assert ops._native_bound is True
    assert [name for name in NATIVE_ONLY_NAMES if hasattr(ops, name)] == []
    assert hasattr(ops, "PageBufferShapeDesc")


def test_engine_driven_keeps_tensor_mode_with_native_ops(native) -> None:  # type: ignore[no-untyped-def]
    """LMCache still passes tensors (not raw pinned pointers) to the bound transfer
    op."""
    op = resolve_device_ops(DEVICE).multi_layer_block_kv_transfer
    if inspect.signature(
        _detect_block_transfer_accepts_tensor
    ).parameters:  # lmcache 0.5.6: asks per callable
        assert _detect_block_transfer_accepts_tensor(op) is True
    else:  # lmcache 0.5.4/0.5.5: inspects the process-wide lmcache.device_ops (ours)
        assert lmcache.device_ops.multi_layer_block_kv_transfer == op
        assert _detect_block_transfer_accepts_tensor() is True


@pytest.mark.parametrize("skip_blocks", [0, 1, 3], ids=["skip0", "skip1", "skip3"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("layout", list(NATIVE_LAYOUTS) + list(FALLBACK_LAYOUTS))
def test_native_transfers_equal_the_baseline_both_ways(  # type: ignore[no-untyped-def]
    native, layout: str, dtype: torch.dtype, skip_blocks: int
) -> None:
    """D2H and H2D through the bound op equal the CPU baseline byte for byte; supported
    formats run natively."""
    shape, hints = {**NATIVE_LAYOUTS, **FALLBACK_LAYOUTS}[layout]
    source = seeded_kv(shape, seed=11, dtype=dtype)
    before = dict(native._calls)
    expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
    on_device = {k: v.to(DEVICE) for k, v in source.items()}
    got = gather_to_cpu(on_device, BLOCK_IDS, 2, layout_hints=hints)
    assert all(same_bytes(g, e) for g, e in zip(got, expected, strict=True))
    zeros = {k: torch.zeros_like(v) for k, v in source.items()}
    on_device = {k: v.to(DEVICE) for k, v in zeros.items()}
    skip_tokens = skip_blocks * BS
    scatter_cpu_to_paged_kv(
        zeros,
        BLOCK_IDS,
        expected,
        2,
        skip_first_n_tokens=skip_tokens,
        layout_hints=hints,
    )
    scatter_cpu_to_paged_kv(
        on_device,
        BLOCK_IDS,
        expected,
        2,
        skip_first_n_tokens=skip_tokens,
        layout_hints=hints,
    )
    assert all(same_bytes(on_device[k], zeros[k]) for k in zeros)
    path = "native" if layout in NATIVE_LAYOUTS else "fallback"
    key = f"multi_layer_block_kv_transfer:{path}"
    assert native._calls[key] >= before.get(key, 0) + 2, (
        f"expected the {path} path for {layout}"
    )


def test_native_transfers_run_in_stream_order_not_on_the_host_at_call_time(
    native, runtime
) -> None:  # type: ignore[no-untyped-def]
    """A native gather queued behind pending work writes nothing until that work has
    run, then the right bytes: kernels are launched on the device's current stream (not
    run on the host, not on a stream of their own)."""
    shape, hints = NATIVE_LAYOUTS["flash_nhd"]
    source = seeded_kv(shape, seed=12)
    expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
    on_device = {k: v.to(DEVICE) for k, v in source.items()}
    # Pinned: a kernel is given no pageable chunk, and waits for none.
    out = [torch.zeros_like(chunk, pin_memory=True) for chunk in expected]
    before = native._calls["multi_layer_block_kv_transfer:native"]
    with held(runtime.current_stream()) as hold:
        gather_paged_kv_to_cpu(on_device, BLOCK_IDS, 2, layout_hints=hints, out=out)
        hold.settle()
        early = [int(chunk.count_nonzero()) for chunk in out]
    runtime.synchronize()
    assert native._calls["multi_layer_block_kv_transfer:native"] > before, (
        "the native kernel did not run"
    )
    assert early == [0] * len(out), (
        "the kernel ran ahead of the current stream's work "
        "(on the host or another stream)"
    )
    assert all(same_bytes(got, want) for got, want in zip(out, expected, strict=True))


@pytest.mark.parametrize("case", list(STRIDED))
def test_strided_caches_copy_each_blocks_bytes_and_never_the_padding(  # type: ignore[no-untyped-def]
    native, case: str
) -> None:
    """Blocks apart in memory: a gather reads each block's own bytes and a scatter
    writes them and leaves the padding as it was, on the native path. A copy that takes
    the blocks as back to back passes every contiguous test."""
    layout, memory, block_dim = STRIDED[case]
    shape, hints = NATIVE_LAYOUTS[layout]
    source = seeded_kv(shape, seed=14)
    expected = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
    before = native._calls["multi_layer_block_kv_transfer:native"]
    views = {k: strided(v, DEVICE, memory, block_dim) for k, v in source.items()}
    got = gather_to_cpu(views, BLOCK_IDS, 2, layout_hints=hints)
    assert all(same_bytes(g, e) for g, e in zip(got, expected, strict=True))
    want = {k: torch.zeros_like(v) for k, v in source.items()}
    into = {k: strided(v, DEVICE, memory, block_dim) for k, v in want.items()}
    for kv in (want, into):
        scatter_cpu_to_paged_kv(kv, BLOCK_IDS, expected, 2, layout_hints=hints)
    for name, view in into.items():
        assert same_bytes(view, want[name])
        assert padding_intact(view), "the padding was written"
    after = native._calls["multi_layer_block_kv_transfer:native"]
    assert after >= before + 2, "the native kernels did not run"


@pytest.mark.parametrize("direction", ["D2H", "H2D"])
def test_a_block_id_one_past_the_cache_is_an_index_error_before_anything_is_copied(
    native, runtime, direction: str
) -> None:  # type: ignore[no-untyped-def]
    """Ids are checked where they enter the kernel: one past the last block raises
    IndexError at the call, as the baseline does, and copies nothing. Unchecked, a
    device copies a neighbouring allocation's bytes, or faults the stream."""
    shape, hints = NATIVE_LAYOUTS["flash_nhd"]
    source = seeded_kv(shape, seed=13)
    ids = [*BLOCK_IDS[:-1], shape[1]]  # shape[1]: the layer's block count
    chunks = gather_to_cpu(source, BLOCK_IDS, 2, layout_hints=hints)
    out = [torch.zeros_like(chunk) for chunk in chunks]
    on_device = {k: v.to(DEVICE) for k, v in source.items()}
    with pytest.raises(IndexError):
        if direction == "D2H":
            gather_paged_kv_to_cpu(on_device, ids, 2, layout_hints=hints, out=out)
        else:
            scatter_cpu_to_paged_kv(on_device, ids, chunks[::-1], 2, layout_hints=hints)
    runtime.synchronize()  # a kernel that ran past its allocation raises here
    assert all(int(chunk.count_nonzero()) == 0 for chunk in out)
    assert all(same_bytes(on_device[k], source[k]) for k in source)


@pytest.mark.parametrize(
    ("breakage", "fix"),
    [
        # As if the wheel was built without a compiler:
        (f'sys.modules["{PACKAGE}._kernels"] = None', "--no-isolation"),
        # A vendor's runtime before the kernels' launch is ported to it:
        (
            "import torch; runtime = getattr(torch, DEVICE, None); "
            "runtime and delattr(runtime, 'kernel_launcher')",
            "native_ops._launch_on",
        ),
    ],
    ids=["no-compiled-module", "no-kernel-launch"],
)
def test_native_ops_that_cannot_run_fail_soft_to_the_baseline(  # type: ignore[no-untyped-def]
    native, breakage, fix
) -> None:
    """Without the compiled kernels, or on a runtime without the launch entry point
    they use, LMCache still loads the plugin, on the baseline, and says what to fix."""
    code = textwrap.dedent(
        f"""
        import sys
        DEVICE = "{DEVICE}"
        {breakage}
        import lmcache
        from lmcache.v1.platform import resolve_device_ops
        ops = resolve_device_ops("{DEVICE}")
        print(type(ops).__name__, ops._native_bound, hasattr(lmcache, "device_ops"))
        """
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["False", "True"]
    assert f"{SLOW_PATH_MARK} native ops not bound" in done.stderr
    assert fix in done.stderr


def test_native_switch_keeps_the_baseline(native) -> None:  # type: ignore[no-untyped-def]
    """{{ cookiecutter.__native_env_var }}=0 keeps LMCache's torch baseline (for
    comparisons and bisecting)."""
    done = run_python(
        "import lmcache; from lmcache.v1.platform import resolve_device_ops; "
        f"print(resolve_device_ops('{DEVICE}')._native_bound)",
        {"{{ cookiecutter.__native_env_var }}": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert lmcache is not None
