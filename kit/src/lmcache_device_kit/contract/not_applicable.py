# SPDX-License-Identifier: Apache-2.0
"""LMCache's tests that do not apply to a plugin as LMCache runs them, with reasons.

Why a module of its own: what is not applicable is data, read apart from choosing
and running the tests. The kit ships the entries every plugin made with the template
shares (``lmcache_contract.toml`` beside this module); a project may add its own in
``tests/lmcache_contract.toml``, same tables, read over the kit's: a test the project
lists is listed as the project says, in whichever table (the kit's entry for it is
dropped). Each table maps a pytest node id (or a prefix of one) to its reason, for
every release, or to ``{ reason = "...", first = "0.5.6", last = "0.5.7" }`` for the
releases whose tests it concerns; a pre-release counts as its final.

Imports only the standard library (``tomli`` on Python 3.10): never LMCache or the
plugin.
"""

# Future
from __future__ import annotations

# Standard
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
import re

try:
    # Standard
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    # Third Party
    import tomli as tomllib

#: The kit's own entries, package data beside this module.
KIT_FILE = "lmcache_contract.toml"
#: skip: skipped with the reason; device_type_only: run in the second pass only
#: (DEVICE_TYPE set, no backend chosen by name); not_collected: paths never imported.
TABLES = ("skip", "device_type_only", "not_collected")
#: Starts the skip reason of every listed test, so a report counts them apart.
SKIP_MARK = KIT_FILE


def numeric(version: str) -> tuple[int, ...]:
    """``0.5.7rc2`` -> (0, 5, 7): a pre-release counts as its final."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def for_release(entries: dict[str, Any], installed: str) -> dict[str, str]:
    """The entries of one table that concern ``installed``, as test -> reason: a
    reason alone is every release's, a table bounds its releases."""
    found = {}
    for test, entry in entries.items():
        if isinstance(entry, str):
            found[test] = entry
            continue
        first, last = entry.get("first"), entry.get("last")
        if (first is None or numeric(installed) >= numeric(first)) and (
            last is None or numeric(installed) <= numeric(last)
        ):
            found[test] = entry["reason"]
    return found


@dataclass
class NotApplicable:
    """One release's entries, by table, and the file that listed each test."""

    tables: dict[str, dict[str, str]] = field(
        default_factory=lambda: {table: {} for table in TABLES}
    )
    source: dict[str, str] = field(default_factory=dict)

    @property
    def skip(self) -> dict[str, str]:
        return self.tables["skip"]

    @property
    def device_type_only(self) -> dict[str, str]:
        return self.tables["device_type_only"]

    @property
    def not_collected(self) -> dict[str, str]:
        return self.tables["not_collected"]

    def listed(self) -> dict[str, str]:
        """Every test listed, in any table: test -> reason."""
        return {test: r for table in self.tables.values() for test, r in table.items()}

    def add(self, text: str, source: str, release: str) -> None:
        """Read a file's entries for ``release`` over those already here."""
        document = tomllib.loads(text)
        unknown = sorted(set(document) - set(TABLES))
        if unknown:
            raise ValueError(
                f"{source}: unknown table(s) {', '.join(unknown)}; the tables are "
                f"{', '.join(TABLES)} (see the kit's {KIT_FILE})"
            )
        for table in TABLES:
            for test, reason in for_release(document.get(table, {}), release).items():
                for entries in self.tables.values():
                    entries.pop(test, None)
                self.tables[table][test] = reason
                self.source[test] = source


def load(release: str, project_file: Path | None = None) -> NotApplicable:
    """The kit's entries for ``release``, then the project's file's over them."""
    found = NotApplicable()
    kit = resources.files(__name__.rpartition(".")[0]).joinpath(KIT_FILE).read_text()
    found.add(kit, f"the kit's {KIT_FILE}", release)
    if project_file is not None:
        found.add(project_file.read_text(), str(project_file), release)
    return found
