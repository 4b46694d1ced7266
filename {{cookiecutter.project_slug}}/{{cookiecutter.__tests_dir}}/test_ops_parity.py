# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The plugin's ops give byte-identical results to LMCache's torch baseline on the CPU.

Transfers go through LMCache's own engine-driven call sites
(``gather_paged_kv_to_cpu`` = D2H, ``scatter_cpu_to_paged_kv`` = H2D), which
resolve the ops from the KV tensors' device: {{ cookiecutter.device_name }} tensors reach
``{{ cookiecutter.class_prefix }}DeviceOps``, CPU tensors reach LMCache's CPU baseline.
"""

# Future
from __future__ import annotations

# Third Party
from _support import (
    BLOCK_IDS,
    BS,
    KV_LAYOUTS,
    baseline_loaded_cuda_runtime,
    gather_to_cpu,
    same_bytes,
    seeded_kv,
)
import pytest
import torch

# First Party
from lmcache.v1.multiprocess.transfer_context.base import scatter_cpu_to_paged_kv
from lmcache.v1.platform import resolve_device_ops
import lmcache  # noqa: F401 - builds the registry with conftest's environment

DEVICE = "{{ cookiecutter.device_name }}"
OPS_CLASS = "{{ cookiecutter.class_prefix }}DeviceOps"
BLOCKS_PER_CHUNK = 2
LAYOUTS = KV_LAYOUTS


def on_device(kv: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.to(DEVICE) for name, t in kv.items()}


def test_kv_tensors_of_this_device_resolve_to_the_plugin_ops() -> None:
    """LMCache routes {{ cookiecutter.device_name }} tensors to our DeviceOps, not the
    baseline."""
    assert type(resolve_device_ops(DEVICE)).__name__ == OPS_CLASS


def test_each_device_stream_has_its_own_native_handle_and_other_objects_are_refused(
    spec,
) -> None:  # type: ignore[no-untyped-def]
    """get_stream_handle, which LMCache's base class says every platform must override
    (its GDS path needs it)."""
    module = getattr(torch, spec.torch_module_name)
    default, other = module.current_stream(0), module.Stream(0)
    handles = spec.get_stream_handle(default), spec.get_stream_handle(other)
    assert (
        all(isinstance(handle, int) for handle in handles) and handles[0] != handles[1]
    )
    with pytest.raises(RuntimeError, match="native handle"):
        spec.get_stream_handle(object())


def test_lmcache_stream_facade_reaches_the_spec_for_a_device_stream(spec) -> None:  # type: ignore[no-untyped-def]
    """lmcache.v1.platform.stream.stream_handle(device, stream) answers for this device
    instead of raising."""
    facade = pytest.importorskip(
        "lmcache.v1.platform.stream", reason="lmcache before 0.5.6 has no stream facade"
    )
    stream = getattr(torch, spec.torch_module_name).Stream(0)
    assert facade.stream_handle(
        torch.device(DEVICE, 0), stream
    ) == spec.get_stream_handle(stream)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gather_d2h_matches_the_cpu_baseline(layout: str, dtype: torch.dtype) -> None:
    """multi_layer_block_kv_transfer D2H: chunks gathered from the device equal the CPU
    result."""
    shape, hints = LAYOUTS[layout]
    kv_cpu = seeded_kv(shape, seed=1, dtype=dtype)
    expected = gather_to_cpu(kv_cpu, BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints)
    got = gather_to_cpu(
        on_device(kv_cpu), BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints
    )
    assert len(got) == len(expected) == len(BLOCK_IDS) // BLOCKS_PER_CHUNK
    for chunk_got, chunk_expected in zip(got, expected, strict=True):
        assert chunk_got.device.type == "cpu"
        assert same_bytes(chunk_got, chunk_expected)


@pytest.mark.parametrize(
    "skip_tokens", [0, BS, 3 * BS], ids=["skip0", "skip1block", "skip3blocks"]
)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_scatter_h2d_matches_the_cpu_baseline(layout: str, skip_tokens: int) -> None:
    """multi_layer_block_kv_transfer H2D, with skipped prefix blocks: device KV equals
    the CPU result."""
    shape, hints = LAYOUTS[layout]
    source = seeded_kv(shape, seed=2)
    chunks = gather_to_cpu(source, BLOCK_IDS, BLOCKS_PER_CHUNK, layout_hints=hints)
    kv_cpu = {name: torch.zeros_like(t) for name, t in source.items()}
    kv_dev = on_device(kv_cpu)
    for kv in (kv_cpu, kv_dev):
        scatter_cpu_to_paged_kv(
            kv,
            BLOCK_IDS,
            chunks,
            BLOCKS_PER_CHUNK,
            skip_first_n_tokens=skip_tokens,
            layout_hints=hints,
        )
    assert any(t.any() for t in kv_cpu.values())
    for name in kv_cpu:
        assert kv_dev[name].device.type == DEVICE
        assert same_bytes(kv_dev[name], kv_cpu[name])


def test_memcpy_tensor_mode_matches_the_cpu_baseline() -> None:
    """lmcache_memcpy_async with tensor operands copies the same bytes as on the CPU."""
    # First Party
    from {{ cookiecutter.__package }}._lmcache_compat import (
        TransferDirection,
        torch_ops,
    )

    src = torch.randn(1024).to(torch.float16)
    expected = torch.zeros_like(src)
    torch_ops.lmcache_memcpy_async(expected, src, 1000, TransferDirection.H2D, 0, 64)
    dest = torch.zeros(1024, dtype=torch.float16, device=DEVICE)
    resolve_device_ops(DEVICE).lmcache_memcpy_async(
        dest, src, 1000, TransferDirection.H2D, 0, 64
    )
    assert same_bytes(dest, expected)


def device_at(runtime, index: int) -> str:  # type: ignore[no-untyped-def]
    """``{{ cookiecutter.device_name }}:index``, skipping the test on a host with fewer
    devices."""
    if index >= runtime.device_count():
        pytest.skip(f"needs {index + 1} {DEVICE} devices")
    return f"{DEVICE}:{index}"


@pytest.mark.parametrize(
    "index", [0, 1], ids=["device0", "device1-while-device0-is-current"]
)
@pytest.mark.parametrize("direction", ["H2D", "D2H"])
def test_memcpy_pointer_mode_copies_bytes_without_libcudart(
    runtime, direction: str, index: int
) -> None:  # type: ignore[no-untyped-def]
    """Pointer-mode lmcache_memcpy_async moves the bytes on the memory's own device,
    never through libcudart."""
    # First Party
    from {{ cookiecutter.__package }}._lmcache_compat import (
        TransferDirection,
    )

    nbytes = 4096 + 17
    host = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    dev = torch.randint(0, 255, (nbytes,), dtype=torch.uint8).to(
        device_at(runtime, index)
    )
    expected = (host if direction == "H2D" else dev.cpu()).clone()
    ops = resolve_device_ops(DEVICE)
    if direction == "H2D":
        ops.lmcache_memcpy_async(
            dev.data_ptr(), host.data_ptr(), nbytes, TransferDirection.H2D, 0, 4096
        )
        runtime.synchronize(dev.device)  # the copy is asynchronous
        assert same_bytes(dev, expected)
    else:
        ops.lmcache_memcpy_async(
            host.data_ptr(), dev.data_ptr(), nbytes, TransferDirection.D2H, 0, 4096
        )
        runtime.synchronize(dev.device)  # not the current device
        assert same_bytes(host, expected)
    assert not baseline_loaded_cuda_runtime()


{%- if cookiecutter.lmcache_driven != 'no' %}


def test_a_copy_is_quiet_only_from_host_memory_one_pinned_registration_holds(  # type: ignore[no-untyped-def]
    lmcache_driven, emulator
) -> None:
    """Pinned host memory copies quietly: allocated pinned, or registered in pieces as
    LMCache's lazy L1 does, the copy split at the pieces' size LMCache passes. One copy
    across two registrations is a pageable copy on a device, and so is a copy from
    memory never pinned: both are counted as a slow path."""
    # First Party
    from {{ cookiecutter.__package }} import _ops_support
    from {{ cookiecutter.__package }}._lmcache_compat import (
        TransferDirection,
    )

    nbytes = 1 << 16
    dev = torch.zeros(2 * nbytes, dtype=torch.uint8).to(DEVICE)
    allocated = torch.full((2 * nbytes,), 1, dtype=torch.uint8).pin_memory()
    registered = torch.full((2 * nbytes,), 2, dtype=torch.uint8)
    pins = lmcache_driven.pin_memory_backend()
    halves = [registered.data_ptr(), registered.data_ptr() + nbytes]
    assert all(pins.pin_memory(address, nbytes) for address in halves)
    pageable = torch.full((2 * nbytes,), 3, dtype=torch.uint8)
    ops, kind = resolve_device_ops(DEVICE), "pageable host memory"
    h2d = TransferDirection.H2D
    cases = [  # host memory, host_buffer_alignments, whether it is a slow path
        (allocated, 2 * nbytes, False),
        (registered, nbytes, False),
        (registered, 2 * nbytes, True),
        (pageable, 2 * nbytes, True),
    ]
    try:
        for host, alignment, slow in cases:
            before = _ops_support.slow_paths[kind]
            dev.zero_()
            pointers = dev.data_ptr(), host.data_ptr()
            ops.lmcache_memcpy_async(*pointers, 2 * nbytes, h2d, 0, alignment)
            emulator.synchronize()
            verdict = _ops_support.slow_paths[kind] > before
            assert verdict is slow, f"fill {int(host[0])}, pieces of {alignment}"
            assert same_bytes(dev, host)
    finally:
        assert all(pins.unpin_memory(address) for address in halves)
{%- endif %}


@pytest.mark.parametrize(
    "index", [0, 1], ids=["device0", "device1-while-device0-is-current"]
)
def test_tensor_from_ptr_aliases_device_memory_on_the_memorys_own_device(
    runtime, index: int
) -> None:  # type: ignore[no-untyped-def]
    """tensor_from_ptr(ptr, ..., a device without index) views the same memory, on the
    device that owns it."""
    base = torch.arange(64, dtype=torch.float32).to(device_at(runtime, index))
    ops = resolve_device_ops(DEVICE)
    view = ops.tensor_from_ptr(
        base.data_ptr() + 16 * 4, (4, 8), torch.float32, torch.device(DEVICE)
    )
    assert view.device == base.device and view.data_ptr() == base.data_ptr() + 64
    assert same_bytes(view, base.cpu()[16:48].reshape(4, 8))
    view.fill_(-1)
    assert bool((base.cpu()[16:48] == -1).all()) and float(base.cpu()[15]) == 15.0


@pytest.mark.parametrize("alignment", [0, 3, -4096])
def test_a_host_buffer_alignment_that_is_not_a_power_of_two_is_refused(
    alignment: int,
) -> None:
    """Pointer mode splits copies at ``host_buffer_alignments``: a value it cannot split
    at is a ValueError naming the argument, as in LMCache's own ops."""
    # First Party
    from {{ cookiecutter.__package }}._lmcache_compat import (
        TransferDirection,
    )

    host, dev = torch.ones(64, dtype=torch.uint8), torch.zeros(64).to(DEVICE)
    with pytest.raises(ValueError, match="host_buffer_alignments"):
        resolve_device_ops(DEVICE).lmcache_memcpy_async(
            dev.data_ptr(), host.data_ptr(), 64, TransferDirection.H2D, 0, alignment
        )


def test_tensor_from_ptr_refuses_a_null_pointer() -> None:
    """Pointer 0 is a ValueError naming the call, not a tensor over address 0."""
    with pytest.raises(ValueError, match="non-zero"):
        resolve_device_ops(DEVICE).tensor_from_ptr(
            0, (4,), torch.uint8, torch.device(DEVICE)
        )


def test_tensor_from_ptr_reports_a_view_it_cannot_build_as_runtime_error() -> None:
    """A shape the memory cannot hold fails as RuntimeError naming the address, not deep
    inside torch."""
    base = torch.zeros(64, dtype=torch.uint8).to(DEVICE)
    with pytest.raises(RuntimeError, match="cannot view"):
        resolve_device_ops(DEVICE).tensor_from_ptr(
            base.data_ptr(), (-1, 4), torch.uint8, torch.device(DEVICE)
        )


def test_cpu_kv_caches_in_the_same_process_keep_lmcaches_own_ops() -> None:
    """With the plugin loaded, CPU tensors still resolve to LMCache's ops, this device's
    tensors to the plugin's."""
    package = "{{ cookiecutter.__package }}."
    cpu_ops = resolve_device_ops("cpu")
    assert not type(cpu_ops).__module__.startswith(package), type(cpu_ops)
    assert type(resolve_device_ops(DEVICE)).__module__.startswith(package)
