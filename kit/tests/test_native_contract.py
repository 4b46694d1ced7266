# SPDX-License-Identifier: Apache-2.0
"""What the native tests read from a plugin: its declarations, checked, and LMCache's
answer to which format a geometry is."""

# Future
from __future__ import annotations

# Standard
from collections import Counter
import types

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.native_contract import (
    detected_format,
    native_kv_formats,
    native_symbol_problems,
    paths_taken,
    transfer_path,
    transfers,
)
from lmcache_device_kit.conformance.support import KV_LAYOUTS, seeded_kv


def native_module(**names: object) -> types.ModuleType:
    module = types.ModuleType("lmcache_bar.native_ops")
    module.__dict__.update(names)
    return module


def test_a_native_module_without_its_declarations_fails_naming_what_to_define() -> None:
    bare = native_module()
    with pytest.raises(pytest.fail.Exception, match="declares no NATIVE_KV_FORMATS"):
        native_kv_formats(bare)
    with pytest.raises(pytest.fail.Exception, match="declares no paths_taken"):
        paths_taken(bare)


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            frozenset({"NL_X_TWO_NB_BS_NH_HS", "NHD"}),
            r"names \['NHD'\], which no EngineKVFormat can be",
        ),
        ("NL_X_TWO_NB_BS_NH_HS", "declare a frozenset"),
    ],
    ids=["unknown-name", "a-string"],
)
def test_a_declaration_lmcache_cannot_read_fails_with_what_to_declare(
    declared: object, message: str
) -> None:
    with pytest.raises(pytest.fail.Exception, match=message):
        native_kv_formats(native_module(NATIVE_KV_FORMATS=declared))


def test_a_format_only_a_newer_lmcache_has_is_ignored_on_this_one() -> None:
    """The sample declares per-layer plane tuples, which lmcache 0.5.4 has no format
    for (a clean-clone CI run on 0.5.4 failed on it): well spelt, it is left out."""
    later = "NL_X_TWO_NB_BS_NH_ONE_NP_HS"  # spelt from LMCache's words, in no release
    module = native_module(NATIVE_KV_FORMATS=frozenset({"NL_X_NB_BS_HS", later}))
    assert native_kv_formats(module) == frozenset({"NL_X_NB_BS_HS"})


def test_the_expected_path_is_the_declared_one_and_the_counts_the_plugins() -> None:
    counts = Counter({"multi_layer_block_kv_transfer:native": 3})
    module = native_module(
        NATIVE_KV_FORMATS=frozenset({"NL_X_NB_BS_HS"}), paths_taken=counts
    )
    assert transfer_path(module, "NL_X_NB_BS_HS") == "native"
    assert transfer_path(module, "NL_X_TWO_NB_NH_BS_HS") == "fallback"
    assert transfers(module) == {"native": 3, "fallback": 0}


def test_lmcache_detects_the_suites_geometries_as_the_formats_the_docs_name() -> None:
    """The names a plugin declares are LMCache's for the suite's KV caches (its vLLM
    detector), as ``native_contract``'s docstring lists them."""
    detected = {
        layout: detected_format(seeded_kv(shape, seed=1), hints)
        for layout, (shape, hints) in KV_LAYOUTS.items()
    }
    assert detected == {
        "flash_nhd": "NL_X_TWO_NB_BS_NH_HS",
        "flash_hnd": "NL_X_TWO_NB_NH_BS_HS",
        "flashinfer_nhd": "NL_X_NB_TWO_BS_NH_HS",
        "mla": "NL_X_NB_BS_HS",
    }


def test_native_only_names_lmcache_calls_are_bindable_as_it_calls_them() -> None:
    """bind_native binds every public callable and type: baseline ops with their
    parameters, or the names LMCache looks up on the ops (its direct copy path from
    0.5.6), shaped as the installed release calls them; anything else is a stray
    op."""

    def transfer(paged, host):  # type: ignore[no-untyped-def]
        return None

    class DirectCopyObject:
        def __init__(self, ptr, address, size, chunk, skip):  # type: ignore[no-untyped-def]
            pass

    baseline = types.SimpleNamespace(multi_layer_block_kv_transfer=transfer)
    native = types.SimpleNamespace(
        multi_layer_block_kv_transfer=transfer,
        batch_memcpy_supported=lambda: True,
        direct_copy_format_supported=lambda kv_format: True,
        execute_direct_copy_transfer=lambda direction, device, pin, specs, objs: None,
        DirectCopyObject=DirectCopyObject,
        NATIVE_KV_FORMATS=frozenset(),  # data: bind_native leaves it
    )
    assert native_symbol_problems(native, baseline, (0, 5, 6)) == []
    # a release that does not look them up yet never calls them: one module, any release
    native.direct_copy_format_supported = lambda kv_format, extra: True
    assert native_symbol_problems(native, baseline, (0, 5, 5)) == []
    native.frobnicate = lambda: None
    native.Helper = type("Helper", (), {})
    found = native_symbol_problems(native, baseline, (0, 5, 6))
    assert [p.split(" ")[0] for p in found] == [
        "type",
        "direct_copy_format_supported:",
        "frobnicate",
    ], found
    assert "does not bind" in found[1] and "stray op" in found[2]
