# SPDX-License-Identifier: Apache-2.0
"""What the suite reads from a plugin's native ops module, and nothing else.

A plugin's kernels are its own: the sample's handle some KV formats, a vendor's
others. So the native tests never ask which kernels exist or how they are launched;
they read the two names the module declares besides its ops:

* ``NATIVE_KV_FORMATS``: the LMCache ``EngineKVFormat`` names (``.name``) its
  kernels transfer. A transfer of one of these must take the native path; of any
  other, LMCache's torch baseline (the ``fallback`` path).
* ``paths_taken``: a counter of the paths each op took in this process, by
  ``"<op>:<path>"`` (``native``, ``fallback``; ``synchronized`` for a recorder
  without host functions).

Which format a test's KV caches are is LMCache's answer (its detection, or the cache
context's format), never a table here: the suite's geometries are vLLM's flash
attention NHD (``NL_X_TWO_NB_BS_NH_HS``) and HND (``NL_X_TWO_NB_NH_BS_HS``),
flashinfer NHD (``NL_X_NB_TWO_BS_NH_HS``), MLA (``NL_X_NB_BS_HS``) and per-layer
(K, V) planes (``NL_X_TWO_X_NB_BS_NH_HS``).

Imports pytest; lmcache and the plugin only inside the functions.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Mapping
from typing import Any
import inspect

# Third Party
import pytest

# First Party
from lmcache_device_kit.doctor.calls import applies, binds

#: The dimension words LMCache spells its EngineKVFormat names with (0.5.4 to 0.5.7rc2).
FORMAT_TOKENS = frozenset("NL X TWO ONE NB BS NH HS CS NP NBBS BSV BSS".split())
#: The op whose path depends on the KV format, and its paths.
TRANSFER = "multi_layer_block_kv_transfer"
PATHS = ("native", "fallback")


def _declared(native: Any, name: str, what: str) -> Any:
    value = getattr(native, name, None)
    if value is None:
        pytest.fail(
            f"{native.__name__} declares no {name}: the conformance suite reads it "
            f"({what}). Define it in your native ops module (a public non-callable, "
            "so bind_native leaves it off the ops)."
        )
    return value


def native_kv_formats(native: Any) -> frozenset[str]:
    """The ``EngineKVFormat`` names the plugin's kernels transfer, as it declares
    them; a name LMCache does not have fails the test, with the names it has."""
    # First Party
    from lmcache.lmcache_native import EngineKVFormat

    declared = _declared(
        native,
        "NATIVE_KV_FORMATS",
        "the LMCache EngineKVFormat names your kernels transfer, e.g. "
        'frozenset({"NL_X_TWO_NB_BS_NH_HS"})',
    )
    if isinstance(declared, str) or not all(isinstance(n, str) for n in declared):
        pytest.fail(
            f"{native.__name__}.NATIVE_KV_FORMATS is {declared!r}: declare a "
            "frozenset of EngineKVFormat names (strings)"
        )
    known = set(EngineKVFormat.__members__)
    # A format a newer LMCache added (0.5.4 has no NL_X_TWO_X_NB_BS_NH_HS) never reaches
    # the kernels on this one; a name not spelt from LMCache's dimensions is a mistake.
    misspelt = sorted(
        name
        for name in set(declared) - known
        if not set(name.split("_")) <= FORMAT_TOKENS
    )
    if misspelt:
        pytest.fail(
            f"{native.__name__}.NATIVE_KV_FORMATS names {misspelt}, which no "
            f"EngineKVFormat can be: this lmcache has {sorted(known)}"
        )
    return frozenset(declared) & known


def paths_taken(native: Any) -> Mapping[str, int]:
    """The plugin's counter of the paths its ops took (``"<op>:<path>"``)."""
    counter = _declared(
        native,
        "paths_taken",
        'a collections.Counter every op adds "<op>:native" or "<op>:fallback" to',
    )
    if not isinstance(counter, Mapping):
        pytest.fail(f"{native.__name__}.paths_taken must be a collections.Counter")
    return counter


def transfer_path(native: Any, kv_format: str) -> str:
    """``native`` when the plugin declares ``kv_format`` native, else ``fallback``."""
    return "native" if kv_format in native_kv_formats(native) else "fallback"


def transfers(native: Any) -> dict[str, int]:
    """The transfer op's count per path so far (a snapshot)."""
    counts = paths_taken(native)
    return {path: counts.get(f"{TRANSFER}:{path}", 0) for path in PATHS}


def detected_format(kv: Mapping[str, Any], hints: Mapping[str, str]) -> str:
    """The ``EngineKVFormat`` name LMCache detects for vLLM KV caches ``kv`` (one
    tensor per layer) under ``hints``: what LMCache's transfers hand the ops."""
    # First Party
    from lmcache.utils import EngineType
    from lmcache.v1.gpu_connector.kv_format.detection import detect_format

    kv_format, _ = detect_format(list(kv.values()), EngineType.VLLM, dict(hints))
    return str(kv_format.name)


def native_symbol_problems(
    native: Any, baseline: Any, installed: tuple[int, ...]
) -> list[str]:
    """Why what ``native`` would bind on LMCache's ops is wrong (none: nothing).

    bind_native binds every public callable and type of the module: each must be a
    function of LMCache's torch baseline (``baseline``: ``torch_ops``) with its
    parameters in order, or a native-only name LMCache itself looks up on the ops
    (``compat.declared.NATIVE_ONLY``), which LMCache's call on the ``installed``
    release binds to. A release that does not look one up yet never calls it: one
    native module serves the plugin's whole range. Anything else is a stray op.
    """
    # First Party
    # (here: the shims' package imports lmcache, which a test module must not do
    # before its conftest chose the backend)
    from lmcache_device_kit.compat.declared import NATIVE_ONLY

    problems = []
    for name in (n for n in dir(native) if not n.startswith("_")):
        symbol = getattr(native, name)
        if not (callable(symbol) or isinstance(symbol, type)):
            continue
        if name in NATIVE_ONLY:
            shapes = [s for s in NATIVE_ONLY[name] if applies(s[2], s[3], installed)]
            if shapes and (why := _unbound(symbol, shapes[0])) is not None:
                problems.append(f"{name}: LMCache's call {why}")
        elif isinstance(symbol, type):
            problems.append(
                f"type {name} is public: bind_native would put it on lmcache.device_ops"
            )
        elif not hasattr(baseline, name):
            problems.append(
                f"{name} is not a torch_ops function nor a native-only name LMCache "
                "calls (compat.declared.NATIVE_ONLY): bind_native would add a stray op"
            )
        else:
            ours = list(inspect.signature(symbol).parameters)
            theirs = list(inspect.signature(getattr(baseline, name)).parameters)
            if ours != theirs:
                problems.append(f"{name}{ours} differs from torch_ops.{name}{theirs}")
    return problems


def _unbound(symbol: Any, shape: tuple) -> str | None:
    """Why LMCache's call of ``shape`` (positional count, keywords) does not bind to
    ``symbol`` (None: it does, or a compiled signature cannot be read)."""
    try:
        signature = inspect.signature(symbol)
    except (TypeError, ValueError):
        return None
    problem = binds(signature, shape[0], shape[1])
    if problem is None:
        return None
    return f"({shape[0]} positional) does not bind to {signature}: {problem}"
