# SPDX-License-Identifier: Apache-2.0
"""The IPC wrapper through LMCache's codecs: the descriptor a worker sends, as the
server decodes it.

Why a module of its own: the wrapper's mappings and views are ``ipc_wrapper.py``
(one screen each); these are the wire: LMCache's own Serialize/Deserialize, the
msgpack codec of the message queue, the gRPC codec (lmcache 0.5.6+), and a corrupted
descriptor.

Imports torch (through ``support``); lmcache only inside tests.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any

# Third Party
import pytest
import torch

# First Party
from lmcache_device_kit.conformance.base import ConformanceTests
from lmcache_device_kit.conformance.ipc_wrapper import codec, kv_caches
from lmcache_device_kit.conformance.support import on_emulator, open_mappings


class BaseIPCWrapperCodecTests(ConformanceTests):
    """A wrapper survives every codec LMCache sends it through; a corrupted one is
    refused."""

    requires = frozenset({"lmcache_driven"})

    def test_wrapper_serializes_through_lmcaches_codec_and_back(
        self, lmcache_driven: Any
    ) -> None:
        """DeviceIPCWrapper.Serialize -> Deserialize gives an equal wrapper of the
        plugin's class."""
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(kv_caches()["layer.0"])
        restored = codec().Deserialize(codec().Serialize(wrapper))
        assert type(restored) is type(wrapper) and restored == wrapper

    def test_a_corrupted_descriptor_is_refused_and_maps_nothing(
        self, lmcache_driven: Any
    ) -> None:
        """Truncated payloads fail to decode; a wrapper whose handle is garbage fails
        to map, with nothing left open."""
        payload = codec().Serialize(
            lmcache_driven.ipc_wrapper_cls.wrap(kv_caches()["layer.0"])
        )
        with pytest.raises(Exception):  # noqa: B017 - the codec's error differs by release
            codec().Deserialize(payload[: len(payload) // 2])
        wrapper = codec().Deserialize(payload)
        wrapper.planes = (wrapper.planes[0]._replace(handle=b"\x00" * 3),)
        mappings = open_mappings() if on_emulator() else 0
        with pytest.raises((ValueError, RuntimeError)):
            wrapper.to_tensor()
        if on_emulator():
            assert open_mappings() == mappings
        wrapper.close()

    def test_a_workers_kv_cache_list_crosses_lmcaches_message_queue_codec(
        self, lmcache_driven: Any
    ) -> None:
        """REGISTER_KV_CACHE's payload (zmq transport): the msgpack codec LMCache uses
        returns equal, mappable wrappers."""
        # First Party
        from lmcache.v1.multiprocess.custom_types import (
            KVCache,
            get_customized_decoder,
            get_customized_encoder,
        )

        source = kv_caches(seed=14)
        wrap = lmcache_driven.ipc_wrapper_cls.wrap
        wrappers = [wrap(tensor) for tensor in source.values()]
        decoded = get_customized_decoder(KVCache).decode(
            get_customized_encoder(KVCache).encode(wrappers)
        )
        assert [type(w) for w in decoded] == [type(w) for w in wrappers]
        assert decoded == wrappers
        for wrapper, tensor in zip(decoded, source.values(), strict=True):
            assert torch.equal(wrapper.to_tensor().cpu(), tensor.cpu())
            wrapper.close()

    def test_a_wrapper_crosses_lmcaches_grpc_codec(self, lmcache_driven: Any) -> None:
        """The gRPC transport (lmcache 0.5.6+) carries the wrapper in a protobuf
        message: it comes back equal and maps."""
        try:
            # First Party
            from lmcache.v1.multiprocess.transport.grpc_impl._proto_gen import (
                common_pb2,
            )
            from lmcache.v1.multiprocess.transport.grpc_impl.codecs.common import (
                get_message_codecs,
            )
        except ModuleNotFoundError as missing:
            if missing.name is not None and missing.name.startswith("lmcache"):
                pytest.skip(
                    f"this lmcache release has no gRPC transport ({missing.name}); "
                    "it arrived in 0.5.6"
                )
            raise
        tensor = kv_caches(seed=15)["layer.0"]
        wrapper = lmcache_driven.ipc_wrapper_cls.wrap(tensor)
        (message_codec,) = get_message_codecs()
        message = common_pb2.DeviceIpcWrapper()
        message_codec.writer(message, wrapper)
        restored = message_codec.reader(
            common_pb2.DeviceIpcWrapper.FromString(message.SerializeToString())
        )
        assert type(restored) is type(wrapper) and restored == wrapper
        assert torch.equal(restored.to_tensor().cpu(), tensor.cpu())
        restored.close()
