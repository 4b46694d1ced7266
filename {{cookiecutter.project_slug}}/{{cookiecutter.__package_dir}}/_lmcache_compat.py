# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""This backend's binding to LMCache's release shims: every LMCache name it uses.

Why it exists: LMCache's interface moves from release to release (where names
live, the LMCache-driven capability's spelling, what ``auto`` means, KV
layouts{{ ", the IPC wire" if cookiecutter.ownership == "wheel" else "" }}). The shims that follow it, and the ops' device-independent
helpers, are written once, in the shims' package imported below; this module
gives them this backend's own facts. The other modules import LMCache's names,
and the shims', from here (``__getattr__``: on first use).

Must not import, at top level, anything from LMCache but what the shims import
(``DeviceSpec``{% if cookiecutter.ownership == "wheel" and cookiecutter.lmcache_driven != "no" %}, and for the wire type the msgspec-only
``ipc_wire``{% endif %}): LMCache imports this module, through the spec module,
while it builds its device registry inside ``import lmcache``. Importing it
changes nothing.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# {{ "Third Party" if cookiecutter.ownership == "wheel" else "First Party" }}
# What the spec module needs when LMCache loads it comes from the shims' modules, not
# their package (still importing LMCache when a process imports it first).
{%- if cookiecutter.__extends %}
from {{ cookiecutter.__compat_package }}.builtin import (  # noqa: F401 - for the spec module
    builtin_spec,
)
{%- endif %}
from {{ cookiecutter.__compat_package }}.ops_support import (
    OpsSupport,
)
{%- if cookiecutter.ownership == 'wheel' %}
{%- if cookiecutter.native_ops == 'yes' %}
from {{ cookiecutter.__compat_package }}.release import (
    check_release,
    native_extension_problem,
    native_torch_problem,
)
{%- else %}
from {{ cookiecutter.__compat_package }}.release import check_release
{%- endif %}
{%- endif %}
from {{ cookiecutter.__compat_package }}.resolve import lookup
from {{ cookiecutter.__compat_package }}.spec import (  # noqa: F401 - for the spec module
    PortableDeviceSpec,
)
{%- if cookiecutter.ownership == 'wheel' and cookiecutter.lmcache_driven != 'no' %}
from {{ cookiecutter.__compat_package }}.wire import WireType
{%- endif %}

# Local
from .names import {{ "ALLOW_UNTESTED_ENV_VAR, " if cookiecutter.ownership == "wheel" else "" }}SLOW_PATH_MARK{{ ", TORCH_EXTENSION_MODULE" if cookiecutter.ownership == "wheel" and cookiecutter.native_ops == "yes" else "" }}

#: How this backend's class names start (its DeviceSpec, DeviceOps, ... subclasses).
CLASS_PREFIX = "{{ cookiecutter.class_prefix }}"
#: The slow-path report and pointer-mode helpers of this backend's ops.
ops_support = OpsSupport(SLOW_PATH_MARK, f"{CLASS_PREFIX}DeviceOps", __name__)
slow_paths = ops_support.slow_paths
report_slow_path = ops_support.report_slow_path
check_host_pinned = ops_support.check_host_pinned
announce_pointer_mode = ops_support.announce_pointer_mode
pointer_mode_operands = ops_support.pointer_mode_operands
{%- if cookiecutter.ownership == 'wheel' %}

#: This plugin's distribution (pyproject.toml's name).
PROJECT = "{{ cookiecutter.project_slug }}"
#: The requirement pyproject.toml declares; keep the two identical.
SUPPORTED_LMCACHE = "{{ cookiecutter.__lmcache_requirement }}"
#: Releases the conformance suite has passed on (oldest first).
TESTED_LMCACHE_VERSIONS = ({% for v in (cookiecutter | tested_releases) %}{{ v | tojson }}{{ ", " if not loop.last else ("," if loop.length == 1 else "") }}{% endfor %})
{%- if cookiecutter.lmcache_driven != 'no' %}
#: This plugin's IPC wrapper on LMCache's wire codec (0.5.6+; pickled before).
wire = WireType("ext_{{ cookiecutter.import_package }}", CLASS_PREFIX, __name__)
{%- endif %}


def check_lmcache_version() -> None:
    """Refuse to load on an LMCache release this plugin was not tested with
    (LMCache then skips it and logs why); ``ALLOW_UNTESTED_ENV_VAR=1`` allows it."""
    tested, supported = TESTED_LMCACHE_VERSIONS, SUPPORTED_LMCACHE
    check_release(PROJECT, tested, supported, ALLOW_UNTESTED_ENV_VAR)
{%- if cookiecutter.native_ops == 'yes' %}


def native_ops_torch_problem(installed_torch: str) -> str:
    """Why the native ops must not load with torch ``installed_torch`` or the
    installed torch extension ("" if they may): the wheel pins the torch they are
    compiled against, and the extension whose libraries they link (pyproject.toml)."""
    return native_torch_problem(PROJECT, installed_torch) or native_extension_problem(
        PROJECT, TORCH_EXTENSION_MODULE
    )
{%- endif %}
{%- endif %}


def __getattr__(name: str) -> Any:
    """The shims' names, and LMCache's resolved on first use (after ``import
    lmcache``): ``DeviceOps``, ``torch_ops``, ``PortableDeviceSpec``, ..."""
    return lookup(name)
