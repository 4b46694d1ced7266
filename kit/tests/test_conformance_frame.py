# SPDX-License-Identifier: Apache-2.0
"""The conformance frame: capability flags, the reasons a class is skipped, the gate."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Callable
from pathlib import Path
import importlib.util
import textwrap

# Third Party
import pytest

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests, missing_reason

pytest_plugins = ["pytester"]


def test_a_class_requiring_an_unknown_capability_is_refused_with_the_choices() -> None:
    with pytest.raises(TypeError, match=r"choose from \['device', 'emulator'"):

        class BaseTypoTests(ConformanceTests):
            requires = frozenset({"native_op"})


def test_the_reason_for_a_missing_device_names_what_to_install(
    fake_plugin: Callable[..., str],
) -> None:
    # First Party
    from lmcache_device_kit import backend as kit_backend

    kit_backend.use(fake_plugin("lmcache_bar"))
    reason = missing_reason({"device", "native_ops"})
    assert "no cpu device here: install torch with cpu support" in reason
    assert "no native ops module" in reason


def test_a_class_whose_backend_lacks_a_required_capability_is_skipped_with_the_reason(
    fake_plugin: Callable[..., str],
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake backend (device cpu) has no native_ops module: that class skips, the
    other runs, and the skip says why."""
    package = fake_plugin("lmcache_bar")
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    pytester.makeconftest(
        textwrap.dedent(
            f"""
            from lmcache_device_kit import backend
            backend.use({package!r})
            from lmcache_device_kit.conformance.plugin import *  # noqa: F403
            """
        )
    )
    pytester.makepyfile(
        test_frame=textwrap.dedent(
            """
            import pytest
            from lmcache_device_kit.conformance.base import ConformanceTests

            @pytest.mark.without_device
            class BaseNativeTests(ConformanceTests):
                requires = frozenset({"native_ops"})

                def test_native(self):
                    pass

            @pytest.mark.without_device
            class BasePlainTests(ConformanceTests):
                def test_plain(self):
                    pass

            class TestNative(BaseNativeTests):
                pass

            class TestPlain(BasePlainTests):
                pass
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no native ops module*"])


@pytest.mark.parametrize(
    ("package", "owned"),
    [("lmcache_bar", "wheel"), ("lmcache.v1.platform.devices.bar", "in_tree")],
)
def test_a_backend_is_either_a_wheel_or_in_lmcaches_tree_never_both(
    monkeypatch: pytest.MonkeyPatch, package: str, owned: str
) -> None:
    """What only one ownership model can run (a wheel's entry point and doctor;
    LMCache's scan of its own tree) is told apart by where the package lives."""
    # First Party
    from lmcache_device_kit import backend as kit_backend
    from lmcache_device_kit.conformance import plugin

    names = ("bar", "bar", "no_such_device_module", "", "bar slow path:")
    backend = kit_backend.Backend(package, *names)
    monkeypatch.setattr(kit_backend, "current", lambda: backend)
    monkeypatch.setattr(plugin, "find_spec", lambda name: None)
    plugin.backend_capabilities.cache_clear()
    try:
        found = plugin.backend_capabilities()
    finally:
        plugin.backend_capabilities.cache_clear()
    assert found & {"wheel", "in_tree"} == {owned}
    assert "device" not in found
