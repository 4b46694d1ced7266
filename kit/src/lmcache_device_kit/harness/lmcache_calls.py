# SPDX-License-Identifier: Apache-2.0
"""How the harness calls LMCache's vLLM adapters on every supported release.

Why a module of its own: LMCache's vLLM multiprocess adapter moves between
releases under the harness, not under the plugin: lmcache 0.5.7 takes token ids
packed (``lmcache.v1.multiprocess.token_codec``) where 0.5.6 took lists; 0.5.5
added layout hints and the recorded event. The harness: a suite's worker ranks
and scheduler, and ``doctor --server``. Each difference is chosen here by feature
detection, never by version number; ``surface.py`` declares what the harness
takes from LMCache (``lazy`` resolves those names) and the last release each shim
serves. Needs no backend: a device type is passed where one matters.

Imports LMCache only inside its functions: LMCache never imports this module, and
importing it imports nothing beyond the standard library and ``surface``.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from typing import Any
import functools
import inspect

# First Party
from lmcache_device_kit.harness.surface import HARNESS_NAMES

#: Where a name that moved is declared, for the error that says so.
SURFACE = "lmcache_device_kit/harness/surface.py"


@functools.cache
def lazy(name: str) -> Any:
    """The LMCache value ``HARNESS_NAMES[name]`` declares: at the first of its
    locations that exists in the installed release (``None``: the module)."""
    # First Party
    # (here, not at the top: ``compat`` imports lmcache, as resolving a name does)
    from lmcache_device_kit.compat.resolve import resolve

    return resolve(HARNESS_NAMES[name], f"HARNESS_NAMES[{name!r}] in {SURFACE}")


@functools.cache
def packs_tokens() -> bool:
    """lmcache 0.5.7+: requests carry token ids packed (``LoadStoreOp.token_bytes``)."""
    return "token_bytes" in inspect.signature(lazy("LoadStoreOp")).parameters


def packed_tokens(token_ids: Sequence[int]) -> Any:
    """Token ids as the installed adapter takes them in lookups and lock releases:
    packed bytes from 0.5.7 on (``pack_token_ids``), a list before."""
    if packs_tokens():
        return lazy("pack_token_ids")(list(token_ids))
    return list(token_ids)


def load_store_op(
    token_ids: Sequence[int], block_ids: list[list[int]], start: int, end: int
) -> Any:
    """LMCache's ``LoadStoreOp`` for one store or retrieve of ``token_ids[start:end]``
    into ``block_ids`` (one list per engine group)."""
    field = "token_bytes" if packs_tokens() else "token_ids"
    tokens = {field: packed_tokens(token_ids)}
    return lazy("LoadStoreOp")(**tokens, block_ids=block_ids, start=start, end=end)


#: An engine-driven worker's sub-path, by LMCache's transport class: the server's
#: SHM pool, or KV bytes in the messages (pickled up to 0.5.6, inline from 0.5.7).
SUB_PATHS = {
    "EngineDrivenContextShm": "SHM",
    "EngineDrivenContextInline": "inline",
    "EngineDrivenContextPickle": "pickle",
}


@functools.cache
def transports() -> tuple[tuple[type, str], ...]:
    """The engine-driven transport classes the installed release has, each with its
    sub-path; resolved once (``lazy`` caches a name it found, not one it did not)."""
    found = []
    for name, sub_path in SUB_PATHS.items():
        try:
            found.append((lazy(name), sub_path))
        except ImportError:  # another release's transport
            continue
    return tuple(found)


def engine_sub_path(transfer_ctx: Any) -> str:
    """``SHM``, ``inline`` or ``pickle``: how an engine-driven worker's KV bytes
    travel (its ``transfer_ctx``, after registration); a class name otherwise."""
    try:
        context = transfer_ctx.engine_driven_context
    except (AttributeError, RuntimeError):  # LMCache-driven, or not registered
        return type(transfer_ctx).__name__
    for transport, sub_path in transports():
        if isinstance(context, transport):
            return sub_path
    return type(context).__name__


def engine_step(adapter: Any, finished: set[str]) -> tuple[set[str], set[str]]:
    """One engine step's poll, as vLLM's connector makes it after every forward pass
    (``get_finished``): the requests the engine finished go in, the stores and
    retrieves LMCache finished come out. Until a step polls, the adapter keeps every
    request's futures and events."""
    stores, retrieves = adapter.get_finished(set(finished))
    return set(stores or ()), set(retrieves or ())


def kv_events_off() -> list[str]:
    """Server flags that turn off LMCache's KV-event replay buffers, where it has them
    (0.5.6+): they retain each stored chunk's token ids, up to 32,768 records and
    65,536 chunk bindings, subscribed to or not. Bounded, but only after tens of
    thousands of requests: a soak measuring leaks would measure them filling."""
    try:
        lazy("KVEventModule")
    except ImportError:
        return []
    return ["--kv-event-log-size", "0"]


def wraps_plane_sequences() -> bool:
    """lmcache 0.5.6+: a worker may register a layer as a sequence of planes (per-layer
    ``(K, V)`` tuples) and LMCache hands it to the device's wrapper; before, LMCache
    reads ``tensor.device`` and fails on a tuple before any plugin code runs."""
    try:
        lazy("wraps_plane_sequences")
    except ImportError:
        return False
    return True


def register_kv_caches(
    adapter: Any, kv_caches: dict[str, Any], engine_group_infos: Sequence[Any] = ()
) -> None:
    """Register a worker's (NHD) KV caches with LMCache's ``LMCacheMPWorkerAdapter``.

    ``engine_group_infos``: LMCache's ``EngineGroupInfo`` per engine group of a
    hybrid model (none: one group). lmcache 0.5.5+ take layout hints; 0.5.4 has
    no such argument and assumes NHD.
    """
    if "layout_hints" in inspect.signature(adapter.register_kv_caches).parameters:
        adapter.register_kv_caches(
            kv_caches, engine_group_infos, layout_hints={"kv_layout": "NHD"}
        )
    else:
        adapter.register_kv_caches(kv_caches, engine_group_infos)


def recorded_event(adapter: Any, device_type: str) -> Any:
    """The ordering event a vLLM worker hands to a store or retrieve request.

    lmcache 0.5.5+ create it (``create_recorded_event``); with 0.5.4 the vLLM
    connector records an interprocess event on the device's current stream.
    """
    if hasattr(adapter, "create_recorded_event"):
        return adapter.create_recorded_event()
    # Third Party
    import torch

    event = getattr(torch, device_type).Event(interprocess=True)
    event.record()
    return event
