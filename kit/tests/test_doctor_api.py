# SPDX-License-Identifier: Apache-2.0
"""``doctor --api``'s comparisons, which need no plugin: release numbers, and
signatures as LMCache calls them."""

# Future
from __future__ import annotations

# Third Party
import pytest

# First Party
from lmcache_device_kit.doctor.api import incompatible
from lmcache_device_kit.doctor.calls import applies, release


@pytest.mark.parametrize(
    ("version", "numbers"),
    [("0.5.6", (0, 5, 6)), ("0.5.7rc2", (0, 5, 7)), ("0.5.7.dev3+g1a2b", (0, 5, 7))],
)
def test_a_release_is_its_numeric_release_whatever_its_suffix(
    version: str, numbers: tuple[int, ...]
) -> None:
    assert release(version) == numbers


def test_an_entry_applies_between_its_first_and_last_release_inclusive() -> None:
    installed = release("0.5.6")
    assert applies(None, None, installed) and applies("0.5.6", "0.5.6", installed)
    assert not applies("0.5.7", None, installed)
    assert not applies(None, "0.5.5", installed)


def test_the_api_checker_compares_signatures_as_lmcache_calls_them() -> None:
    def base(self, dest, src, nbytes):  # type: ignore[no-untyped-def]
        ...

    def narrower(self, dest):  # type: ignore[no-untyped-def]
        ...

    def wider(self, dest, src, nbytes, extra=None):  # type: ignore[no-untyped-def]
        ...

    assert incompatible(base, wider) is None
    assert "does not bind" in str(incompatible(base, narrower))
    assert "property" in str(incompatible(property(base), narrower))
