# SPDX-License-Identifier: Apache-2.0
"""The doctor: the guide's debugging checklist for a plugin made from the template.

``lmcache-device-doctor [--backend NAME]`` (``cli``), or a plugin's own
``lmcache-<device>-doctor``, which hands its package to ``cli.main``. Generic over
the plugin's names (``lmcache_device_kit.backend``): it derives the rest from the
plugin's ``lmcache.device_plugins`` entry point and its modules (``<package>.x``).

Modules: ``cli`` (the command line), ``plugin`` (which plugin), ``checks`` and
``discovery`` (the checklist), ``paths`` (slow paths), ``live`` (``--server``),
``api`` and ``calls`` (``--api``), ``ladder``, ``port`` and ``probes``
(``--port``: the porting ladder), ``report``. Importing this package imports
none of them, nor LMCache, torch or the plugin.
"""
