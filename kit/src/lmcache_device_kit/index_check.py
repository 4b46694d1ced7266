# SPDX-License-Identifier: Apache-2.0
"""Whether a package index can install what a wheel requires, before the wheel is
published there: ``python -m lmcache_device_kit.index_check --index URL WHEEL...``.

Why it exists: a release whose requirements its index cannot satisfy strands every
user, whose ``pip install`` then fails. A plugin's wheel requires lmcache and the
kit; the kit is the one that can be missing (its release comes from the template's
maintainers, not from the vendor), and a requirement by direct reference (a git URL
or a path) is refused by the index itself. A project's release workflow runs this
before it publishes (``nox -s check_wheels -- --index URL dist/*.whl``).

Reads the index's simple API (PEP 691 JSON, else PEP 503 HTML), the way pip finds
releases; a release counts when a file of it is there and not yanked.

Must not import lmcache, torch or the plugin (it reads the wheel and the index).
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit
from urllib.request import Request, urlopen
import argparse
import json
import sys

# Third Party
from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

# First Party
from lmcache_device_kit.wheel_check import KIT, read_wheel

#: What the simple API is asked for: JSON (PEP 691) first, HTML (PEP 503) otherwise.
ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
TIMEOUT_S = 60


class Links(HTMLParser):
    """The file names a PEP 503 page links to, with whether each is yanked."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            name = unquote(urlsplit(str(found["href"])).path.rsplit("/", 1)[-1])
            self.files.append((name, "data-yanked" in found))


def version_of(filename: str) -> Version | None:
    """The release a distribution file belongs to (None: not a wheel or sdist)."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def releases(index: str, name: str) -> list[Version]:
    """The releases of ``name`` that ``index`` (a simple API root) has files of,
    yanked ones aside; none when it does not know the project."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    try:
        with urlopen(Request(url, headers={"Accept": ACCEPT}), timeout=TIMEOUT_S) as r:
            kind, body = r.headers.get_content_type(), r.read().decode()
    except HTTPError as error:
        if error.code == 404:
            return []
        raise
    if kind == "application/vnd.pypi.simple.v1+json":
        files = [
            (f["filename"], bool(f.get("yanked"))) for f in json.loads(body)["files"]
        ]
    else:
        links = Links()
        links.feed(body)
        files = links.files
    found = {version_of(file) for file, yanked in files if not yanked}
    return sorted(version for version in found if version is not None)


def requirements(wheel: Path) -> list[Requirement]:
    """What installing ``wheel`` requires (its extras' requirements aside)."""
    metadata = read_wheel(wheel)[3]
    declared = [
        Requirement(line.split(":", 1)[1])
        for line in metadata
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in declared if r.marker is None or r.marker.evaluate({"extra": ""})]


def problems(wheel: Path, index: str) -> list[str]:
    """Each requirement of ``wheel`` that ``index`` cannot satisfy, with the fix."""
    found = []
    for requirement in requirements(wheel):
        if requirement.url:
            found.append(
                f"{wheel.name} requires {requirement} by direct reference: an index "
                "refuses such a wheel and pip never resolves it for your users; "
                "require a release on the index instead"
            )
            continue
        there = releases(index, requirement.name)
        if any(requirement.specifier.contains(v) for v in there):
            continue
        have = ", ".join(map(str, there[-5:])) or "no release"
        found.append(
            f"{wheel.name} requires {requirement}, which {index} cannot satisfy "
            f"(it has {have}): every user's pip install would fail. "
            + (kit_fix(requirement, index) if requirement.name == KIT else "")
        )
    return found


def kit_fix(requirement: Requirement, index: str) -> str:
    """How the kit gets onto ``index`` before this release goes out."""
    lower = [s.version for s in requirement.specifier if s.operator == ">="]
    tag = f"kit-v{lower[0]}" if lower else "kit-v<version>"
    return (
        f"Publish the kit there first: lmcache-device-template's maintainers release "
        f"it (the tag {tag}, its kit-release workflow), or upload it yourself from a "
        "checkout of the template at the commit you rendered from (python -m build "
        f"kit && twine upload --repository-url <{index}'s upload URL> kit/dist/*); "
        "then run this release again"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_device_kit.index_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("wheels", type=Path, nargs="+", help="the wheels to release")
    parser.add_argument(
        "--index",
        required=True,
        help="the index's simple API (https://pypi.org/simple/)",
    )
    args = parser.parse_args(argv)
    try:
        found = [p for wheel in args.wheels for p in problems(wheel, args.index)]
    except (URLError, OSError, ValueError) as error:
        print(f"index check: cannot read {args.index}: {error}", file=sys.stderr)
        return 2
    for problem in found:
        print(f"index check: {problem}", file=sys.stderr)
    if not found:
        names = ", ".join(wheel.name for wheel in args.wheels)
        print(f"index check OK: {args.index} can install what {names} require")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
