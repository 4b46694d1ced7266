# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Helpers for the conformance tests: new processes, KV geometry, fake plugins.

Nothing here fakes LMCache: the processes started here (through the kit's
launcher, ``lmcache_device_kit.harness.spawn``) import the installed ``lmcache``
and this installed plugin themselves. The real ``lmcache server``s, worker ranks
and the scheduler of the end-to-end tests come from the kit's harness too
(``servers``, ``engine``).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple
import subprocess
import sys
import textwrap
import time

# Third Party
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.spawn import child_env
from lmcache_device_kit.harness.worker_kv import planes_of
import torch

HERE = Path(__file__).resolve().parent


def run_python(
    code: str,
    env: Mapping[str, str | None] = (),
    timeout: float = 120,
    *,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new process (LMCache caches its registry per process), forked
    from the suite's zygote unless ``fresh`` (tests of what a new interpreter imports;
    see the kit's ``harness/spawn.py``)."""
    # Outside the source tree's src/ on sys.path.
    return spawn.run(
        [sys.executable, "-c", code],
        env=child_env(env),
        timeout=timeout,
        cwd=HERE.parent.parent,
        fresh=fresh,
    )


def gather_to_cpu(kv: dict[str, Any], *args: Any, **kwargs: Any) -> list[torch.Tensor]:
    """LMCache's ``gather_paged_kv_to_cpu``, then a synchronization of the KV caches'
    device: its copies into the CPU chunks may still run when it returns (its docstring
    leaves synchronizing to the caller)."""
    # First Party
    from lmcache.v1.multiprocess.transfer_context.base import gather_paged_kv_to_cpu

    chunks = gather_paged_kv_to_cpu(kv, *args, **kwargs)
    device = planes_of(next(iter(kv.values())))[0].device
    if device.type != "cpu":
        getattr(torch, device.type).synchronize(device)
    return chunks


#: Seconds after which work queued on any stream but a held one has run (the emulator's
#: latency is 200 µs).
SETTLE = 0.1


class Hold:
    """What ``held()`` gives its block: how long the block's calls took, and a wait for
    other streams' work."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def settle(self) -> float:
        """Seconds since the block began (its calls' duration), then wait ``SETTLE``:
        anything the calls
        queued on another stream, or ran on the host, has happened by the time this
        returns."""
        took = time.monotonic() - self.started
        time.sleep(SETTLE)
        return took


@contextmanager
def held(stream: Any, timeout: float = 5) -> Iterator[Hold]:
    """``stream`` held until the block ends (the emulator's ``hold_stream``): work
    queued on it meanwhile has not run, deterministically. Fails the test if the hold
    expires first (after ``timeout``: the block waited for the stream it holds). Skips
    the test on a runtime without that test facility (a device)."""
    # Third Party
    import pytest

    hold_stream = getattr(getattr(torch, stream.device.type), "hold_stream", None)
    if hold_stream is None:
        pytest.skip(f"torch.{stream.device.type} has no hold_stream (the emulator's)")
    hold = hold_stream(stream, timeout)
    expired = False
    try:
        yield Hold()
    finally:
        expired = hold.release()
    # Not in `finally`: an error raised in the block is the one to report.
    assert not expired, (
        f"the hold on {stream} expired after {timeout:g}s, before its block ended: a "
        "call in the block waited for the held stream (a blocking copy or a "
        "synchronize?), so the stream ran its queue and the test's ordering is not "
        "what it claims. Queue that call before the hold, or make it non-blocking."
    )


class Published(NamedTuple):
    """What ``publish_behind_a_hold`` saw."""

    early: list  # drained as soon as the publishing call returned
    late: list  # drained once the stream had run
    waited: bool  # the call returned only after the held work had run

    @property
    def too_soon(self) -> bool:
        """Published while the work queued before the publish had not run."""
        return bool(self.early) and not self.waited


def publish_behind_a_hold(
    stream: Any,
    publish: Callable[[], object],
    drain: Callable[[], list],
    seconds: float = 1.0,
) -> Published:
    """Call ``publish()`` while ``stream`` is held for ``seconds``, and say when what
    it published appeared. Either way of publishing after a stream's work passes: a
    host function (returns at once, publishes later; one that takes the GIL is
    reported as a deadlock here) or a synchronization (returns once the hold has
    expired)."""
    runtime = getattr(torch, stream.device.type)
    drain()  # what earlier tests left
    hold = runtime.hold_stream(stream, seconds)
    try:
        publish()
        early = drain()
    finally:
        waited = hold.release()
    # The runtime module's own wait, which keeps the GIL behind a host function (as a
    # vendor binding may; torch's Stream.synchronize releases it).
    runtime.synchronize(stream.device)
    return Published(early, drain(), waited)


def publishes_from_host_functions(ops: Any, device: str) -> bool:
    """Whether ``ops`` publish completions from host functions (native recorders on a
    runtime that launches them) rather than by synchronizing the stream first."""
    recorder = getattr(ops.record_completion_on_stream, "__module__", None) or ""
    runtime = getattr(torch, device)
    return recorder.endswith(".native_ops") and hasattr(runtime, "host_func_launcher")


def context_transfer(
    context: Any,
    addresses: list[int],
    ids: Any,
    direction: Any,
    chunk_tokens: int,
    copy: Callable[..., object] | None = None,
) -> None:
    """One pointer-mode transfer between ``context``'s first group of KV caches and the
    chunks at ``addresses``, as an LMCache-driven server issues it (``copy``: the op to
    call, by default the device's ops as LMCache resolves them)."""
    if copy is None:
        # First Party
        from lmcache.v1.platform import resolve_device_ops

        copy = resolve_device_ops(context.device.type).multi_layer_block_kv_transfer
    copy(
        context.get_kernel_group_kv_pointers(0),
        addresses,
        ids,
        context.device,
        direction,
        context.get_shape_desc(0),
        chunk_tokens,
        context.get_engine_kv_format(0),
        0,
    )


#: Paged KV geometry shared by the op-level tests: block size, blocks, heads, head size,
#: layers.
BS, NB, NH, HS, LAYERS = 16, 12, 2, 32, 3
#: Flat block ids of three two-block chunks, out of order.
BLOCK_IDS = [5, 1, 3, 7, 10, 0]
#: Per-layer KV shapes for the formats LMCache detects, with the hints vLLM passes.
KV_LAYOUTS: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {
    "flash_nhd": ((2, NB, BS, NH, HS), {"kv_layout": "NHD"}),
    "flash_hnd": ((2, NB, NH, BS, HS), {"kv_layout": "HND"}),
    "flashinfer_nhd": ((NB, 2, BS, NH, HS), {"kv_layout": "NHD"}),
    "mla": ((NB, BS, HS), {"kv_layout": "NHD"}),
}
#: Strided caches every supported LMCache takes (``worker_kv.MEMORY``), by case: the
#: format (KV_LAYOUTS), the memory and the block dim. LMCache gives the ops flash
#: attention stored blocks first as flashinfer's layout, padded MLA with its
#: ``block_stride_elems``. Padding in other formats: on the tensor path 0.5.4-0.5.6
#: hand it to the ops and 0.5.7 refuses it; a cache context refuses it on every
#: release (``resolve_block_stride_and_log_layout``).
STRIDED: dict[str, tuple[str, str, int]] = {
    "mla-padded": ("mla", "padded", 0),
    "flash_nhd-blocks_first": ("flash_nhd", "blocks_first", 1),
}


def seeded_kv(
    shape: tuple[int, ...],
    seed: int,
    dtype: torch.dtype = torch.float16,
    layers: int = LAYERS,
    device: str = "cpu",
) -> dict[str, torch.Tensor]:
    """Per-layer KV tensors of random values, a pure function of the arguments."""
    generator = torch.Generator().manual_seed(seed)
    return {
        f"layer.{i}": torch.randn(shape, generator=generator).to(dtype).to(device)
        for i in range(layers)
    }


def same_bytes(a: Any, b: Any) -> bool:
    """Two tensors (any devices) have equal shapes and identical bytes."""
    as_bytes = [t.cpu().contiguous().view(torch.uint8) for t in (a, b)]
    return bool(a.shape == b.shape and torch.equal(*as_bytes))


def fake_plugin(
    root: Path, dist: str, entry_point: str, module: str, source: str
) -> Path:
    """Install a one-module distribution with one ``{{ cookiecutter._entry_point_group }}`` entry point
    into ``root`` (put ``root`` on ``PYTHONPATH``), as LMCache's own registry tests fake
    plugins."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text(f"[{{ cookiecutter._entry_point_group }}]\n{entry_point}\n")
    return root


#: A fake spec claiming this device type; ``__BACKEND__`` is replaced by its backend
#: name.
RIVAL_SPEC = """
    from lmcache.v1.platform.base.device_spec import DeviceSpec

    class RivalSpec(DeviceSpec):
        device_type = "{{ cookiecutter.device_name }}"
        backend_name = "__BACKEND__"
        torch_module_name = "{{ cookiecutter.__torch_module_name }}"
        ops_cls = None

        def is_available(self):  # wherever this plugin's device is
            from {{ cookiecutter.__spec_module }} import (
                {{ cookiecutter.class_prefix }}DeviceSpec,
            )

            return {{ cookiecutter.class_prefix }}DeviceSpec().is_available()
"""


def baseline_loaded_cuda_runtime() -> bool:
    """Whether LMCache's pointer-mode ``lmcache_memcpy_async`` baseline has loaded
    libcudart.

    The baseline loads the CUDA (or HIP) runtime on first pointer-mode use,
    which cannot address non-CUDA device memory; the conformance tests assert
    that this plugin's overrides never get there. Where the baseline keeps its
    copy library differs by release: ``_lmcache_compat`` knows.
    """
    # First Party
    from {{ cookiecutter.__package }}._lmcache_compat import (
        baseline_copy_module,
    )

    return (
        baseline_copy_module._copy_lib is not baseline_copy_module._copy_lib_NOT_LOADED
    )
