# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The emulated device: the compiled backend (``csrc/``) and the module installed
as ``torch.{{ cookiecutter.__torch_module_name }}``.

Imported by ``load()`` and ``autoload()`` (``__init__.py``) only, after torch (maybe
from inside ``import torch``). See ``__init__.py`` for what it holds code to.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
from typing import Any
import atexit
import hashlib
import importlib.util
import os
import sys
import types
import uuid

# Third Party
import torch

# Local
from . import _counters, _ipc, _record, _streams
from ._cache import cache_root
from ._streams import device_index

DEVICE_NAME = "{{ cookiecutter.device_name }}"
#: ``torch.<name>``: the module this emulator installs.
TORCH_MODULE_NAME = "{{ cookiecutter.__torch_module_name }}"
#: Number of emulated devices; read once, at load.
DEVICE_COUNT_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_DEVICES"
#: Microseconds a task waits on its stream before it may run (default 200): long enough
#: that a missing synchronization reads stale bytes; read once, at load.
LATENCY_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_LATENCY_US"
#: Faults to inject from the load on, comma-separated: ``oom`` (device allocations of 64
#: KiB and more fail), ``ipc_open`` (opening an IPC memory handle fails),
#: ``host_register`` (host registration is refused: the locked-memory limit reached),
#: ``device_lost`` (the next copy of 64 KiB or more, or the next kernel, loses its
#: device halfway: every later call on it fails, and events recorded on it fail in every
#: process). ``inject_faults()`` changes them.
FAULTS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_FAULTS"
#: How host functions run (``_streams.HOST_FUNCTION_MODELS``): ``launch`` (default),
#: ``subscribed`` (Ascend's), ``0`` (none, as torch_npu and torch_musa: no
#: ``host_func_launcher``; code that publishes after a stream's work synchronizes it).
HOST_FUNCS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_HOST_FUNCS"
#: ``0``: IPC memory not ported yet (day one): no ``ipc_*`` members. ``cuda``: any
#: process opens an exported handle (CUDA). By default an importer must be allowed by
#: the exporter first (``ipc_allow_importer``), as on Ascend (``_ipc.py``).
IPC_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_IPC"
#: ``1``: device memory comes through the VMM API (torch's expandable segments, vLLM's
#: sleep mode): legacy IPC refuses it, ``ipc_export_fd`` shares it (``_ipc.py``).
VMM_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_VMM"
#: ``0``: one runtime context for every thread (CUDA's primary context). By default
#: contexts are per thread, as on Ascend: host registration and IPC export, open and
#: close fail on a thread that has not set its device (the loading thread has).
THREAD_CONTEXTS_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_THREAD_CONTEXTS"
#: ``0``: the device reaches pinned host memory at its host address (CUDA's unified
#: addressing). By default it reaches it only at a separate device address, as on Ascend
#: (``aclrtHostRegister`` returns one): ``host_device_pointer`` gives it, and a kernel
#: given the host address fails its stream. Read once, at load.
HOST_ALIASES_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}_HOST_ALIASES"
_SOURCES = sorted((Path(__file__).with_name("csrc")).glob("*.[ch]*"))
#: The compiled backend, once ``load()`` ran.
_ext: Any = None


def _cached_sources() -> list[Path]:
    """A copy of the C++ sources in a build cache keyed by their hash, the torch build
    and the Python ABI.

    Compiling the copies (not the installed files) keeps their mtimes stable, so
    a reinstalled wheel with the same sources does not trigger a rebuild. The key
    holds no path and no device name (the C++ is the same for every name): every
    environment with this torch build, and every emulator rendered from the same
    template, loads one build.
    """
    texts = {source.name: source.read_bytes() for source in _SOURCES}
    torch_build = f"{torch.__version__} {torch.version.git_version}"
    abi = [torch_build, sys.implementation.cache_tag]
    digest = hashlib.sha256(
        b"".join(name.encode() + text for name, text in texts.items())
        + " ".join(abi).encode()
    )
    tag = f"torch-{torch.__version__}-{digest.hexdigest()[:12]}".replace("+", "_")
    build_dir = cache_root() / tag
    build_dir.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        copy = build_dir / name
        if not copy.exists() or copy.read_bytes() != text:
            partial = copy.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(text)
            os.replace(partial, copy)  # atomic: concurrent first imports are safe
    return [build_dir / name for name in texts if name.endswith(".cpp")]


def _load_extension() -> Any:
    """The compiled backend: loaded straight from the build cache once built, else built
    first.

    The cache directory is keyed by the source hash, so a built module there
    is up to date; loading it directly spares every process torch's rebuild
    check (ldconfig, ninja and compiler probes). While the first build runs,
    torch's lock file is present and ``load`` waits for it.
    """
    sources = _cached_sources()
    name = "lmcache_emulated_host_device"  # the same for every device name
    built = sources[0].with_name(f"{name}.so")
    if built.exists() and not sources[0].with_name("lock").exists():
        spec = importlib.util.spec_from_file_location(name, built)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    # Third Party
    from torch.utils.cpp_extension import load

    build_dir = str(sources[0].parent)
    return load(
        name=name,
        sources=list(map(str, sources)),
        # -O1: its code is bookkeeping around libtorch's own kernels; -O2 took 139 s of
        # CPU to compile here, -O1 114 s, on every cold run.
        extra_cflags=["-O1"],
        build_directory=build_dir,
    )


def inject_faults(*faults: str) -> None:
    """Switch on ``faults`` (see ``FAULTS_ENV_VAR``) in this process, and every other
    one off.

    Each call starts from healthy devices: a lost one comes back and streams forget
    their errors (a test's clean-up; a real device needs the process restarted).
    """
    _ext.set_faults([fault.strip() for fault in faults])


def pointer_device(ptr: int) -> int:
    """The index of the device owning device address ``ptr``
    (``cudaPointerGetAttributes``)."""
    index = int(_ext.device_of(ptr))
    if index < 0:
        raise ValueError(f"0x{ptr:x} is not {DEVICE_NAME} memory of this process")
    return index


def _report_open_mappings() -> None:
    """At exit, name the IPC mappings never closed: on hardware they keep exporters'
    memory resident."""
    imports = _ext.ipc_imports()
    if imports:
        pids = sorted({pid for _, _, _, pid in imports})
        print(
            f"{DEVICE_NAME} emulator: {len(imports)} IPC mapping(s) still open at exit "
            f"({sum(size for _, size, _, _ in imports)} bytes exported by pid {pids}); "
            "on a device these keep the exporters' memory resident, even after they "
            "exit. Close every opened handle.",
            file=sys.stderr,
        )


def get_device_properties(device: Any = None) -> types.SimpleNamespace:
    index = device_index(device)
    return types.SimpleNamespace(
        name=f"{DEVICE_NAME} (CPU emulator)",
        uuid=uuid.uuid5(
            uuid.NAMESPACE_URL, f"{DEVICE_NAME}-emulator/{os.uname().nodename}/{index}"
        ),
        total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    )


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


def _manual_seed(seed: int) -> None:
    # Not torch.manual_seed: that calls back into this module and recurses.
    torch.default_generator.manual_seed(seed)


def _install() -> types.ModuleType:
    if hasattr(torch, TORCH_MODULE_NAME):
        return getattr(torch, TORCH_MODULE_NAME)
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_NAME):
        raise RuntimeError(
            f"PrivateUse1 is already claimed by {current!r} in this process; the "
            f"{DEVICE_NAME} emulator cannot load beside another out-of-tree torch "
            "backend. Run emulator tests in an environment without that backend, or "
            "set TORCH_DEVICE_BACKEND_AUTOLOAD=0."
        )
    host_aliases = os.environ.get(HOST_ALIASES_ENV_VAR) != "0"
    _ext.set_host_aliases(host_aliases)
    _ext.register_hooks(int(os.environ.get(DEVICE_COUNT_ENV_VAR, "2")))
    _ext.set_latency_us(int(os.environ.get(LATENCY_ENV_VAR, "200")))
    _ext.require_thread_contexts(os.environ.get(THREAD_CONTEXTS_ENV_VAR) != "0")
    _ext.set_device(_ext.current_device())  # binds the loading thread's context
    inject_faults(*filter(None, os.environ.get(FAULTS_ENV_VAR, "").split(",")))
    module = types.ModuleType("torch.{{ cookiecutter.__torch_module_name }}", __doc__)
    members: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "init": _noop,
        "device_count": lambda: int(_ext.device_count()),
        "current_device": lambda: int(_ext.current_device()),
        "set_device": lambda device: _ext.set_device(device_index(device)),
        "synchronize": _streams.synchronize,
        "empty_cache": lambda: _ext.empty_cache(),
        "device": _streams.DeviceContext,
        "Stream": _streams.Stream,
        "Event": _streams.Event,
        "current_stream": _streams.current_stream,
        "stream": _streams.stream,
        "stream_handle": _streams.stream_handle,
        "synchronize_stream_handle": lambda handle: _ext.synchronize_handle(handle),
        "kernel_launcher": _streams.kernel_launcher,
        "memcpy_async_launcher": _streams.memcpy_async_launcher,
        "hold_stream": _streams.hold_stream,
        "get_device_properties": get_device_properties,
        "pointer_device": pointer_device,
        "kernel_address_translator": lambda: int(_ext.kernel_address_translator()),
        "host_register": lambda *args: bool(_ext.host_register(*args)),
        "host_unregister": lambda ptr: bool(_ext.host_unregister(ptr)),
        "host_is_pinned": lambda ptr, size: bool(_ext.host_is_pinned(ptr, size)),
        "host_device_pointer": lambda ptr: int(_ext.host_device_pointer(ptr)),
        "host_memory_mapped_at_same_address": not host_aliases,
        "inject_faults": inject_faults,
        "ipc_mappings": lambda: len(_ext.ipc_imports()),
        "counters": _counters.counters,
        "manual_seed": _manual_seed,
        "manual_seed_all": _manual_seed,
        "_is_in_bad_fork": lambda: False,
        "is_emulator": True,
    }
    members |= _streams.host_function_members(os.environ.get(HOST_FUNCS_ENV_VAR, ""))
    vmm = os.environ.get(VMM_ENV_VAR) == "1"
    members |= _ipc.members(os.environ.get(IPC_ENV_VAR, ""), vmm)
    for name, value in members.items():
        setattr(module, name, value)
    _record.watch(module)  # with RECORD_ENV_VAR only
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module("{{ cookiecutter.__torch_module_name }}", module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True
    )
    return module


def load() -> types.ModuleType:
    """Compile (first time only) and load the emulator, and install
    ``torch.{{ cookiecutter.__torch_module_name }}``; idempotent."""
    global _ext
    if _ext is None:
        _ext = _load_extension()
        _streams.bind(_ext)
        _ipc.bind(_ext)
        _counters.bind(_ext)
        atexit.register(_report_open_mappings)
    return _install()
