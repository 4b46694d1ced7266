# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The guide's debugging checklist, run for you: this package's doctor command.

Run ``{{ cookiecutter.import_package | replace('_', '-') }}-doctor``, or
``python -m {{ cookiecutter.import_package }}.doctor`` (``--help``: the options).
The checks are lmcache-device-kit's (``lmcache_device_kit.doctor``, README
"Doctor"), which this wheel does not require: its ``doctor`` extra brings them, at
the kit version this project pins. Why a module of its own: the command stays
this package's. It imports the kit only when run, and nothing of this package
(whose ``__init__`` imports lmcache first, as the doctor needs).
"""

# Future
from __future__ import annotations

# Standard
import sys

PACKAGE = "{{ cookiecutter.import_package }}"
INSTALL = 'pip install "{{ cookiecutter.project_slug }}[doctor]"'


def main(argv: list[str] | None = None) -> int:
    try:
        # Third Party
        from lmcache_device_kit.doctor.cli import main as kit_doctor
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("lmcache_device_kit"):
            raise
        sys.exit(f"the doctor needs lmcache-device-kit (not installed): {INSTALL}")
    prog = "{{ cookiecutter.import_package | replace('_', '-') }}-doctor"
    return kit_doctor(argv, package=PACKAGE, prog=prog)


if __name__ == "__main__":
    main()
