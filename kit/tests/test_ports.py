# SPDX-License-Identifier: Apache-2.0
"""The harness's port allocator (``harness/ports.py``): two test processes are never
handed the same port.

Every ``lmcache server`` a suite starts binds ports handed out there, from parallel
pytest-xdist workers; a port handed to two of them fails one server with "address
already in use".
"""

# Future
from __future__ import annotations

# Standard
import subprocess
import sys

#: Ports each process takes: enough that two processes picking free ports on their
#: own (bind to port 0, close) would almost surely be handed some of the same.
COUNT = 500
HOLDER = """
import sys
from lmcache_device_kit.harness.ports import free_port
print(" ".join(str(free_port()) for _ in range({count})), flush=True)
sys.stdin.read()  # holds them until the test is done
"""


def test_two_processes_taking_ports_at_once_are_never_handed_the_same_one() -> None:
    code = HOLDER.format(count=COUNT)
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        handed = [set(map(int, holder.stdout.readline().split())) for holder in holders]  # type: ignore[union-attr]
    finally:
        for holder in holders:
            holder.stdin.close()  # type: ignore[union-attr]
            holder.wait(timeout=30)
    assert [len(ports) for ports in handed] == [COUNT, COUNT]
    assert not handed[0] & handed[1], sorted(handed[0] & handed[1])
