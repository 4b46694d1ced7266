# SPDX-License-Identifier: Apache-2.0
"""The test harness: what drives a backend the way vLLM and an operator do.

Real ``lmcache server`` processes on free 127.0.0.1 ports (``servers``), a serving
engine's worker ranks and LMCache's scheduler adapter (``engine``, ``worker``,
``scheduler``), how they call LMCache's vLLM adapters on each release
(``lmcache_calls``, declared in ``surface``), and the launcher that forks them from
a warm interpreter (``spawn``, ``zygote``). Every module is generic over the
backend under test (``lmcache_device_kit.backend.current()``).

Importing this package imports nothing: its modules import lmcache only inside
functions, and torch only where they handle KV caches (``worker_kv``, ``worker``,
``scheduler``, ``engine``).
"""
