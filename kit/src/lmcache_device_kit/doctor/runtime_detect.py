# SPDX-License-Identifier: Apache-2.0
"""The doctor's check that ``torch.<device>`` is the vendor's runtime, for a backend
that extends a built-in on the built-in's device type (a CUDA look-alike).

Why a module of its own: ``torch.cuda`` works on the built-in's hosts too, so a
device there proves nothing about the vendor's port; the plugin's ``detect.py``
tells the two apart, and this check says which one this host has and which
``LMCACHE_DEVICE_BACKEND`` picks the plugin. Imports the plugin's ``detect.py`` by
path only (before ``import lmcache`` chose a backend).
"""

# Future
from __future__ import annotations

# Local
from ..backend import current, load_module_file
from .report import Report


def check_vendor_runtime(report: Report) -> bool:
    """✓ when ``detect.runtime_present()`` (always, without a line, for a backend of
    its own device type)."""
    backend = current()
    if not backend.extends:
        return True
    detect = load_module_file(backend.package, "detect")
    if detect is None:
        return report.add(
            "vendor runtime",
            False,
            f"{backend.package} has no detect.py",
            "re-render the project: a backend that extends a built-in has one",
        )
    switch = detect.STAND_IN_ENV_VAR
    try:
        present, why = bool(detect.runtime_present()), ""
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        present, why = False, f": it raised {type(exc).__name__}: {exc}"
    name, ours = backend.torch_module_name, backend.backend_name
    return report.add(
        "vendor runtime",
        present,
        f"detect.runtime_present() is {present}{why}: torch.{name} here is "
        + ("this backend's runtime" if present else f"not {ours}'s runtime"),
        f"run on a host with {ours}'s runtime (detect.runtime_present is a "
        f"TODO(vendor) until it recognises it); to test on LMCache's "
        f"{backend.extends} runtime instead, export {switch}=1 and "
        f"LMCACHE_DEVICE_BACKEND={ours}",
    )
