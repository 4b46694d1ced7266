# SPDX-License-Identifier: {{ cookiecutter.license }}
"""The engine-driven-only capability surface, and how LMCache routes around it.

This backend offers no LMCache-driven transfer (no IPC wrapper, event IPC backend,
cache context or pin backend), so ``auto`` must resolve to engine-driven and an
explicit ``lmcache_driven`` request must fail with LMCache's reason, as
``supa/test_supa_support.py`` holds for SUPA.
"""

# Standard
from unittest.mock import MagicMock

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.multiprocess.transfer_context import worker_transfer
from lmcache.v1.multiprocess.transfer_mode import MPTransferMode
from lmcache.v1.platform import resolve_kv_wrapper_factory
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }} import (
    {{ cookiecutter.class_prefix }}DeviceSpec,
)
from lmcache.v1.platform.devices.{{ cookiecutter.backend_name }}.names import (
    DEVICE_TYPE,
    TORCH_MODULE_NAME,
)

pytestmark = pytest.mark.no_shared_allocator

requires_device = pytest.mark.skipif(
    not {{ cookiecutter.class_prefix }}DeviceSpec().is_available(),
    reason=f"requires torch.{TORCH_MODULE_NAME} and a {DEVICE_TYPE} device",
)


def test_lmcache_driven_is_unavailable() -> None:
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    assert spec.is_lmcache_driven_available() is False
    assert spec.default_mp_transfer_mode() == MPTransferMode.ENGINE_DRIVEN


def test_no_ipc_wrapper_and_no_event_backend() -> None:
    spec = {{ cookiecutter.class_prefix }}DeviceSpec()
    assert spec.ipc_wrapper_cls is None
    assert spec.event_ipc_backend is None
    with pytest.raises(ValueError, match="No KV-cache wrapper factory"):
        resolve_kv_wrapper_factory(DEVICE_TYPE)


def test_create_cache_context_is_not_implemented() -> None:
    """The cache context is LMCache-driven only."""
    with pytest.raises(NotImplementedError):
        {{ cookiecutter.class_prefix }}DeviceSpec().create_cache_context()


def test_pin_memory_falls_back_to_the_default_backend() -> None:
    assert {{ cookiecutter.class_prefix }}DeviceSpec().pin_memory_backend is None


@requires_device
def test_auto_routes_to_engine_driven_and_lmcache_driven_is_refused() -> None:
    kv = {"0": torch.zeros(2, 4, 2, 4, 8, device=DEVICE_TYPE)}
    client = MagicMock()
    context = worker_transfer.create_transfer_context(
        kv, instance_id=1, req_client=client, mode="auto"
    )
    assert not isinstance(context, worker_transfer.LMCacheDrivenTransferContext)
    with pytest.raises(ValueError, match="'lmcache_driven' is not"):
        worker_transfer.create_transfer_context(
            kv, instance_id=1, req_client=client, mode="lmcache_driven"
        )
