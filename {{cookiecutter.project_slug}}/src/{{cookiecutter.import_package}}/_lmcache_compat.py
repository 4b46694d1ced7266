# SPDX-License-Identifier: {{ cookiecutter.license }}
"""Everything this plugin knows about a particular LMCache release, in one place.

Why it exists: LMCache's plugin interface still moves between releases (module
paths, capability names, wire formats). Every other module imports LMCache
names from here, so supporting a new release means editing this file and
re-running the tests, nowhere else.

Tested with: lmcache {{ cookiecutter._lmcache_tested }} (``pyproject.toml`` pins
``{{ cookiecutter._lmcache_requirement }}``).

Must not import, at top level, anything from LMCache except ``DeviceSpec``:
LMCache imports this module (through ``device.py``) while it is still building
its device registry inside ``import lmcache``. Any other LMCache import here is
a circular import, and LMCache then drops the plugin with only a warning. The
other names are resolved on first use through the module ``__getattr__`` below.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import TYPE_CHECKING, Any

# The one eager import: the base class LMCache's loader checks against.
from lmcache.v1.platform.base.device_spec import DeviceSpec

if TYPE_CHECKING:
    from lmcache.lmcache_native import EngineKVFormat, TransferDirection
    from lmcache.v1.multiprocess.transfer_mode import MPTransferMode
    from lmcache.v1.platform import torch_ops
    from lmcache.v1.platform.base.device_ops import DeviceOps
    from lmcache.v1.platform.ops_types import PageBufferShapeDesc

__all__ = [
    "DeviceOps",
    "DeviceSpec",
    "EngineKVFormat",
    "MPTransferMode",
    "PageBufferShapeDesc",
    "SUPPORTED_LMCACHE",
    "TESTED_LMCACHE_VERSIONS",
    "TransferDirection",
    "torch_ops",
]

#: The requirement ``pyproject.toml`` declares; keep the two identical.
SUPPORTED_LMCACHE = "{{ cookiecutter._lmcache_requirement }}"
#: Releases the conformance suite has passed on.
TESTED_LMCACHE_VERSIONS = ("{{ cookiecutter._lmcache_tested }}",)

# Where each name lives in lmcache {{ cookiecutter._lmcache_tested }}. The guide ("Adding a New
# Device Backend") names some of these differently; the code is the truth:
#   * the torch baseline is the package lmcache/v1/platform/torch_ops/ (the
#     guide says torch_ops.py);
#   * TransferDirection / EngineKVFormat come from the compiled
#     lmcache.lmcache_native (DeviceOps only annotates them);
#   * built-in backends live in lmcache/v1/platform/devices/<name>/.
_LAZY_NAMES = {
    "DeviceOps": ("lmcache.v1.platform.base.device_ops", "DeviceOps"),
    "torch_ops": ("lmcache.v1.platform.torch_ops", None),
    "TransferDirection": ("lmcache.lmcache_native", "TransferDirection"),
    "EngineKVFormat": ("lmcache.lmcache_native", "EngineKVFormat"),
    "PageBufferShapeDesc": ("lmcache.v1.platform.ops_types", "PageBufferShapeDesc"),
    "MPTransferMode": ("lmcache.v1.multiprocess.transfer_mode", "MPTransferMode"),
}


def __getattr__(name: str) -> Any:
    """Resolve LMCache names on first use, after ``import lmcache`` has finished."""
    try:
        module_name, attribute = _LAZY_NAMES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def baseline_loaded_cuda_runtime() -> bool:
    """Whether LMCache's pointer-mode ``lmcache_memcpy_async`` baseline has loaded libcudart.

    The baseline loads the CUDA (or HIP) runtime on first pointer-mode use,
    which cannot address non-CUDA device memory; the conformance tests assert
    that this plugin's overrides never get there.
    """
    module = importlib.import_module("lmcache.v1.platform.torch_ops._tensor_from_ptr")
    return module._copy_lib is not module._copy_lib_NOT_LOADED


def installed_lmcache_version() -> str:
    """The installed LMCache release without local suffix, e.g. ``0.5.6``."""
    return metadata.version("lmcache").split("+", 1)[0]


def check_lmcache_version() -> None:
    """Refuse to load on an LMCache release this plugin was not tested with.

    Failure policy: loud. Raising here makes LMCache log "Failed to load LMCache
    device plugin ... <this message>" and skip the plugin, instead of running
    code written against another interface and failing later mid-transfer.
    """
    version = installed_lmcache_version()
    if version not in TESTED_LMCACHE_VERSIONS:
        raise RuntimeError(
            f"{{ cookiecutter.project_slug }} supports {SUPPORTED_LMCACHE} "
            f"(tested: {', '.join(TESTED_LMCACHE_VERSIONS)}), but lmcache {version} is "
            f"installed. Install a supported release (pip install '{SUPPORTED_LMCACHE}'), "
            "or port _lmcache_compat.py to the new release and run the conformance tests."
        )


check_lmcache_version()
