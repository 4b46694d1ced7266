# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""Fixtures the ported LMCache tests share (the kit's contract, ``--suite devices``).

The suite's own fixtures (``runtime``, ``lmcache_driven``, ...) come from
``tests/conftest.py``; these are the runtimes LMCache's per-device tests assume.
Not a conftest.py: the suite's modules import ``conftest`` by name.
"""

# Third Party
import pytest


@pytest.fixture
def without_host_functions(runtime, monkeypatch):  # type: ignore[no-untyped-def]
    """The runtime as torch_npu is, for one test: no host-function launch (what the
    emulator's ``..._HOST_FUNCS=0`` mode removes), so the plugin synchronizes, then
    publishes, as LMCache's NPU backend does."""
    monkeypatch.delattr(runtime, "host_func_launcher", raising=False)
