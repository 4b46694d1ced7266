# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""A CPU emulation of ``torch.{{ cookiecutter.__torch_module_name }}``: a test and CI tool.

Never a production path. Why it exists: LMCache dispatches on
``tensor.device.type``, so this plugin is only exercised for real by tensors
whose device really is ``{{ cookiecutter.device_name }}``. ``load()`` compiles
(once per torch version) and loads ``csrc/`` (``host_device.cpp`` and its
parts), a PrivateUse1 backend over host memory, renames PrivateUse1 to
``{{ cookiecutter.device_name }}`` and installs
``torch.{{ cookiecutter.__torch_module_name }}`` with the calls LMCache and the
guide's prerequisites use: ``is_available``, ``device_count``, ``set_device``,
``current_device``, ``synchronize``, ``device``, ``Stream``, ``Event``,
``current_stream``, ``stream``, ``empty_cache``, ``get_device_properties``;
and what a runtime gives native code: ``stream_handle``, ``host_func_launcher``,
``kernel_launcher`` (``_streams.py``).

A distribution of its own
(``{{ cookiecutter.__emulator_package | replace('_', '-') }}``), installed next to
the plugin by the test sessions, never shipped in the plugin's wheel. Torch's
device-backend autoloading calls ``autoload()`` at the end of ``import torch``, as
it does for a vendor's real extension (entry point group ``torch.backends``); it
loads the emulator only when the environment opts in with
``{{ cookiecutter.__emulator_env_var }}=1``, so the plugin finds
``torch.{{ cookiecutter.__torch_module_name }}`` exactly as it finds a real one and
never names the emulator. Once loaded it claims PrivateUse1 for the whole process.

Must not import torch or the rest of the emulator at top level: torch's
autoloading imports this package from inside ``import torch``. ``load()``
imports ``_device.py`` (the backend and the module it installs as
``torch.{{ cookiecutter.__torch_module_name }}``); ``_cache.py`` says where the
compiled backend is kept; ``_record.py`` records who calls what on the device
module, where ``{{ cookiecutter.__emulator_env_var }}_RECORD`` asks for it.

Device memory (``csrc/memory.cpp``) is not host-addressable: ``data_ptr()`` is
a device address, and a host read or write of it crashes with a message naming
the memory; the emulator's own kernels reach it through
``kernel_address_translator``. IPC follows CUDA's rules (``ipc_open_handle``:
one mapping per process and allocation; ``ipc_close_handle``: one close unmaps
it for every user; a later use fails), and memory remembers its device
(``pointer_device``).

Streams are asynchronous (``_streams.py``, ``csrc/streams.cpp``, ``events.cpp``):
copies involving the device, kernels and host functions run later on the stream's
worker; ops without a kernel here run at once, after the current stream's work.

Faults (``csrc/faults.cpp``, ``FAULTS_ENV_VAR``, ``inject_faults``): out of
memory, a failed IPC open, a refused host registration, a device lost in the
middle of a transfer.

Counters (``_counters.py``, ``csrc/counters.cpp``, ``counters()``): bytes copied by
direction, copies, kernel launches, device ops, host synchronizations, queries, host
functions, IPC opens and closes, exact, per process; in a file other processes read
where ``{{ cookiecutter.__emulator_env_var }}_COUNTERS`` names a directory.

Limits: there are no DMA engines or timing, and RNG is the CPU generator.
"""

# Future
from __future__ import annotations

# Standard
import os
import types

# Local
from ._cache import CACHE_ENV_VAR, cache_root

__all__ = ["CACHE_ENV_VAR", "ENV_VAR", "autoload", "cache_root", "load"]

#: Set to ``1`` to load the emulator at ``import torch`` (``autoload``).
ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"


def load() -> types.ModuleType:
    """Compile (first time only) and load the emulator; install and return the device
    module (idempotent)."""
    # Third Party
    import torch  # noqa: F401 - first: when torch is not imported yet, its autoloading may load the emulator

    # Local
    from . import _device

    return _device.load()


def autoload() -> None:
    """Torch's ``torch.backends`` entry point: load the emulator if ``ENV_VAR`` is
    ``1``, else nothing."""
    if os.environ.get(ENV_VAR) == "1":
        # Local
        from . import _device

        _device.load()
