# SPDX-License-Identifier: Apache-2.0
"""LMCache's NPU IPC-wrapper tests, ported to this plugin's wrapper.

Source: LMCache 0.5.6 tests/v1/platform/devices/npu/test_npu_ipc_wrapper.py. The NPU
wrapper aggregates planes: a layer registered as a tensor, or as a tuple of planes
(vLLM-Ascend's MLA and DSA caches), is one wrapper that restores the form it was
registered in. The originals fake ``_share_npu_`` on CPU tensors and hand-build
wrappers from plane records; here the plugin's wrapper wraps real device tensors.

Departures (each also in README.md beside this module):
- Plane records (``_plane_records``, ``_bare``) are NPU internals: what they encode
  is observed instead, through ``to_tensor()`` (planes restored, in order, with their
  shape, dtype and bytes) and equality.
- ``shared_ptrs == [plane.data_ptr() ...]`` (the fake storage saw each plane)
  becomes: each restored plane holds that plane's bytes.
- ``match="at least one plane"``: the NPU wording; only ValueError is required.
- Hand-built wrappers that differ in one record become wrappers of different
  tensors; the other device UUID is set on a copy.
- The spawn round trip runs in a process forked from the suite's (``run_python``),
  with LMCache's message-queue codec as in the original.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import copy
import json

# Third Party
import pytest
import torch

# First Party
from lmcache.v1.platform.base.ipc_wrapper import DeviceIPCWrapper
from lmcache_device_kit.conformance.ports.common import (
    PortTests,
    device_type,
    plugin_class,
    runtime_name,
)
from lmcache_device_kit.conformance.support import run_python

#: Large enough to be exportable (64 KiB and more).
PLANE = (64, 64, 1, 4)


def planes(count: int, first: float = 1.0) -> tuple[torch.Tensor, ...]:
    return tuple(
        torch.full(PLANE, first + index, dtype=torch.float32, device=device_type())
        for index in range(count)
    )


def restored(wrapper):
    """The wrapper as the server gets it: through LMCache's codec."""
    return DeviceIPCWrapper.Deserialize(DeviceIPCWrapper.Serialize(wrapper))


class BaseNpuIpcWrapperTests(PortTests):
    """LMCache's npu/test_npu_ipc_wrapper.py against the plugin's IPC wrapper."""

    def test_device_spec_binds_the_plugins_ipc_wrapper(
        self, lmcache_driven: Any
    ) -> None:
        cls = lmcache_driven.ipc_wrapper_cls
        assert cls is plugin_class("ipc_wrapper", "IPCWrapper")
        assert cls.device_type == device_type()
        assert issubclass(cls, DeviceIPCWrapper)

    @pytest.mark.parametrize("n_planes", [1, 2, 3], ids=["bare", "kv", "dsa"])
    def test_wrap_keeps_one_plane_per_registered_plane_in_order(
        self, lmcache_driven: Any, n_planes: int
    ) -> None:
        values = planes(n_planes)
        value = values[0] if n_planes == 1 else values
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(value)

        assert wrapper.device_uuid == type(wrapper)._get_device_uuid(0)
        back = restored(wrapper).to_tensor()
        got = (back,) if isinstance(back, torch.Tensor) else tuple(back)
        assert len(got) == n_planes
        assert [tuple(p.shape) for p in got] == [PLANE] * n_planes
        assert [p.dtype for p in got] == [torch.float32] * n_planes
        for plane, original in zip(got, values, strict=True):
            assert torch.equal(plane.cpu(), original.cpu())

    def test_wrap_rejects_an_empty_plane_sequence(self, lmcache_driven: Any) -> None:
        with pytest.raises(ValueError):
            lmcache_driven.ipc_wrapper_cls.wrap(())

    def test_equality_compares_what_is_wrapped(self, lmcache_driven: Any) -> None:
        cls = lmcache_driven.ipc_wrapper_cls
        one, two = planes(2)
        a = cls.wrap(one)
        same = cls.wrap(one)
        other = cls.wrap(two)
        different_uuid = copy.copy(same)
        different_uuid.device_uuid = "another-device"

        assert a == same
        assert a != other
        assert a != different_uuid
        assert a != "not-a-wrapper"
        assert hash(a) == hash(same)

    def test_wire_round_trip_preserves_the_wrapper(self, lmcache_driven: Any) -> None:
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(planes(1)[0])

        back = restored(wrapper)

        assert isinstance(back, lmcache_driven.ipc_wrapper_cls)
        assert back == wrapper
        assert back.device_uuid == wrapper.device_uuid

    def test_bare_and_one_tuple_registrations_map_the_same_memory_in_their_own_form(
        self, lmcache_driven: Any
    ) -> None:
        """test_wrap_records_registration_form,
        test_to_tensor_restores_registration_form"""
        cls = lmcache_driven.ipc_wrapper_cls
        (tensor,) = planes(1)

        out_bare = cls.wrap(tensor).to_tensor()
        out_tupled = cls.wrap((tensor,)).to_tensor()

        assert isinstance(out_bare, torch.Tensor)
        assert isinstance(out_tupled, tuple)
        assert len(out_tupled) == 1
        assert isinstance(out_tupled[0], torch.Tensor)
        assert tuple(out_bare.shape) == PLANE
        assert tuple(out_tupled[0].shape) == PLANE
        assert out_bare.data_ptr() == out_tupled[0].data_ptr()

    def test_equality_distinguishes_the_registration_form(
        self, lmcache_driven: Any
    ) -> None:
        cls = lmcache_driven.ipc_wrapper_cls
        (tensor,) = planes(1)
        bare = cls.wrap(tensor)
        tupled = cls.wrap((tensor,))
        same_bare = cls.wrap(tensor)

        assert bare != tupled
        assert bare == same_bare
        assert hash(bare) != hash(tupled)

    def test_wire_round_trip_preserves_the_registration_form(
        self, lmcache_driven: Any
    ) -> None:
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(planes(1))

        back = restored(wrapper)

        assert back == wrapper
        assert isinstance(back, lmcache_driven.ipc_wrapper_cls)
        assert isinstance(back.to_tensor(), tuple)

    def test_another_process_restores_each_registration_form(
        self, lmcache_driven: Any
    ) -> None:
        """test_multiprocess_roundtrip_preserves_registration_form"""
        # First Party
        from lmcache.v1.multiprocess.custom_types import KVCache, get_customized_encoder

        cls = lmcache_driven.ipc_wrapper_cls
        bare = torch.full(PLANE, 1.0, dtype=torch.float32, device=device_type())
        single = torch.full(PLANE, 2.0, dtype=torch.float32, device=device_type())
        # Read the sums first: the worker adds 1 to every plane through the mapping.
        bare_sum = float(bare.sum().cpu().item())
        single_sum = float(single.sum().cpu().item())
        encoded = get_customized_encoder(KVCache).encode(
            [cls.wrap(bare), cls.wrap((single,))]
        )
        done = run_python(
            f"""
import json, lmcache, torch
from lmcache.v1.multiprocess.custom_types import KVCache, get_customized_decoder
checksums, forms = [], []
decoder = get_customized_decoder(KVCache)
for wrapper in decoder.decode(bytes.fromhex("{encoded.hex()}")):
    value = wrapper.to_tensor()
    forms.append(isinstance(value, torch.Tensor))
    planes = (value,) if isinstance(value, torch.Tensor) else value
    checksums.append(float(sum(p.sum().cpu().item() for p in planes)))
    for plane in planes:
        plane.add_(1)
    torch.{runtime_name()}.synchronize()
    wrapper.close()
print(json.dumps([forms, checksums]))
"""
        )
        assert done.returncode == 0, f"worker error: {done.stderr[-3000:]}"
        forms, checksums = json.loads(done.stdout.strip().splitlines()[-1])
        assert forms == [True, False], f"restored forms mismatch: {forms}"
        assert abs(checksums[0] - bare_sum) < 1e-5
        assert abs(checksums[1] - single_sum) < 1e-5
