# SPDX-License-Identifier: {{ cookiecutter.license }}
"""``{{ cookiecutter.import_package | replace('_', '-') }}-doctor`` / ``python -m {{ cookiecutter.import_package }}.doctor``: the guide's debugging checklist, run for you.

Prints one line per check, ``✓`` or ``✗``, and for every ``✗`` the fix. With
``--server tcp://HOST:PORT`` it also stores, looks up and retrieves a small KV
cache through that running ``lmcache server`` and compares the bytes. ``--json``
prints the same results for machines. Exit status 0 when every check passes,
1 otherwise.

Why a module of its own: it must ``import lmcache`` before it imports anything
else from this package (LMCache skips a plugin that was imported before it),
and it keeps LMCache's log lines out of the report (``--verbose`` shows them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

# Not ``from .device import ...``: that would import this package's LMCache
# parts before ``import lmcache``. These names equal device.py's (a test checks).
BACKEND_NAME = "{{ cookiecutter.backend_name }}"
DEVICE_TYPE = "{{ cookiecutter.device_name }}"
TORCH_MODULE_NAME = "{{ cookiecutter.__torch_module_name }}"
TORCH_EXTENSION_MODULE = "{{ cookiecutter.torch_extension_module }}"
EMULATOR_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"
PACKAGE = "{{ cookiecutter.import_package }}"
DISTRIBUTION = "{{ cookiecutter.project_slug }}"
SPEC_PATH = "{{ cookiecutter.import_package }}.device:{{ cookiecutter.class_prefix }}DeviceSpec"
ENTRY_POINT_GROUP = "{{ cookiecutter._entry_point_group }}"
BACKEND_ENV_VAR = "LMCACHE_DEVICE_BACKEND"


@dataclass
class Check:
    """One line of the report."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def render(self) -> str:
        line = f"{'✓' if self.ok else '✗'} {self.name}: {_one_line(self.detail)}"
        return line if self.ok or not self.fix else f"{line}\n    fix: {self.fix}"


class Report:
    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(self, name: str, ok: bool, detail: str, fix: str = "") -> bool:
        self.checks.append(Check(name, ok, detail, fix))
        return ok

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


# ---------------------------------------------------------------- checks --


def check_import_lmcache(report: Report) -> bool:
    try:
        importlib.import_module("lmcache")
    except Exception as exc:  # noqa: BLE001 - reported, with the fix
        chosen = os.environ.get(BACKEND_ENV_VAR)
        if "Multiple LMCache backends are available" in str(exc):
            fix = f"another plugin claims device type {DEVICE_TYPE!r} too: export {BACKEND_ENV_VAR}={BACKEND_NAME}"
        elif chosen:
            fix = f"{BACKEND_ENV_VAR}={chosen!r} is set: unset it, or set it to {BACKEND_NAME!r} once this passes"
        else:
            fix = "read LMCache's log (--verbose) for the cause"
        return report.add("import lmcache", False, f"{type(exc).__name__}: {exc}", fix)
    return report.add("import lmcache", True, f"lmcache {metadata.version('lmcache')}")


def check_lmcache_version(report: Report) -> Any:
    """The compat module (its import refuses an untested release); None when refused."""
    try:
        compat = importlib.import_module(f"{PACKAGE}._lmcache_compat")
    except RuntimeError as exc:
        report.add("lmcache version", False, str(exc).split(". ", 1)[0], str(exc).split(". ", 1)[-1])
        return None
    installed = compat.installed_lmcache_version()
    report.add(
        "lmcache version",
        True,
        f"{installed} is supported ({compat.SUPPORTED_LMCACHE}; tested: {', '.join(compat.TESTED_LMCACHE_VERSIONS)})",
    )
    return compat


def check_torch_device(report: Report) -> bool:
    import torch

    from .device import torch_extension_module  # after import lmcache

    extension = torch_extension_module()
    if extension:
        try:
            importlib.import_module(extension)
        except Exception as exc:  # noqa: BLE001
            report.add(
                "torch extension",
                False,
                f"import {extension} failed: {type(exc).__name__}: {exc}",
                f"install the PyTorch extension that provides torch.{TORCH_MODULE_NAME} "
                f"(module {TORCH_EXTENSION_MODULE!r}); without the device, tests use {EMULATOR_ENV_VAR}=1",
            )
            return False
        how = "the CPU emulator (tests only)" if extension != TORCH_EXTENSION_MODULE else extension
        report.add("torch extension", True, f"{how} imported")
    else:
        report.add("torch extension", True, f"none needed: torch has torch.{TORCH_MODULE_NAME} built in")
    module = getattr(torch, TORCH_MODULE_NAME, None)
    if module is None:
        return report.add(
            f"torch.{TORCH_MODULE_NAME}",
            False,
            f"torch has no module {TORCH_MODULE_NAME!r}",
            f"the extension must register it (torch._register_device_module({TORCH_MODULE_NAME!r}, module))",
        )
    try:
        available, count = bool(module.is_available()), int(module.device_count())
    except Exception as exc:  # noqa: BLE001
        available, count = False, 0
        detail = f"is_available() raised {type(exc).__name__}: {exc}"
    else:
        detail = f"is_available() is {available}, {count} device(s)"
    return report.add(
        f"torch.{TORCH_MODULE_NAME}",
        available and count > 0,
        detail,
        "check the driver, and that the device is visible to this process (container, *_VISIBLE_DEVICES)",
    )


def check_entry_point(report: Report) -> bool:
    group = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    ours = [ep for ep in group if ep.value == SPEC_PATH]
    same_name = [ep for ep in group if ep.name == BACKEND_NAME and ep.value != SPEC_PATH]
    if not ours:
        return report.add(
            "entry point",
            False,
            f"no {ENTRY_POINT_GROUP!r} entry point points to {SPEC_PATH}",
            f"install the wheel (pip install {DISTRIBUTION}): the entry point comes from its metadata, "
            "not from the source tree on PYTHONPATH",
        )
    if len(ours) > 1:
        return report.add(
            "entry point",
            False,
            f"{len(ours)} installed copies point to {SPEC_PATH}",
            f"uninstall stale copies (pip uninstall {DISTRIBUTION}; look for old .dist-info directories)",
        )
    (entry_point,) = ours
    if entry_point.name != BACKEND_NAME:
        return report.add(
            "entry point",
            False,
            f"named {entry_point.name!r}, but the spec's backend_name is {BACKEND_NAME!r} (LMCache refuses it)",
            f"name it {BACKEND_NAME!r} under [project.entry-points.{ENTRY_POINT_GROUP!r}] in pyproject.toml, reinstall",
        )
    if same_name:
        others = ", ".join(f"{ep.value} ({ep.dist.name if ep.dist else '?'})" for ep in same_name)
        return report.add(
            "entry point",
            False,
            f"backend name {BACKEND_NAME!r} is also claimed by {others}; LMCache keeps only one",
            "uninstall the other plugin, or give this backend another backend_name",
        )
    return report.add("entry point", True, f"{ENTRY_POINT_GROUP}: {entry_point.name} = {entry_point.value}")


def check_registered(report: Report, log: io.StringIO) -> Any:
    """Our spec as LMCache registered it, or None."""
    from lmcache.v1.platform import _DEVICE_REGISTRY

    spec = _DEVICE_REGISTRY.get(BACKEND_NAME)
    if spec is not None and type(spec).__module__ == f"{PACKAGE}.device":
        report.add("registered", True, f"LMCache registered backend {BACKEND_NAME!r} ({type(spec).__name__})")
        return spec
    failure = re.search(rf"Failed to load LMCache device plugin '{re.escape(BACKEND_NAME)}'[^\n]*", log.getvalue())
    if failure:
        report.add(
            "registered",
            False,
            failure.group(0).strip(),
            "fix the error above; device.py and _lmcache_compat.py may import nothing from LMCache at top level "
            "but DeviceSpec",
        )
    elif spec is not None:
        report.add(
            "registered",
            False,
            f"backend {BACKEND_NAME!r} is {type(spec).__module__}.{type(spec).__name__}, not this plugin",
            "choose another backend_name: this one is taken",
        )
    else:
        report.add("registered", False, f"LMCache has no backend {BACKEND_NAME!r}", "see the entry point check")
    return None


def check_selection(report: Report, spec: Any) -> bool:
    import lmcache
    from lmcache.v1.platform import _DEVICE_REGISTRY

    explicit = (os.environ.get(BACKEND_ENV_VAR) or "").strip().lower()
    rivals = sorted(
        name
        for name, other in _DEVICE_REGISTRY.items()
        if other.device_type == DEVICE_TYPE and name != BACKEND_NAME and _available(other)
    )
    if rivals and explicit != BACKEND_NAME:
        report.add(
            "device type",
            False,
            f"backends {', '.join(rivals)} are also available for device type {DEVICE_TYPE!r}",
            f"export {BACKEND_ENV_VAR}={BACKEND_NAME}",
        )
    else:
        report.add("device type", True, f"no other available backend claims {DEVICE_TYPE!r}" + (
            f" without {BACKEND_ENV_VAR}" if rivals else ""))
    from lmcache.v1.platform import _device_detect

    selected = getattr(lmcache, "torch_device_type", None)
    backend = _device_detect._detect_device()[2]  # (torch module, device type, backend name)
    if explicit:
        why = f"{BACKEND_ENV_VAR}={explicit}"
    elif os.environ.get("DEVICE_TYPE"):
        why = f"DEVICE_TYPE={os.environ['DEVICE_TYPE']}"
    else:
        why = f"auto-detection (first available in registry order: {', '.join(_DEVICE_REGISTRY)})"
    return report.add(
        "selection",
        selected == DEVICE_TYPE and backend == BACKEND_NAME,
        f"LMCache uses backend {backend!r}, device type {selected!r}, by {why}",
        f"export {BACKEND_ENV_VAR}={BACKEND_NAME} (or make torch.{TORCH_MODULE_NAME} available, see above)",
    )


def check_ops(report: Report) -> bool:
    from lmcache.v1.platform import resolve_device_ops

    from .device_ops import {{ cookiecutter.class_prefix }}DeviceOps

    ops = resolve_device_ops(DEVICE_TYPE)
    if not isinstance(ops, {{ cookiecutter.class_prefix }}DeviceOps):
        return report.add(
            "ops", False, f"LMCache resolved {type(ops).__name__} for {DEVICE_TYPE!r}", "see the selection check"
        )
    native = sorted(name for name, value in vars(ops).items() if callable(value) and not name.startswith("_"))
    if native:
        return report.add("ops", True, f"{type(ops).__name__}, native: {', '.join(native)}")
{%- if cookiecutter.native_ops == 'yes' %}
    if os.environ.get("{{ cookiecutter.__native_env_var }}") != "0":
        return report.add(
            "ops",
            False,
            f"{type(ops).__name__} runs on LMCache's torch baseline: the native module did not load",
            "rebuild the wheel with a C++ compiler and the torch you deploy: python -m build --wheel --no-isolation",
        )
{%- endif %}
    return report.add("ops", True, f"{type(ops).__name__} on LMCache's torch baseline (no native ops bound)")


def check_transfer_modes(report: Report, spec: Any, compat: Any) -> bool:
    new_name, old_name = spec.is_lmcache_driven_available(), spec.is_handle_transfer_available()
    if new_name != old_name:
        return report.add(
            "transfer modes",
            False,
            f"is_lmcache_driven_available() is {new_name} but is_handle_transfer_available() is {old_name}",
            "subclass PortableDeviceSpec and override is_lmcache_driven_available() only",
        )
    modes = ["engine_driven"] + (["lmcache_driven"] if new_name else [])
    return report.add("transfer modes", True, f"{', '.join(modes)}; auto means {compat.auto_transfer_mode(spec)}")


def _one_line(text: str, limit: int = 400) -> str:
    """Multi-line messages (LMCache's include advice) folded into one report line."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _available(spec: Any) -> bool:
    try:
        return bool(spec.is_available())
    except Exception:  # noqa: BLE001
        return False


# ---------------------------------------------------------- live check --

BLOCK_SIZE, LAYERS, HEADS, HEAD_SIZE = 16, 2, 2, 32


def live_round_trip(url: str, mode: str, tokens: int, timeout: float, log: io.StringIO) -> tuple[bool, str, str]:
    """Store, look up and retrieve ``tokens`` tokens through ``url``; (ok, detail, fix)."""
    import torch
    import zmq
    from lmcache.integration.vllm.vllm_multi_process_adapter import (
        LMCacheMPSchedulerAdapter,
        LMCacheMPWorkerAdapter,
        LoadStoreOp,
        ParallelStrategy,
    )

    from ._lmcache_compat import recorded_event, register_kv_caches

    if tokens % BLOCK_SIZE:
        return False, f"--tokens {tokens} is not a multiple of the block size {BLOCK_SIZE}", "pass --tokens 256"
    used = tokens // BLOCK_SIZE
    device = torch.device(DEVICE_TYPE, 0)
    generator = torch.Generator().manual_seed(1234)
    shape = (2, 2 * used + 2, BLOCK_SIZE, HEADS, HEAD_SIZE)
    expected = {f"layer.{i}": torch.randn(shape, generator=generator).to(torch.float16) for i in range(LAYERS)}
    config = {"lmcache.mp.mq_timeout": timeout, "lmcache.mp.heartbeat_interval": 1.0}
    strategy = ParallelStrategy(
        mla_only=False, vllm_world_size=1, vllm_worker_id=0, tp_size=1, pp_size=1, n_servers=1
    )
    model = f"{PACKAGE}-doctor-{uuid.uuid4().hex[:8]}"
    context: Any = zmq.Context.instance()
    source_blocks, target_blocks = list(range(used)), list(range(2 * used + 1, used + 1, -1))
    kv = {name: t.to(device) for name, t in expected.items()}  # one registered cache, as a vLLM worker has
    for values in kv.values():
        values[:, target_blocks] = 0  # the retrieve must fill these from the server
    worker = LMCacheMPWorkerAdapter(
        url, context, model, BLOCK_SIZE, strategy, extra_config={**config, "lmcache.mp.mp_transfer_mode": mode}
    )
    register_kv_caches(worker, kv)
    scheduler = LMCacheMPSchedulerAdapter([url], context, model, BLOCK_SIZE, strategy, extra_config=config)
    prompt = list(range(11, 11 + tokens))

    store_id = f"doctor-store-{uuid.uuid4().hex}"
    op = LoadStoreOp(token_ids=prompt, block_ids=[source_blocks], start=0, end=tokens)
    worker.submit_store_request(store_id, op, recorded_event(worker, DEVICE_TYPE))
    if not worker.store_futures[store_id].result(timeout=timeout):
        return False, "the server refused the store", "read the server's log"
    lookup_id, hit, deadline = "", 0, time.monotonic() + timeout
    while hit < tokens and time.monotonic() < deadline:  # LMCache-driven stores commit asynchronously
        lookup_id = f"doctor-lookup-{uuid.uuid4().hex}"
        scheduler.maybe_submit_lookup_request(lookup_id, prompt)
        while (result := scheduler.check_lookup_result(lookup_id)) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        hit = int(result or 0)
        if hit < tokens:
            if hit:
                scheduler.free_lookup_locks(prompt, 0, hit, lookup_id)
            scheduler.end_session(lookup_id)
            time.sleep(0.05)
    if hit < tokens:
        return (
            False,
            f"the store reported success but a lookup finds {hit} of {tokens} tokens",
            "the server stored nothing: its L1 may be full (--l1-size-gb), or --tokens is not a multiple "
            "of its --chunk-size",
        )
    op = LoadStoreOp(token_ids=prompt, block_ids=[target_blocks], start=0, end=tokens)
    worker.submit_retrieve_request(lookup_id, op, recorded_event(worker, DEVICE_TYPE))
    future, _ = worker.retrieve_futures[lookup_id]
    retrieved = future.result(timeout=timeout)
    scheduler.end_session(lookup_id)
    getattr(torch, TORCH_MODULE_NAME).synchronize()
    mismatched = 0
    for name, values in expected.items():
        got = kv[name][:, target_blocks].cpu().view(torch.uint8)
        mismatched += int((got != values[:, source_blocks].view(torch.uint8)).sum())
    context_name = type(worker.transfer_ctx).__name__
    if "LMCacheDriven" in context_name:
        path = "lmcache-driven"
    else:
        found = re.findall(r"mode=(SHM|pickle)\)", log.getvalue())
        path = f"engine-driven {found[-1]}" if found else "engine-driven"
    nbytes = sum(t[:, source_blocks].numel() * t.element_size() for t in expected.values())
    if not retrieved or mismatched:
        return False, f"{path}: retrieve gave {mismatched} wrong bytes of {nbytes}", "run the conformance tests"
    worker.shutdown()
    scheduler.shutdown()
    return True, f"{path}: stored, found and retrieved {tokens} tokens ({nbytes} bytes), identical", ""


def check_server(report: Report, url: str, mode: str, tokens: int, timeout: float, log: io.StringIO) -> bool:
    """Run the round trip with a hard deadline: a silent server must not hang the doctor."""
    outcome: list[tuple[bool, str, str]] = []

    def run() -> None:
        try:
            outcome.append(live_round_trip(url, mode, tokens, timeout, log))
        except Exception as exc:  # noqa: BLE001
            outcome.append((False, f"{type(exc).__name__}: {exc}", ""))

    thread = threading.Thread(target=run, name="doctor-live-check", daemon=True)
    thread.start()
    thread.join(3 * timeout + 5)
    if outcome and outcome[0][0]:
        return report.add(f"server {url}", True, outcome[0][1])
    detail = outcome[0][1] if outcome else f"no answer within {3 * timeout + 5:.0f} s"
    fix = (outcome[0][2] if outcome else "") or (
        f"is an lmcache server listening at {url}? If it is, it may accept only the other transfer mode "
        "(LMCache then just times out): start it with --supported-transfer-mode auto, or run the doctor with "
        f"--mode {'lmcache_driven' if mode == 'engine_driven' else 'engine_driven'}"
    )
    return report.add(f"server {url}", False, f"{mode} worker: {detail}", fix)


# ------------------------------------------------------------------ main --


def run(server: str | None, mode: str, tokens: int, timeout: float, log: io.StringIO) -> Report:
    report = Report()
    try:
        _run_checks(report, server, mode, tokens, timeout, log)
    except Exception as exc:  # noqa: BLE001 - a doctor that crashes helps nobody
        report.add("doctor", False, f"a check crashed: {type(exc).__name__}: {exc}", "rerun with --verbose, report it")
    return report


def _run_checks(report: Report, server: str | None, mode: str, tokens: int, timeout: float, log: io.StringIO) -> None:
    if not check_import_lmcache(report):
        return
    compat = check_lmcache_version(report)
    device_ok = check_torch_device(report)
    entry_ok = check_entry_point(report)
    spec = check_registered(report, log) if entry_ok and compat is not None else None
    if spec is None or not device_ok or not check_selection(report, spec):
        return
    check_ops(report)
    check_transfer_modes(report, spec, compat)
    if server:
        check_server(report, server, mode, tokens, timeout, log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="{{ cookiecutter.import_package | replace('_', '-') }}-doctor",
        description="Check that LMCache finds, selects and drives the {{ cookiecutter.backend_name }} backend.",
    )
    parser.add_argument("--server", metavar="tcp://HOST:PORT", help="also store, look up and retrieve through it")
    parser.add_argument("--mode", default="auto", choices=["auto", "engine_driven", "lmcache_driven"])
    parser.add_argument("--tokens", type=int, default=256, help="tokens to store: a multiple of the chunk size")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds LMCache may wait for one server reply")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--verbose", action="store_true", help="print LMCache's own log lines afterwards")
    args = parser.parse_args(argv)

    log = io.StringIO()
    with contextlib.redirect_stderr(log):  # LMCache's handlers bind the stream they find at creation
        report = run(args.server, args.mode, args.tokens, args.timeout, log)
    if args.json:
        print(json.dumps({"ok": report.ok, "checks": [asdict(c) for c in report.checks]}, indent=2))
    else:
        print("\n".join(check.render() for check in report.checks))
        print(f"{'all checks passed' if report.ok else 'some checks failed'} ({len(report.checks)} checks)")
    if args.verbose:
        sys.stderr.write(log.getvalue())
    sys.stdout.flush()
    # A live check against a silent server may leave LMCache's threads and sockets
    # waiting; the report is out, so leave without joining them.
    os._exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
