# SPDX-License-Identifier: {{ cookiecutter.license }}
"""LMCache registration for {{ cookiecutter.device_name }} devices: the ``DeviceSpec`` LMCache discovers.

``pyproject.toml`` points the ``{{ cookiecutter._entry_point_group }}`` entry point
``{{ cookiecutter.backend_name }}`` at ``{{ cookiecutter.class_prefix }}DeviceSpec``. LMCache loads it
while it builds its device registry, inside ``import lmcache``, in every process
(worker and server), constructs it with no arguments and calls ``is_available()``.

Must not import, at top level, anything from LMCache except the spec base class
(via ``_lmcache_compat``): LMCache is half-initialised at that point, and any other
import makes LMCache drop the plugin with only a warning. Ops load lazily in
``ops_cls``.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import TYPE_CHECKING

from ._lmcache_compat import PortableDeviceSpec

if TYPE_CHECKING:
{%- if cookiecutter.lmcache_driven == 'no' %}
    from ._lmcache_compat import DeviceOps
{%- else %}
    from ._lmcache_compat import BaseCacheContext, DeviceOps, MPTransferMode, PinMemoryBackend
    from .event_ipc import {{ cookiecutter.class_prefix }}EventIPCBackend
    from .ipc_wrapper import {{ cookiecutter.class_prefix }}IPCWrapper
{%- endif %}

logger = logging.getLogger(__name__)

#: ``tensor.device.type`` of your KV-cache tensors.
DEVICE_TYPE = "{{ cookiecutter.device_name }}"
#: LMCache's name for this backend: the entry-point name and the value of
#: ``LMCACHE_DEVICE_BACKEND`` that selects it.
BACKEND_NAME = "{{ cookiecutter.backend_name }}"
#: ``torch.<name>``: the device module LMCache synchronises through.
TORCH_MODULE_NAME = "{{ cookiecutter.__torch_module_name }}"
#: The module that creates ``torch.{{ cookiecutter.__torch_module_name }}`` when imported; empty if torch
#: has the device built in.
TORCH_EXTENSION_MODULE = "{{ cookiecutter.torch_extension_module }}"
#: Tests and CI set this to ``1`` to use the bundled CPU emulator of
#: ``torch.{{ cookiecutter.__torch_module_name }}`` instead (see ``emulator/``). Never set it in production.
EMULATOR_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"
EMULATOR_MODULE = "{{ cookiecutter.import_package }}.emulator"


def torch_extension_module() -> str:
    """The module ``is_available()`` imports to create ``torch.{{ cookiecutter.__torch_module_name }}``."""
    if os.environ.get(EMULATOR_ENV_VAR) == "1":
        return EMULATOR_MODULE
    return TORCH_EXTENSION_MODULE


class {{ cookiecutter.class_prefix }}DeviceSpec(PortableDeviceSpec):
    """{{ cookiecutter.device_name }} device specification for LMCache's registry{% if cookiecutter.lmcache_driven == 'no' %} (engine-driven transfer){% endif %}."""

    @property
    def device_type(self) -> str:
        return DEVICE_TYPE

    @property
    def backend_name(self) -> str:
        return BACKEND_NAME

    @property
    def torch_module_name(self) -> str:
        return TORCH_MODULE_NAME

    @property
    def ops_cls(self) -> type[DeviceOps]:
        # Lazy: device_ops imports LMCache's DeviceOps, which needs a finished
        # ``import lmcache``.
        from .device_ops import {{ cookiecutter.class_prefix }}DeviceOps

        return {{ cookiecutter.class_prefix }}DeviceOps

    def is_available(self) -> bool:
        """True when ``torch.{{ cookiecutter.__torch_module_name }}`` exists and reports a usable device.

        Failure policy: never raises. LMCache calls this for every registered
        backend, several times per process, during ``import lmcache``; an
        exception there would break LMCache for every device, so probe errors
        mean "not available" (logged at debug level for ``doctor``-style checks).
        """
        try:
            import torch

            extension = torch_extension_module()
            if extension:
                importlib.import_module(extension)
            module = getattr(torch, TORCH_MODULE_NAME, None)
            # TODO(vendor): add any cheap runtime probe your driver needs here
            # (firmware version, device visible to this process, ...).
            return bool(module is not None and module.is_available())
        except Exception as exc:  # noqa: BLE001 - see failure policy
            logger.debug("%s backend unavailable: %r", BACKEND_NAME, exc)
            return False

{%- if cookiecutter.lmcache_driven == 'no' %}
    def is_lmcache_driven_available(self) -> bool:
        """False: this backend supports engine-driven transfer only.

        LMCache-driven transfer (the server pulls KV through device IPC handles)
        needs an IPC wrapper, a cache context and an event-IPC backend, which this
        package does not provide. With False, ``auto`` resolves to engine-driven and
        an explicit ``lmcache_driven`` request fails with LMCache's ValueError.
        (lmcache 0.5.4/0.5.5 and the guide ask ``is_handle_transfer_available``,
        default True; 0.5.6 renamed it, default False. ``PortableDeviceSpec``
        answers the old name with this method.)
        """
        return False
{%- else %}
    # ---- LMCache-driven transfer: the server maps the worker's KV caches ----
    # (lmcache 0.5.4/0.5.5 and the guide ask ``is_handle_transfer_available``;
    # PortableDeviceSpec answers that name with is_lmcache_driven_available)

    _event_backend_cache: {{ cookiecutter.class_prefix }}EventIPCBackend | None = None

    def is_lmcache_driven_available(self) -> bool:
        """True: workers can hand KV caches to the server as device IPC handles.

        TODO(vendor): if IPC memory or interprocess events depend on the driver,
        firmware or container setup, probe that here (cheaply; never raise).
        """
        return True

    def default_mp_transfer_mode(self) -> MPTransferMode:
        """What transfer mode ``auto`` means for this device (lmcache 0.5.6+).

        lmcache 0.5.4/0.5.5 never ask: there, ``auto`` is engine-driven for every
        device but CUDA, and workers must request ``lmcache_driven`` explicitly.
{% if cookiecutter.lmcache_driven == 'opt_in' %}
        Engine-driven: LMCache-driven must be asked for explicitly
        (``LMCACHE_MP_TRANSFER_MODE=lmcache_driven`` or the connector's
        ``lmcache.mp.mp_transfer_mode``), as LMCache does for CPU and MUSA. Choose
        this while the IPC path is new on your hardware: deployments keep the
        simpler path until they opt in.
        """
        from ._lmcache_compat import MPTransferMode

        return MPTransferMode.ENGINE_DRIVEN
{%- else %}
        LMCache-driven, as LMCache does for CUDA and NPU: the server pulls KV
        through IPC handles without the worker's gather/scatter copies. Workers
        can still ask for ``engine_driven`` explicitly.
        """
        from ._lmcache_compat import MPTransferMode

        return MPTransferMode.LMCACHE_DRIVEN
{%- endif %}

    @property
    def ipc_wrapper_cls(self) -> type[{{ cookiecutter.class_prefix }}IPCWrapper]:
        from .ipc_wrapper import {{ cookiecutter.class_prefix }}IPCWrapper

        return {{ cookiecutter.class_prefix }}IPCWrapper

    @property
    def event_ipc_backend(self) -> {{ cookiecutter.class_prefix }}EventIPCBackend:
        """The event-IPC backend, created once: request futures query it repeatedly."""
        backend = self._event_backend_cache
        if backend is None:
            from .event_ipc import {{ cookiecutter.class_prefix }}EventIPCBackend

            backend = {{ cookiecutter.class_prefix }}EventIPCBackend()
            self._event_backend_cache = backend
        return backend

    @property
    def pin_memory_backend(self) -> type[PinMemoryBackend]:
        from .pin_memory import {{ cookiecutter.class_prefix }}PinMemoryBackend

        return {{ cookiecutter.class_prefix }}PinMemoryBackend

    def create_cache_context(self, *args: object, **kwargs: object) -> BaseCacheContext:
        """The server's view of one worker's KV caches (LMCache passes seven positional arguments)."""
        from .cache_context import {{ cookiecutter.class_prefix }}CacheContext

        return {{ cookiecutter.class_prefix }}CacheContext(*args, **kwargs)  # type: ignore[arg-type]
{%- endif %}
