# SPDX-License-Identifier: Apache-2.0
"""LMCache's sdist, fetched for the contract runner: LMCache's tests ship only there.

Why a module of its own: fetching is its own concern (pip's index, its certificate, a
checksum and a cache), apart from choosing and running LMCache's tests. The sdist
comes through the index's JSON simple API (PEP 691; ``pip download`` cannot fetch
it: preparing the sdist's metadata fails).

Imports only the standard library: never LMCache, the plugin or the runner (which
imports it).
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import hashlib
import json
import os
import ssl
import subprocess
import sys
import urllib.request


def index_url() -> str:
    """The simple index pip installs from (PIP_INDEX_URL, pip's configuration, else
    PyPI)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].rstrip("/")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"],
        capture_output=True,
        text=True,
        check=False,
    )
    configured = done.stdout.strip().rstrip("/") if done.returncode == 0 else ""
    return configured or "https://pypi.org/simple"


def cache_dir(package: str) -> Path:
    """Where sdists are kept: ``$XDG_CACHE_HOME`` (else ``~/.cache``), in the directory
    the plugin's own runner used before the kit had it (``<package>-lmcache-sdists``),
    so a project's cache stays valid."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / f"{package}-lmcache-sdists"


def fetch_sdist(release: str, cache: Path) -> Path:
    """``lmcache-<release>.tar.gz`` from the index (PEP 691 JSON), checked against its
    sha256; cached."""
    target = cache / f"lmcache-{release}.tar.gz"
    if target.exists():
        return target
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    accept = {"Accept": "application/vnd.pypi.simple.v1+json"}  # PEP 691
    request = urllib.request.Request(f"{index_url()}/lmcache/", headers=accept)
    with urllib.request.urlopen(request, timeout=60, context=context) as response:
        files = json.load(response)["files"]
    entry = next((f for f in files if f["filename"] == target.name), None)
    if entry is None:
        sys.exit(
            f"the index lists no {target.name}: LMCache's tests ship only in its sdist"
        )
    with urllib.request.urlopen(entry["url"], timeout=300, context=context) as response:
        data = response.read()
    expected = entry.get("hashes", {}).get("sha256")
    if expected and hashlib.sha256(data).hexdigest() != expected:
        sys.exit(f"{target.name}: sha256 mismatch, refusing to run its tests")
    cache.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target
