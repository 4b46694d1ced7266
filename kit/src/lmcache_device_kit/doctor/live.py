# SPDX-License-Identifier: Apache-2.0
"""The doctor's live check: a small KV cache stored, found and retrieved via a server.

Why a module of its own: it drives LMCache's vLLM adapters the way a worker and
a scheduler do, with a hard deadline so that a silent server cannot hang the
doctor (``--server``), calling them as the tests' harness does
(``lmcache_device_kit.harness.lmcache_calls``). Imported only after ``import
lmcache``; imports LMCache, torch and zmq inside the functions.
"""

# Future
from __future__ import annotations

# Standard
from typing import Any
import io
import threading
import time
import uuid

# Local
from ..backend import current
from .paths import path_problem, slow_path_problem
from .report import Report

BLOCK_SIZE, LAYERS, HEADS, HEAD_SIZE = 16, 2, 2, 32


def live_round_trip(
    url: str,
    mode: str,
    tokens: int,
    timeout: float,
    log: io.StringIO,
    opened: list[Any],
    path_asked: str = "",
) -> tuple[bool, str, str]:
    """Store, look up and retrieve ``tokens`` tokens through ``url``; (ok, detail,
    fix). Every adapter it creates is appended to ``opened`` at once, for the caller
    to shut down however this ends (``check_server``)."""
    # Third Party
    import torch
    import zmq

    # First Party
    from lmcache.integration.vllm.vllm_multi_process_adapter import (
        LMCacheMPSchedulerAdapter,
        LMCacheMPWorkerAdapter,
        ParallelStrategy,
    )

    backend = current()
    # Local
    from ..harness.lmcache_calls import (
        engine_sub_path,
        load_store_op,
        packed_tokens,
        recorded_event,
        register_kv_caches,
    )

    if tokens % BLOCK_SIZE:
        return (
            False,
            f"--tokens {tokens} is not a multiple of the block size {BLOCK_SIZE}",
            "pass --tokens 256",
        )
    used = tokens // BLOCK_SIZE
    device_type = backend.device_type
    device = torch.device(device_type, 0)
    generator = torch.Generator().manual_seed(1234)
    shape = (2, 2 * used + 2, BLOCK_SIZE, HEADS, HEAD_SIZE)
    expected = {
        f"layer.{i}": torch.randn(shape, generator=generator).to(torch.float16)
        for i in range(LAYERS)
    }
    config = {"lmcache.mp.mq_timeout": timeout, "lmcache.mp.heartbeat_interval": 1.0}
    strategy = ParallelStrategy(
        mla_only=False,
        vllm_world_size=1,
        vllm_worker_id=0,
        tp_size=1,
        pp_size=1,
        n_servers=1,
    )
    model = f"{backend.package}-doctor-{uuid.uuid4().hex[:8]}"
    context: Any = zmq.Context.instance()
    source_blocks, target_blocks = (
        list(range(used)),
        list(range(2 * used + 1, used + 1, -1)),
    )
    # one registered cache, as a vLLM worker has
    kv = {name: t.to(device) for name, t in expected.items()}
    for values in kv.values():
        values[:, target_blocks] = 0  # the retrieve must fill these from the server
    worker = LMCacheMPWorkerAdapter(
        url,
        context,
        model,
        BLOCK_SIZE,
        strategy,
        extra_config={**config, "lmcache.mp.mp_transfer_mode": mode},
    )
    opened.append(worker)
    register_kv_caches(worker, kv)
    scheduler = LMCacheMPSchedulerAdapter(
        [url], context, model, BLOCK_SIZE, strategy, extra_config=config
    )
    opened.append(scheduler)
    prompt = list(range(11, 11 + tokens))
    packed = packed_tokens(prompt)

    store_id = f"doctor-store-{uuid.uuid4().hex}"
    op = load_store_op(prompt, [source_blocks], 0, tokens)
    worker.submit_store_request(store_id, op, recorded_event(worker, device_type))
    if not worker.store_futures[store_id].result(timeout=timeout):
        return False, "the server refused the store", "read the server's log"
    lookup_id, hit, deadline = "", 0, time.monotonic() + timeout
    # LMCache-driven stores commit asynchronously
    while hit < tokens and time.monotonic() < deadline:
        lookup_id = f"doctor-lookup-{uuid.uuid4().hex}"
        scheduler.maybe_submit_lookup_request(lookup_id, packed)
        while (
            result := scheduler.check_lookup_result(lookup_id)
        ) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        hit = int(result or 0)
        if hit < tokens:
            if hit:
                scheduler.free_lookup_locks(packed, 0, hit, lookup_id)
            scheduler.end_session(lookup_id)
            time.sleep(0.05)
    if hit < tokens:
        return (
            False,
            f"the store reported success but a lookup finds {hit} of {tokens} tokens",
            "the server stored nothing: its L1 may be full (--l1-size-gb), "
            "or --tokens is not a multiple of its --chunk-size",
        )
    op = load_store_op(prompt, [target_blocks], 0, tokens)
    worker.submit_retrieve_request(lookup_id, op, recorded_event(worker, device_type))
    future, _ = worker.retrieve_futures[lookup_id]
    retrieved = future.result(timeout=timeout)
    scheduler.end_session(lookup_id)
    getattr(torch, backend.torch_module_name).synchronize()
    mismatched = 0
    for name, values in expected.items():
        got = kv[name][:, target_blocks].cpu().view(torch.uint8)
        mismatched += int((got != values[:, source_blocks].view(torch.uint8)).sum())
    context_name = type(worker.transfer_ctx).__name__
    if "LMCacheDriven" in context_name:
        path = "lmcache-driven"
    else:
        path = f"engine-driven {engine_sub_path(worker.transfer_ctx)}"
    nbytes = sum(
        t[:, source_blocks].numel() * t.element_size() for t in expected.values()
    )
    if not retrieved or mismatched:
        return (
            False,
            f"{path}: retrieve gave {mismatched} wrong bytes of {nbytes}",
            "run the conformance tests",
        )
    wrong, fix = path_problem(path, path_asked or path)
    if wrong:
        return False, wrong, fix
    slow = slow_path_problem(path)
    if slow:
        return (
            False,
            f"{path}: identical bytes, but on a slow path: {slow}",
            "run with --verbose: the plugin's slow-path lines say what to fix",
        )
    return (
        True,
        f"{path}: stored, found and retrieved {tokens} tokens "
        f"({nbytes} bytes), identical",
        "",
    )


def check_server(
    report: Report,
    url: str,
    mode: str,
    tokens: int,
    timeout: float,
    log: io.StringIO,
    path_asked: str = "",
) -> bool:
    """Run the round trip with a hard deadline: a silent server must not hang the
    doctor. The outcome is kept before the adapters are shut down (a worker's
    shutdown waits up to ``timeout`` for a silent server), and they are shut down
    whichever way the round trip ended."""
    outcome: list[tuple[bool, str, str]] = []
    opened: list[Any] = []

    def run() -> None:
        try:
            outcome.append(
                live_round_trip(url, mode, tokens, timeout, log, opened, path_asked)
            )
        except Exception as exc:  # noqa: BLE001
            outcome.append((False, f"{type(exc).__name__}: {exc}", ""))
        finally:
            shut_down(opened, log)

    thread = threading.Thread(target=run, name="doctor-live-check", daemon=True)
    thread.start()
    thread.join(3 * timeout + 5)
    if outcome and outcome[0][0]:
        return report.add(f"server {url}", True, outcome[0][1])
    detail = outcome[0][1] if outcome else f"no answer within {3 * timeout + 5:.0f} s"
    fix = (outcome[0][2] if outcome else "") or (
        f"is an lmcache server listening at {url}? If it is, it may accept only "
        "the other transfer mode (LMCache then just times out): start it with "
        "--supported-transfer-mode auto, or run the doctor with "
        f"--mode {'lmcache_driven' if mode == 'engine_driven' else 'engine_driven'}"
    )
    return report.add(f"server {url}", False, f"{mode} worker: {detail}", fix)


def shut_down(adapters: list[Any], log: io.StringIO) -> None:
    """Shut the adapters down in the order they were opened (their heartbeats,
    sockets and registered caches); one that raises does not keep the rest open."""
    for adapter in adapters:
        try:
            adapter.shutdown()
        except Exception as exc:  # noqa: BLE001 - logged: the report has the outcome
            log.write(f"doctor: {type(adapter).__name__}.shutdown() raised {exc!r}\n")
