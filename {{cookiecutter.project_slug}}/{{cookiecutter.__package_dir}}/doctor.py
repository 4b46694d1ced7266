# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The guide's debugging checklist, run for you: this package's doctor command.

Run ``{{ cookiecutter.import_package | replace('_', '-') }}-doctor``, or
``python -m {{ cookiecutter.import_package }}.doctor`` (``--help``: the options).
The checks are lmcache-device-kit's (``lmcache_device_kit.doctor``, README
"Doctor"), which this wheel requires (its LMCache shims come from the kit too).
Why a module of its own: the command stays this package's. It imports the kit
only when run, and nothing of this package (whose ``__init__`` imports lmcache
first, as the doctor needs).
"""

# Future
from __future__ import annotations

# Standard
from importlib import metadata
import sys

PACKAGE = "{{ cookiecutter.import_package }}"
#: This wheel's distribution: its metadata says which kit it requires.
DISTRIBUTION = "{{ cookiecutter.project_slug }}"


def kit_requirement() -> str:
    """The kit as this wheel requires it, to reinstall where an install left it out
    (``pip install --no-deps``)."""
    try:
        required = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:  # not installed: a source tree
        required = []
    kit = [r for r in required if r.startswith("lmcache-device-kit") and ";" not in r]
    return kit[0] if kit else "lmcache-device-kit"


def main(argv: list[str] | None = None) -> int:
    try:
        # Third Party
        from lmcache_device_kit.doctor.cli import main as kit_doctor
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("lmcache_device_kit"):
            raise
        sys.exit(
            "lmcache-device-kit, which this wheel requires, is gone: "
            f'pip install "{kit_requirement()}"'
        )
    prog = "{{ cookiecutter.import_package | replace('_', '-') }}-doctor"
    return kit_doctor(argv, package=PACKAGE, prog=prog)


if __name__ == "__main__":
    main()
