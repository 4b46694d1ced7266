# SPDX-License-Identifier: Apache-2.0
"""Silent slow paths: what ``nox -s bench`` fails on, from what processes said.

A transfer that works but took a slower path than the one asked for is a
finding: a line of the plugin's ``SLOW_PATH_MARK`` (pageable host memory when
the device pins, a native op falling back to the baseline, native ops not
bound) in any log; a rank whose transfer context or sub-path (pickle, SHM,
LMCache-driven) is not the mode's; native ops not bound or not running where
the setup asks for them, or bound where it asks for the baseline; a server
whose pointer-mode ops did not run the way the setup asks. Pure functions
over texts and reports, so the template's tests can feed them degraded runs.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUB_PATH = re.compile(r"mode=(SHM|pickle)\)")
POINTER_MODE = re.compile(r"serving pointer-mode multi_layer_block_kv_transfer \(([^)]*)\)")


def marked(text: str, mark: str) -> list[str]:
    """The slow-path reports in a log, from the mark on (timestamps and levels cut)."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    return [line[line.index(mark) :].strip() for line in lines if mark in line]


def native_findings(setup: str, report: dict) -> list[str]:
    """What a process's report of its ops (``native_bound``, ``native_calls``) says
    against what the setup asks for."""
    calls = report.get("native_calls", {})
    ran = sum(n for key, n in calls.items() if key.endswith(":native"))
    fell = sum(n for key, n in calls.items() if key.endswith(":fallback"))
    if setup.startswith("native"):
        if report.get("native_bound") is not True:
            return ["native ops are not bound: the setup measures LMCache's torch baseline"]
        if fell:
            return [f"native ops fell back to the torch baseline {fell} time(s)"]
    if setup.startswith("baseline") and (report.get("native_bound") or ran):
        return ["native ops are bound in the baseline setup: it measures the kernels"]
    return []


def rank_findings(setup: str, mode: str, rank: dict, log: str, mark: str) -> list[str]:
    """One worker rank: its log's slow-path lines, its transfer path, its ops."""
    found = [f"worker: {line}" for line in marked(log, mark)]
    context = rank.get("transfer_context", "")
    if mode == "lmcache-driven" and context != "LMCacheDrivenTransferContext":
        found.append(f"worker transferred with {context}, not LMCache-driven")
    if mode.startswith("engine-driven"):
        sub = SUB_PATH.findall(log)
        if "LMCacheDriven" in context or not sub:
            found.append(f"worker transferred with {context}, not engine-driven")
        elif mode.endswith("SHM") and sub[-1] != "SHM":
            found.append(f"worker was served by {sub[-1]}, although the server has an SHM pool")
    if not setup.startswith("cpu") and mode.startswith("engine-driven"):
        found += native_findings(setup, rank)
    return found


def server_findings(setup: str, mode: str, log: str, mark: str) -> list[str]:
    """The server: its slow-path lines and, LMCache-driven with the plugin, how its
    pointer-mode ops ran."""
    found = [f"server: {line}" for line in marked(log, mark)]
    if mode == "lmcache-driven" and not setup.startswith("cpu"):
        how = POINTER_MODE.findall(ANSI.sub("", log))
        want = "native kernels" if setup.startswith("native") else "torch baseline"
        if not how:
            found.append("server never ran the plugin's pointer-mode ops")
        elif how[-1] != want:
            found.append(f"server ran pointer-mode transfers on the {how[-1]}, not the {want}")
    return found


def findings(setup: str, mode: str, paths: dict, texts: dict[str, str], mark: str) -> list[str]:
    """Everything that silently degraded in one (setup, mode): ``paths`` as
    ``bench_e2e.run_mode`` returns it, ``texts`` the logs by path."""
    found = server_findings(setup, mode, texts[paths["server_log"]], mark)
    for rank, log in zip(paths["ranks"], paths["rank_logs"], strict=True):
        found += rank_findings(setup, mode, rank, texts[log], mark)
    return [f"{setup} / {mode}: {finding}" for finding in dict.fromkeys(found)]
