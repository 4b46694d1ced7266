# SPDX-License-Identifier: Apache-2.0
"""Helpers for the conformance tests: new processes, KV geometry, fake plugins.

Nothing here fakes LMCache: the processes started here (through the kit's
launcher, ``lmcache_device_kit.harness.spawn``) import the installed ``lmcache``
and the installed plugin themselves. The real ``lmcache server``s, worker ranks
and the scheduler of the end-to-end tests come from the kit's harness too
(``servers``, ``engine``); holding a stream is in ``streams.py``.

Imports torch: import it from tests only, after ``conftest.py`` set the environment.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
import importlib
import mmap
import subprocess
import sys
import tempfile
import textwrap

# Third Party
import torch

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.harness import spawn
from lmcache_device_kit.harness.spawn import child_env
from lmcache_device_kit.harness.worker_kv import planes_of, random_values

#: The entry-point group LMCache discovers plugins in.
ENTRY_POINT_GROUP = "lmcache.device_plugins"


def run_python(
    code: str,
    env: Mapping[str, str | None] | None = None,
    timeout: float = 120,
    *,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new process (LMCache caches its registry per process), forked
    from the suite's zygote unless ``fresh`` (tests of what a new interpreter imports;
    see the kit's ``harness/spawn.py``)."""
    # Outside any source tree: ``-c`` puts the working directory on sys.path, and a
    # project's src/ or LMCache's checkout there would shadow what is installed.
    return spawn.run(
        [sys.executable, "-c", code],
        env=child_env(env),
        timeout=timeout,
        cwd=tempfile.gettempdir(),
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
    """Per-layer KV tensors of random values (``worker_kv.random_values``), a pure
    function of the arguments."""
    generator = torch.Generator().manual_seed(seed)
    return {
        f"layer.{i}": random_values(shape, generator, dtype).to(device)
        for i in range(layers)
    }


def page_aligned(nbytes: int, fill: int = 0) -> torch.Tensor:
    """``nbytes`` of host memory starting on a page (uint8, ``fill``), as LMCache's L1
    and SHM pools lie: ranges in it that start on pages are pinned without sharing a
    page (a registration is whole pages, and one page is registered once)."""
    pages = -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
    memory = torch.frombuffer(mmap.mmap(-1, pages), dtype=torch.uint8)
    return memory[:nbytes].fill_(fill)


def same_bytes(a: Any, b: Any) -> bool:
    """Two tensors (any devices) have equal shapes and identical bytes."""
    as_bytes = [t.cpu().contiguous().view(torch.uint8) for t in (a, b)]
    return bool(a.shape == b.shape and torch.equal(*as_bytes))


def fake_plugin(
    root: Path, dist: str, entry_point: str, module: str, source: str
) -> Path:
    """Install a one-module distribution with one ``ENTRY_POINT_GROUP`` entry point
    into ``root`` (put ``root`` on ``PYTHONPATH``), as LMCache's own registry tests fake
    plugins."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry_point}\n")
    return root


#: A fake spec claiming the backend's device type, available wherever the backend's
#: own spec is: ``rival_spec()`` fills in the names.
RIVAL_SPEC = """
    import importlib

    from lmcache.v1.platform.base.device_spec import DeviceSpec

    class RivalSpec(DeviceSpec):
        device_type = "__DEVICE__"
        backend_name = "__BACKEND__"
        torch_module_name = "__TORCH_MODULE__"
        ops_cls = None

        def is_available(self):  # wherever this plugin's device is
            module = importlib.import_module("__SPEC_MODULE__")
            return getattr(module, "__SPEC_CLASS__")().is_available()
"""


def rival_spec(backend_name: str, spec_class: type) -> str:
    """``RIVAL_SPEC`` as a module's source: a spec named ``backend_name`` for the device
    of ``spec_class`` (the backend's own spec class)."""
    backend = kit_backend.current()
    return (
        RIVAL_SPEC.replace("__DEVICE__", backend.device_type)
        .replace("__BACKEND__", backend_name)
        .replace("__TORCH_MODULE__", backend.torch_module_name)
        .replace("__SPEC_MODULE__", spec_class.__module__)
        .replace("__SPEC_CLASS__", spec_class.__qualname__)
    )


def baseline_loaded_cuda_runtime() -> bool:
    """Whether LMCache's pointer-mode ``lmcache_memcpy_async`` baseline has loaded
    libcudart.

    The baseline loads the CUDA (or HIP) runtime on first pointer-mode use,
    which cannot address non-CUDA device memory; the conformance tests assert
    that this plugin's overrides never get there. Where the baseline keeps its
    copy library differs by release: ``_lmcache_compat`` knows.
    """
    compat = importlib.import_module(f"{kit_backend.current().package}._lmcache_compat")
    baseline_copy_module = compat.baseline_copy_module

    return (
        baseline_copy_module._copy_lib is not baseline_copy_module._copy_lib_NOT_LOADED
    )


def device_runtime() -> Any:
    """``torch.<device>``, the runtime the tests drive, once loaded (else None)."""
    return getattr(torch, kit_backend.current().torch_module_name, None)


def on_emulator() -> bool:
    """Whether the runtime is the CPU emulator."""
    return bool(getattr(device_runtime(), "is_emulator", False))


def open_mappings() -> int:
    """IPC mappings open in this process (the CPU emulator reports them; a device
    runtime does not)."""
    return int(device_runtime().ipc_mappings())
