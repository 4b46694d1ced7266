# SPDX-License-Identifier: Apache-2.0
"""A worker rank's KV caches: layouts, seeded bytes, comparison, registration.

Why it exists: ``worker.py`` would pass 300 lines with them; these helpers
(what a rank stores, in which layout, how a retrieve is checked, and the LMCache
adapter its caches are registered with) live here, and a suite's tests import
them too (the prompt, the geometry, strided layers). At module level it imports
torch only, never lmcache or the plugin under test (``make_adapter`` imports
lmcache when called): a worker imports LMCache once its arguments are parsed, and
the test processes import this module at collection. Generic over the device:
the caller passes it.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import argparse
import math

# Third Party
import torch

# First Party
from lmcache_device_kit.harness import lmcache_calls

BLOCK_SIZE = 16
NUM_HEADS = 2
HEAD_SIZE = 32
#: MLA's latent vector per token (DeepSeek's: 512 compressed KV + 64 rotary).
MLA_HEAD_SIZE = 576
DTYPE = torch.float16
#: The KV-cache dtypes the harness and the conformance tests store, by name
#: (``worker.py --dtype``): vLLM's fp16 and bf16 caches, its fp8 ones
#: (``--kv-cache-dtype fp8_e4m3`` / ``fp8_e5m2``) and int8 / uint8 (quantized caches;
#: some of vLLM's backends keep fp8 in uint8 tensors).
KV_DTYPES = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "int8": torch.int8,
    "uint8": torch.uint8,
}
#: The one-byte ones: every bit pattern is a value the kernels must move as it is.
ONE_BYTE_KV_DTYPES = tuple(name for name, t in KV_DTYPES.items() if t.itemsize == 1)


def random_values(
    shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype
) -> torch.Tensor:
    """Seeded values of ``dtype``: normal ones for wider types, every bit pattern for
    one-byte types (fp8 NaNs too: every comparison here is of bytes)."""
    if dtype.itemsize == 1:
        byte = torch.uint8
        return torch.randint(0, 256, shape, generator=generator, dtype=byte).view(dtype)
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)


def add_kv_arguments(parser: argparse.ArgumentParser) -> None:
    """``worker.py``'s options for the KV caches a rank registers."""
    parser.add_argument("--heads", type=int, default=NUM_HEADS)
    parser.add_argument(
        "--head-size",
        type=int,
        help=f"default {HEAD_SIZE}; {MLA_HEAD_SIZE} with --layout mla",
    )
    parser.add_argument(
        "--layout", default="flash", choices=["flash", "mla", "kv_planes"]
    )
    parser.add_argument(
        "--memory",
        default="tight",
        choices=MEMORY,
        help="how a layer's memory is laid out (MEMORY); one tensor only",
    )
    parser.add_argument("--dtype", default="fp16", choices=list(KV_DTYPES))


def check_kv_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> None:
    """Refuse what ``add_kv_arguments``' options cannot combine; fill the defaults."""
    if args.layout == "kv_planes" and args.memory != "tight":
        parser.error("--layout kv_planes registers tight planes only")
    if args.memory != "tight" and KV_DTYPES[args.dtype] not in (DTYPE, torch.bfloat16):
        parser.error("--memory other than tight pads with -1: --dtype fp16 or bf16")
    args.head_size = args.head_size or (
        MLA_HEAD_SIZE if args.layout == "mla" else HEAD_SIZE
    )


def token_ids(tokens: int, first: int = 7) -> list[int]:
    """The prompt every rank stores and retrieves (the scheduler looks up the same)."""
    return list(range(first, first + tokens))


def kv_shape(
    layers: int,
    blocks: int,
    heads: int = NUM_HEADS,
    head_size: int = HEAD_SIZE,
    layout: str = "flash",
) -> dict[str, tuple[int, ...]]:
    """vLLM's layouts: flash attention (2, blocks, block_size, heads, head_size) per
    layer (``kv_planes`` too: registered as its two planes, ``on_device``), or MLA's
    one latent vector per token (blocks, block_size, head_size)."""
    shape = (
        (blocks, BLOCK_SIZE, head_size)
        if layout == "mla"
        else (2, blocks, BLOCK_SIZE, heads, head_size)
    )
    return {f"layer.{i}": shape for i in range(layers)}


def block_of(layer: torch.Tensor, block: int, layout: str) -> torch.Tensor:
    """One paged block of one layer, a view (the block dimension is MLA's first, flash
    attention's second)."""
    return layer[block] if layout == "mla" else layer[:, block]


#: How a layer's memory may be laid out (``--memory``): as its shape says; blocks
#: outermost (flash attention's [2, NB, ...] stored as [NB, 2, ...]); or blocks
#: outermost, each followed by PADDING elements (a runtime's alignment, a pool shared
#: with larger groups), and PADDING before the first (a view at a storage offset).
#: LMCache takes padding only in its block-axis formats (MLA's here, not flashinfer's
#: [NB, 2, ...]): others it refuses before any op (resolve_block_stride_and_log_layout).
MEMORY = ("tight", "blocks_first", "padded")
PADDING = 8
#: What the memory outside the view holds: a copy that writes the padding shows.
PAD_VALUE = -1


def strided(
    layer: torch.Tensor, device: torch.device | str, memory: str, block_dim: int
) -> torch.Tensor:
    """``layer`` copied to ``device`` in ``memory``'s layout (see MEMORY): a view of
    ``layer``'s shape over an allocation holding PAD_VALUE wherever the view does not
    reach."""
    order = (block_dim, *(d for d in range(layer.dim()) if d != block_dim))
    outer = [layer.shape[d] for d in order]
    steps = [math.prod(outer[i + 1 :]) for i in range(len(outer))]
    offset = PADDING if memory == "padded" else 0
    steps[0] += offset
    strides = [0] * layer.dim()
    for position, dim in enumerate(order):
        strides[dim] = steps[position]
    size = offset + steps[0] * outer[0]
    allocation = torch.full((size,), PAD_VALUE, dtype=layer.dtype).to(device)
    view = allocation.as_strided(layer.shape, strides, offset)
    view.copy_(layer)
    return view


def outside_view(view: torch.Tensor) -> torch.Tensor:
    """The elements of ``view``'s allocation that ``view`` does not reach, on the CPU
    (its padding; none for a tight layer)."""
    count = view.untyped_storage().nbytes() // view.element_size()
    whole = torch.empty(0, dtype=view.dtype, device=view.device)
    whole = whole.set_(view.untyped_storage(), 0, (count,), (1,)).cpu()
    outside = torch.ones(count, dtype=torch.bool)
    outside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(False)
    return whole[outside]


def on_device(
    layer: torch.Tensor, device: torch.device, layout: str, memory: str = "tight"
) -> Any:
    """A layer as the engine registers it: one tensor (in ``memory``'s layout), or with
    ``kv_planes`` its (K, V) planes, each an allocation of its own (vLLM's Ascend plugin
    registers tuples)."""
    if layout == "kv_planes":
        return tuple(plane.to(device) for plane in layer)
    if memory == "tight":
        return layer.to(device)
    return strided(layer, device, memory, block_dim=0 if layout == "mla" else 1)


def padding_intact(layer: Any) -> bool:
    """Whether every element outside a registered layer's planes still holds
    PAD_VALUE."""
    return all(
        bool((outside_view(plane) == PAD_VALUE).all()) for plane in planes_of(layer)
    )


def planes_of(layer: Any) -> tuple[torch.Tensor, ...]:
    return layer if isinstance(layer, tuple) else (layer,)


def write_layer(layer: Any, values: torch.Tensor) -> None:
    """Copy ``values`` (a layer as ``source_kv`` makes it) into a registered layer."""
    parts = tuple(values) if isinstance(layer, tuple) else (values,)
    for plane, part in zip(planes_of(layer), parts, strict=True):
        plane.copy_(part)


def on_host(layer: Any) -> torch.Tensor:
    """A registered layer's bytes on the CPU, in ``source_kv``'s form."""
    planes = [plane.cpu() for plane in planes_of(layer)]
    return torch.stack(planes) if isinstance(layer, tuple) else planes[0]


def engine_groups(layers: int, windows: list[int]) -> list[list[int]]:
    """Layer indices per engine group: layer ``i`` is in group ``i % len(windows)``
    (hybrid models interleave)."""
    return [list(range(group, layers, len(windows))) for group in range(len(windows))]


def compare(
    target: torch.Tensor,
    stored: torch.Tensor,
    target_blocks: list[int],
    source_blocks: list[int],
    layout: str,
) -> tuple[list[int], bool]:
    """Positions ``i`` where ``target`` block ``target_blocks[i]`` holds ``stored``
    block ``source_blocks[i]`` byte for byte, and whether any other byte of ``target``
    (zeroed before the retrieve) is not zero."""
    target, stored = on_host(target).view(torch.uint8), stored.view(torch.uint8)
    restored = [
        i
        for i, (got, want) in enumerate(zip(target_blocks, source_blocks, strict=True))
        if torch.equal(block_of(target, got, layout), block_of(stored, want, layout))
    ]
    for i in restored:
        block_of(target, target_blocks[i], layout).zero_()
    return restored, bool(target.any())


def source_kv(
    layers: int,
    blocks: int,
    seed: int,
    heads: int = NUM_HEADS,
    head_size: int = HEAD_SIZE,
    layout: str = "flash",
    dtype: torch.dtype = DTYPE,
) -> dict[str, torch.Tensor]:
    """The bytes a rank stores: a pure function of (shape, seed, dtype), on the CPU."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: random_values(shape, generator, dtype)
        for name, shape in kv_shape(layers, blocks, heads, head_size, layout).items()
    }


def make_adapter(args: argparse.Namespace, kv: dict[str, torch.Tensor]) -> Any:
    """A registered ``LMCacheMPWorkerAdapter`` for this rank, engine-driven, short
    timeouts."""
    # Third Party
    import zmq

    strategy = lmcache_calls.lazy("ParallelStrategy")(
        mla_only=args.layout == "mla",
        vllm_world_size=args.world_size,
        vllm_worker_id=args.rank,
        tp_size=args.world_size,
        pp_size=1,
        n_servers=1,
    )
    adapter = lmcache_calls.lazy("LMCacheMPWorkerAdapter")(
        args.url,
        zmq.Context.instance(),
        args.model,
        BLOCK_SIZE,
        strategy,
        extra_config={
            "lmcache.mp.mq_timeout": args.mq_timeout,
            "lmcache.mp.mp_transfer_mode": args.mode,
            "lmcache.mp.heartbeat_interval": 1.0,
        },
    )
    infos = []
    # a hybrid model: one engine group (block-id space) per window
    if len(args.sw_windows) > 1:
        layers = engine_groups(args.layers, args.sw_windows)
        infos = [
            lmcache_calls.lazy("EngineGroupInfo")(
                group,
                tuple(layers[group]),
                tokens_per_block=BLOCK_SIZE,
                sw_size_tokens=window,
            )
            for group, window in enumerate(args.sw_windows)
        ]
    lmcache_calls.register_kv_caches(adapter, kv, infos)
    return adapter
