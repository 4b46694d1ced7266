# SPDX-License-Identifier: Apache-2.0
"""LMCache's conformance tests for a device backend: base classes a project
subclasses.

Why it exists: every backend made from the template is held to the same tests, and a
vendor should carry none of them. As pandas' ``pandas.tests.extension.base`` and
fsspec's ``fsspec.tests.abstract`` do, each module here holds ``Base...Tests`` classes
(pytest does not collect them: no ``Test`` prefix); a project's
``tests/test_conformance.py`` subclasses each one, and pytest runs the subclass against
the backend ``lmcache_device_kit.backend.use()`` chose. What a class needs from the
backend is declared in its ``requires`` (``base.py``): the kit's pytest plugin
(``plugin.py``, which a project's ``tests/conftest.py`` star-imports) skips a class
whose backend lacks one, with the reason.

Must not import lmcache, torch or the plugin at import time (the modules of the
classes import them inside tests and fixtures, after ``conftest.py`` has set the
environment LMCache reads at ``import lmcache``).
"""
