# SPDX-License-Identifier: Apache-2.0
"""LMCache's own device-generic tests, run against an installed plugin: the contract.

``python -m lmcache_device_kit.contract`` (``runner.py``) fetches the installed
LMCache release's sdist (``sdist.py``), runs its platform and multiprocess tests that
reach the active device with the plugin selected (``pytest_plugin.py``), and the
project's ports of LMCache's per-device tests (the ``devices`` suite). What does not
apply, with its reason, is data (``lmcache_contract.toml``, read by
``not_applicable.py``, a project's own file over it; ``project.py`` finds the
project's files).

Importing this package imports nothing but itself: not LMCache, torch, pytest or the
plugin.
"""
