# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""This backend in a cluster: two nodes sharing one LMCache L2, the kit's class.

Two ``lmcache server`` processes on 127.0.0.1 stand for two hosts; they share an
``fs`` directory or a real Redis (``resp``). A rank on node A stores from device 0,
a rank on node B retrieves into device 1, byte for byte, in both transfer modes,
and at TP=2 (see the kit's ``lmcache_device_kit.conformance.cluster``); then faults
on that L2 (``cluster_faults``): objects cut short or corrupted, Redis frozen,
killed, restarted, each requirement LMCache does not meet a strict xfail naming
the limitation; and with no L2 at all, peer to peer through a coordinator
(``conformance.cluster_p2p``).

Marked ``cluster``: the default run deselects it (pyproject.toml); run it with
``nox -s cluster`` (README.md, "Running across nodes"), which installs the real
Redis the ``resp`` cases need (the ``cluster`` extra) and the P2P transfer engine
(the ``p2p`` extra). Imports only the kit.
"""

# Future
from __future__ import annotations

# Third Party
from lmcache_device_kit.conformance import cluster, cluster_faults, cluster_p2p


class TestCluster(cluster.BaseClusterTests):
    pass


class TestClusterFaults(cluster_faults.BaseClusterFaultTests):
    pass


class TestClusterP2P(cluster_p2p.BaseClusterP2PTests):
    pass
