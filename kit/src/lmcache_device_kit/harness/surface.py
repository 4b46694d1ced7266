# SPDX-License-Identifier: Apache-2.0
"""What the harness takes from LMCache, declared once, as data.

The harness drives LMCache as vLLM and an operator do: a backend's test suite's
worker ranks, scheduler and ``lmcache server`` processes, and ``doctor --server``.
LMCache never loads it, but when LMCache moves what it uses, every end-to-end
test fails as if the plugin had broken. So it is declared as a plugin's own
interface is (the release shims' ``compat/surface.py`` and ``declared.py``: the same
formats and release bounds), checked by ``doctor --api`` and named as the
harness's in the canary's report. How the harness calls LMCache on each release is
``lmcache_calls.py``.

Must import nothing: it is read before LMCache is importable, and by tools that
only inspect it.
"""

# Future
from __future__ import annotations

#: (module, attribute or None for the module itself, first release, last release)
Location = tuple[str, str | None, str | None, str | None]
#: How a callable is called: (positional arguments: their names as LMCache declares
#: them, or only how many; keyword arguments; first release; last release).
Shape = tuple[tuple[str, ...] | int, tuple[str, ...], str | None, str | None]


def always(
    positional: tuple[str, ...] | int, keywords: tuple[str, ...] = ()
) -> tuple[Shape, ...]:
    """A call shape every release takes."""
    return ((positional, keywords, None, None),)


ADAPTER = "lmcache.integration.vllm.vllm_multi_process_adapter"
TRANSFER = "lmcache.v1.multiprocess.transfer_context"
TYPES = "lmcache.v1.multiprocess.custom_types"
GRPC = "lmcache.v1.multiprocess.transport.grpc_impl"

#: Where each name lives, newest release first; the first location that exists wins.
DETECT = "lmcache.v1.platform._device_detect"
HARNESS_NAMES: dict[str, tuple[Location, ...]] = {
    # LMCache's device selection, which a backend that extends a built-in meets
    # (conformance/builtin_extension.py): its registries and how it picks a backend.
    "backend_registry": ((DETECT, "_build_backend_registry", None, None),),
    "device_registry_by_type": ((DETECT, "_build_device_registry", None, None),),
    "resolve_device_type": ((DETECT, "_resolve_device_type_candidates", None, None),),
    # vLLM's side of the multiprocess protocol: worker ranks, the scheduler, requests.
    "vllm_multi_process_adapter": ((ADAPTER, None, None, None),),
    "LMCacheMPWorkerAdapter": ((ADAPTER, "LMCacheMPWorkerAdapter", None, None),),
    "LMCacheMPSchedulerAdapter": ((ADAPTER, "LMCacheMPSchedulerAdapter", None, None),),
    "ParallelStrategy": ((ADAPTER, "ParallelStrategy", None, None),),
    "LoadStoreOp": ((ADAPTER, "LoadStoreOp", None, None),),
    # The ``lmcache.mp.*`` keys of an adapter's extra_config (CONFIG_KEYS).
    "ExtraConfigDefault": ((ADAPTER, "ExtraConfigDefault", None, None),),
    # 0.5.7 passes token ids packed (LoadStoreOp.token_bytes, lookups), not as lists.
    "pack_token_ids": (
        ("lmcache.v1.multiprocess.token_codec", "pack_token_ids", "0.5.7", None),
    ),
    "EngineGroupInfo": (
        ("lmcache.v1.multiprocess.group_view", "EngineGroupInfo", None, None),
    ),
    # An engine-driven worker's transport: the server's SHM pool, or the messages
    # (pickled up to 0.5.6, LMCache's own tensor encoding from 0.5.7).
    "EngineDrivenContextShm": (
        (f"{TRANSFER}.shm", "EngineDrivenContextShm", None, None),
    ),
    "EngineDrivenContextInline": (
        (f"{TRANSFER}.inline", "EngineDrivenContextInline", "0.5.7", None),
    ),
    "EngineDrivenContextPickle": (
        (f"{TRANSFER}.pickle", "EngineDrivenContextPickle", None, "0.5.6"),
    ),
    # The server's KV-event replay buffers (0.5.6+; lmcache_calls.kv_events_off).
    "KVEventModule": (
        ("lmcache.v1.multiprocess.modules.kv_events", "KVEventModule", "0.5.6", None),
    ),
    # The server's command line (SERVER_FLAGS).
    "ServerCommand": (("lmcache.cli.commands.server", "ServerCommand", None, None),),
    # What the conformance tests call directly, as LMCache's server and workers do.
    "get_device_spec": (("lmcache.v1.platform", "get_device_spec", None, None),),
    "wrap_kv_caches": (("lmcache.v1.platform.kv_wrap", "wrap_kv_caches", None, None),),
    # 0.5.6+: LMCache wraps a layer by get_device, so a worker may register a layer as
    # its planes ((K, V) tuples); 0.5.4/0.5.5 read tensor.device (tensors only).
    "wraps_plane_sequences": (
        ("lmcache.v1.platform.kv_wrap", "get_device", "0.5.6", None),
    ),
    "create_cache_context": (
        ("lmcache.v1.platform.cache_context", "create_cache_context", None, None),
    ),
    # The conformance tests find the backend's own cache context class by it.
    "BaseCacheContext": (
        ("lmcache.v1.platform.base.cache_context", "BaseCacheContext", None, None),
    ),
    "create_transfer_context": (
        (f"{TRANSFER}.worker_transfer", "create_transfer_context", None, None),
    ),
    "gather_paged_kv_to_cpu": (
        (f"{TRANSFER}.base", "gather_paged_kv_to_cpu", None, None),
    ),
    "scatter_cpu_to_paged_kv": (
        (f"{TRANSFER}.base", "scatter_cpu_to_paged_kv", None, None),
    ),
    # Which EngineKVFormat a test's KV caches are (conformance/native_contract.py).
    "detect_format": (
        ("lmcache.v1.gpu_connector.kv_format.detection", "detect_format", None, None),
    ),
    "EngineType": (("lmcache.utils", "EngineType", None, None),),
    "detect_block_transfer_accepts_tensor": (
        (f"{TRANSFER}.base", "_detect_block_transfer_accepts_tensor", None, None),
    ),
    "KVCache": ((TYPES, "KVCache", None, None),),
    "get_customized_encoder": ((TYPES, "get_customized_encoder", None, None),),
    "get_customized_decoder": ((TYPES, "get_customized_decoder", None, None),),
    "grpc_common_pb2": ((f"{GRPC}._proto_gen.common_pb2", None, "0.5.5", None),),
    "get_message_codecs": (
        (f"{GRPC}.codecs.common", "get_message_codecs", "0.5.6", None),
    ),
    # What the ports of LMCache's per-device tests (conformance/ports) use besides.
    "resolve_kv_wrapper_factory": (
        ("lmcache.v1.platform", "resolve_kv_wrapper_factory", None, None),
    ),
    "EventIPCBackend": (
        ("lmcache.v1.platform.base.event_ipc", "EventIPCBackend", None, None),
    ),
    "distributed_config": (("lmcache.v1.distributed.config", None, None, None),),
    "L1MemoryManagerConfig": (
        ("lmcache.v1.distributed.config", "L1MemoryManagerConfig", None, None),
    ),
    "lmcache_native": (("lmcache.lmcache_native", None, None, None),),
    # An LMCache-driven plugin's own surface declares these too; an engine-driven one's
    # does not, and the ports are the kit's (0.5.4 to 0.5.7rc2 hold both).
    "KVLayerGroupsManager": (
        ("lmcache.v1.kv_layer_groups", "KVLayerGroupsManager", None, None),
    ),
    "get_group_data_ptrs": (
        ("lmcache.v1.gpu_connector.utils", "get_group_data_ptrs", None, None),
    ),
}

#: How the harness calls LMCache, newest release first: a class or method whose
#: fields or parameters moved is a call that no longer binds.
HARNESS_CALLS: dict[str, tuple[Shape, ...]] = {
    "LoadStoreOp": (
        ((), ("token_bytes", "block_ids", "start", "end"), "0.5.7", None),
        ((), ("token_ids", "block_ids", "start", "end"), None, "0.5.6"),
    ),
    "LMCacheMPSchedulerAdapter.maybe_submit_lookup_request": (
        (("self", "request_id", "packed_token_ids"), (), "0.5.7", None),
        (("self", "request_id", "token_ids"), (), None, "0.5.6"),
    ),
    "LMCacheMPSchedulerAdapter.free_lookup_locks": (
        (("self", "packed_token_ids", "start", "end", "request_id"), (), "0.5.7", None),
        (("self", "token_ids", "start", "end", "request_id"), (), None, "0.5.6"),
    ),
    "pack_token_ids": ((("token_ids",), (), "0.5.7", None),),
    "LMCacheMPSchedulerAdapter.check_lookup_result": always(("self", "request_id")),
    "LMCacheMPSchedulerAdapter.end_session": always(("self", "request_id")),
    "LMCacheMPSchedulerAdapter": always(5, ("extra_config",)),
    "LMCacheMPWorkerAdapter": always(5, ("extra_config",)),
    "LMCacheMPWorkerAdapter.submit_store_request": always(
        ("self", "request_id", "op", "event")
    ),
    "LMCacheMPWorkerAdapter.submit_retrieve_request": always(
        ("self", "request_id", "op", "event")
    ),
    # vLLM's connector polls it every engine step (lmcache_calls.engine_step).
    "LMCacheMPWorkerAdapter.get_finished": always(
        ("self", "finished_req_ids_from_engine")
    ),
    "ParallelStrategy": always(
        0,
        ("mla_only", "vllm_world_size", "vllm_worker_id", "tp_size", "pp_size")
        + ("n_servers",),
    ),
    "EngineGroupInfo": always(2, ("tokens_per_block", "sw_size_tokens")),
    "create_cache_context": always(
        ("kv_caches", "lmcache_tokens_per_chunk", "layout_hints"),
        ("engine_group_infos", "separate_object_groups"),
    ),
    "wrap_kv_caches": always(("kv_caches",)),
}

#: The ``lmcache server`` flags the suite passes (``servers.py`` refuses any other),
#: with the releases each holds for: (first, last).
SERVER_FLAGS: dict[str, tuple[str | None, str | None]] = {
    flag: (None, None)
    for flag in (
        "--host",
        "--port",
        "--http-host",
        "--http-port",
        "--l1-size-gb",
        "--l1-init-size-gb",
        "--eviction-policy",
        "--chunk-size",
        "--max-workers",
        "--supported-transfer-mode",
        "--shm-name",
        "--no-l1-use-lazy",
        "--separate-object-groups",
        # A cluster (conformance/cluster.py): servers sharing one L2, each adapter a
        # repeated ``--l2-adapter '<JSON>'`` (lmcache/v1/distributed/l2_adapters/
        # config.py), and for P2P between servers a coordinator and a channel.
        "--l2-adapter",
        "--coordinator-url",
        "--coordinator-advertise-ip",
        "--coordinator-heartbeat-interval",
        "--p2p-advertise-url",
        "--p2p-lookup-timeout",
        "--p2p-transfer-engine",
    )
}
# The soak turns the KV-event replay buffers off where a release has them
# (lmcache_calls.kv_events_off).
SERVER_FLAGS["--kv-event-log-size"] = ("0.5.6", None)

#: The adapters' ``extra_config`` keys the harness sets (an unknown key is ignored,
#: silently: a timeout would fall back to LMCache's 300 s default), with the releases
#: each holds for: (first, last).
CONFIG_KEYS: dict[str, tuple[str | None, str | None]] = {
    "lmcache.mp.mq_timeout": (None, None),
    "lmcache.mp.heartbeat_interval": (None, None),
    "lmcache.mp.mp_transfer_mode": (None, None),
}

#: Harness code that serves older releases only: what, where, the last release.
HARNESS_SHIMS: dict[str, tuple[str, str]] = {
    "token ids as lists": ("lmcache_calls.packed_tokens", "0.5.6"),
    "register_kv_caches without layout hints": (
        "lmcache_calls.register_kv_caches",
        "0.5.4",
    ),
    "the connector records the worker's event": (
        "lmcache_calls.recorded_event",
        "0.5.4",
    ),
}
