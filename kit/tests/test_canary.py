# SPDX-License-Identifier: Apache-2.0
"""The canary says who depends on what moved, and keeps expected differences apart.

``lmcache_device_kit.canary`` runs a project's suite on an LMCache its plugin was not
tested with. A failing test is the harness's when its failure names a harness entry
of ``doctor --api`` that moved, the plugin's when it names one of the plugin's, and
the plugin's own code's otherwise; a test declared to fail on every untested release
is reported as expected and does not fail the canary. Checked here on JUnit reports
of those shapes, without running a release.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path

# Third Party
import pytest

# First Party
from lmcache_device_kit import backend as kit_backend
from lmcache_device_kit.canary import (
    EXPECTED,
    attribution,
    is_untested,
    junit_outcome,
    untested_env,
)

MOVED = [
    {"name": "harness call LoadStoreOp", "ok": False},
    {"name": "name PageBufferShapeDesc", "ok": False},
    {"name": "harness server flag --no-l1-use-lazy", "ok": False},
]
TYPE_ERROR = "TypeError: LoadStoreOp.__init__() got an unexpected keyword 'token_ids'"


def test_a_failure_that_names_a_moved_harness_entry_is_the_harness_s() -> None:
    said = attribution(f"worker log:\n{TYPE_ERROR}", MOVED)
    assert said == "the harness depends on what moved (harness call LoadStoreOp)"
    flag = attribution("error: unrecognized arguments: --no-l1-use-lazy", MOVED)
    assert "harness server flag --no-l1-use-lazy" in flag


def test_a_failure_that_names_a_moved_plugin_entry_is_the_plugin_s() -> None:
    said = attribution("ImportError: cannot import name 'PageBufferShapeDesc'", MOVED)
    assert said == "the plugin depends on what moved (name PageBufferShapeDesc)"


def test_a_failure_that_names_nothing_that_moved_is_the_plugin_s_own() -> None:
    said = attribution("AssertionError: 12 bytes differ after the retrieve", MOVED)
    assert said.startswith("the plugin: its failure names nothing that moved")


def test_an_expected_difference_is_reported_apart_and_fails_nothing(
    tmp_path: Path,
) -> None:
    file, cls, test = next(iter(EXPECTED)).split("::")
    module = file.removesuffix(".py")
    junit = tmp_path / "suite.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        f'<testcase classname="tests.{module}.{cls}" name="{test}@discovery">'
        '<failure message="0.5.7rc2 not in tested"/></testcase>'
        '<testcase classname="tests.test_e2e" name="test_round_trip[tp1]">'
        f'<failure message="worker failed">{TYPE_ERROR}</failure></testcase>'
        '<testcase classname="tests.test_e2e" name="test_other"/>'
        "</testsuite></testsuites>"
    )
    outcome = junit_outcome([junit])
    assert outcome["expected"] == {f"{file}::{cls}::{test}": True}
    assert list(outcome["failing"]) == ["test_e2e.py::test_round_trip[tp1]"]
    assert (outcome["tests"], outcome["failures"]) == (3, 1)


def test_on_a_tested_release_the_expected_difference_counts_as_any_failure(
    tmp_path: Path,
) -> None:
    file, cls, test = next(iter(EXPECTED)).split("::")
    module = file.removesuffix(".py")
    junit = tmp_path / "suite.xml"
    junit.write_text(
        "<testsuites><testsuite>"
        f'<testcase classname="tests.{module}.{cls}" name="{test}">'
        '<failure message="range"/></testcase>'
        "</testsuite></testsuites>"
    )
    outcome = junit_outcome([junit], untested=False)
    assert outcome["expected"] == {} and outcome["failures"] == 1
    assert list(outcome["failing"]) == [f"{file}::{cls}::{test}"]


def test_a_pre_release_past_the_newest_tested_one_is_untested() -> None:
    assert is_untested("0.5.7rc2", ">=0.5.4,<=0.5.6")
    assert not is_untested("0.5.5", ">=0.5.4,<=0.5.6")


def test_a_backend_without_a_release_guard_is_refused_naming_what_it_lacks() -> None:
    in_tree = kit_backend.Backend(
        "lmcache.v1.platform.devices.bar", "bar", "bar", "bar", "", "bar slow path:"
    )
    with pytest.raises(SystemExit, match="has no ALLOW_UNTESTED_ENV_VAR"):
        untested_env(in_tree)
    wheel = kit_backend.Backend(
        "lmcache_bar", "bar", "bar", "bar", "", "slow:", "LMCACHE_BAR_ALLOW_UNTESTED"
    )
    assert untested_env(wheel)["LMCACHE_BAR_ALLOW_UNTESTED"] == "1"
