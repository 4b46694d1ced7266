# SPDX-License-Identifier: Apache-2.0
"""What a request costs: the counted targets are exact, the projection is arithmetic
on the counts, and a device description the projection cannot use is refused with
the fix.

``nox -s bench`` of the template feeds these the emulator's counts of real requests;
here they get counts written out, so each target is seen to miss on the defect it is
there for.
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import replace
from pathlib import Path

# Third Party
import pytest

# First Party
from lmcache_device_kit import projection
from lmcache_device_kit.projection import Counted, Device

MIB = 1 << 20
#: Three LMCache-driven stores of 4 chunks (8 MiB, 16 blocks each), one rank, as the
#: template's benchmark counts them: the payload crosses once plus the block ids, once
#: more through the server's staging slot within the device, 2 launches per chunk.
PAYLOAD = 4 * 8 * MIB
HEALTHY = Counted(
    requests=3,
    chunks=4,
    ranks=1,
    blocks=64,
    payload=PAYLOAD,
    server={
        "bytes_d2h": 3 * PAYLOAD,
        "bytes_h2d": 3 * 64 * 8,
        "bytes_d2d": 3 * PAYLOAD,
        "launches": 24,
        "host_syncs": 0,
        "host_functions": 12,
    },
    workers={"host_syncs": 9},
    server_cpu_s=0.006,
)


def missed(counted: Counted) -> list[str]:
    return [name for name, met, _ in projection.targets(counted) if not met]


def test_a_plugin_that_moves_the_payload_once_meets_every_counted_target() -> None:
    assert missed(HEALTHY) == []
    same = replace(HEALTHY, chunks=1, blocks=16, payload=PAYLOAD // 4)
    assert projection.syncs_grow_with_chunks(same, HEALTHY)[1]


@pytest.mark.parametrize(
    ("defect", "change", "target"),
    [
        ("the payload crosses twice", {"bytes_h2d": 3 * PAYLOAD}, "device boundary"),
        (
            "part of it never crosses",
            {"bytes_d2h": 3 * PAYLOAD - 4096},
            "device boundary",
        ),
        ("more than block ids cross", {"bytes_h2d": 3 * 64 * 8 + 8}, "device boundary"),
        ("a second staging copy", {"bytes_d2d": 6 * PAYLOAD}, "device-internal"),
        ("a bounce through host memory", {"bytes_h2h": 1}, "host-to-host"),
        ("a third launch per chunk", {"launches": 25}, "launches"),
        ("a device op beside the kernels", {"device_ops": 1}, "launches"),
        ("the server synchronizes once", {"host_syncs": 1}, "server never waits"),
    ],
)
def test_each_counted_target_misses_on_the_defect_it_is_there_for(
    defect: str, change: dict[str, int], target: str
) -> None:
    broken = replace(HEALTHY, server={**HEALTHY.server, **change})
    assert [name for name in missed(broken) if target in name], defect
    assert len(missed(broken)) == 1, f"{defect} misses only its own target"


def test_block_ids_are_allowed_per_rank_and_a_tp2_request_may_carry_both_ranks() -> (
    None
):
    tp2 = replace(
        HEALTHY, ranks=2, server={**HEALTHY.server, "bytes_h2d": 2 * 3 * 64 * 8}
    )
    assert missed(tp2) == []
    assert missed(replace(tp2, ranks=1)) != []


def test_host_waits_that_grow_with_the_chunks_of_a_request_are_a_miss() -> None:
    small = replace(HEALTHY, chunks=1, workers={"host_syncs": 6})
    name, met, detail = projection.syncs_grow_with_chunks(small, HEALTHY)
    assert not met and detail == "2 at 1 chunk(s), 3 at 4"


def test_the_projection_adds_each_counted_costs_time_on_the_device_per_request() -> (
    None
):
    device = Device(
        bus_host_to_device_gbps=10.0,
        bus_device_to_host_gbps=20.0,
        memory_gbps=100.0,
        launch_us=4.0,
        sync_us=50.0,
    )
    got = projection.project(device, HEALTHY)
    assert got["bus"] == pytest.approx((PAYLOAD / 20e9) + 64 * 8 / 10e9)
    assert got["memory"] == pytest.approx(2 * PAYLOAD / 100e9)
    assert got["launches"] == pytest.approx(8 * 4e-6)
    assert got["syncs"] == pytest.approx((3 + 4) * 50e-6)
    assert got["host"] == pytest.approx(0.002)
    assert got["total"] == pytest.approx(sum(v for k, v in got.items() if k != "total"))


def test_a_project_without_a_device_table_is_projected_on_the_kits_defaults(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert projection.load(tmp_path / "pyproject.toml") == Device()
    lines = projection.describe(Device())
    assert all("(" in line for line in lines[1:]), "every default names its source"


def test_a_vendors_numbers_replace_the_defaults_they_name(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[tool.lmcache-device-kit.device]\nname = "x1"\nmemory_gbps = 800\n'
    )
    device = projection.load(path)
    assert (device.name, device.memory_gbps) == ("x1", 800.0)
    assert device.launch_us == Device().launch_us
    assert "  memory_gbps = 800  (yours)" in projection.describe(device)


@pytest.mark.parametrize(
    ("table", "fix"),
    [
        ("memory_gbs = 800", "unknown key 'memory_gbs'; the keys are name, bus_"),
        ("launch_us = 0", "launch_us must be a positive number, e.g. launch_us = 5.0"),
        ('sync_us = "10"', "sync_us must be a positive number"),
        ("sync_us = true", "sync_us must be a positive number"),
        ('name = ""', "name must be a non-empty string"),
    ],
)
def test_a_device_description_the_projection_cannot_use_is_refused_with_the_fix(
    tmp_path: Path, table: str, fix: str
) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.lmcache-device-kit.device]\n{table}\n")
    with pytest.raises(
        projection.DeviceDescriptionError, match="tool.lmcache"
    ) as error:
        projection.load(path)
    assert fix in str(error.value)


def test_an_unreadable_pyproject_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool\n")
    with pytest.raises(projection.DeviceDescriptionError, match="cannot read"):
        projection.load(path)
