# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
{% if cookiecutter.emulator == 'yes' -%}
"""Conformance-test setup: opt this process into the emulator and select the backend.

LMCache reads these variables once, at ``import lmcache``, and torch loads the
emulator (installed beside the plugin from
``{{ cookiecutter.__emulator_dir }}/``) at ``import torch``
when ``{{ cookiecutter.__emulator_env_var }}=1``, so they are set here, before any
test module imports either. Values already in the environment win: on real
{{ cookiecutter.device_name }} hardware run
``{{ cookiecutter.__emulator_env_var }}=0 pytest``.
"""
{%- else -%}
"""Conformance-test setup: select the backend when this host has a
{{ cookiecutter.device_name }} device.

LMCache reads these variables once, at ``import lmcache``, so they are set here,
before any test module imports LMCache. Without a device (no
``{{ cookiecutter.torch_extension_module or 'torch.' ~ cookiecutter.__torch_module_name }}``, or no device visible) every test that needs
one is skipped with the reason; the tests marked ``without_device`` still run.
"""
{%- endif %}

# Future
from __future__ import annotations

# Standard
{%- if cookiecutter.emulator == 'yes' %}
from importlib.util import find_spec
{%- endif %}
import os
{%- if cookiecutter.emulator == 'yes' %}
import sys
{%- endif %}

DEVICE = "{{ cookiecutter.device_name }}"
PACKAGE = "{{ cookiecutter.__package }}"
EMULATOR_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"

# Third Party
from lmcache_device_kit import backend as kit_backend  # noqa: E402

# The kit's harness serves this backend, here and in every process it starts (it reads
# names.py only: imports neither the plugin nor LMCache).
BACKEND = kit_backend.use(PACKAGE)
{%- if cookiecutter.emulator == 'no' %}
DEVICE_PRESENT = BACKEND.device_present()
if DEVICE_PRESENT:
    os.environ.setdefault("LMCACHE_DEVICE_BACKEND", "{{ cookiecutter.backend_name }}")
{%- else %}

os.environ.setdefault(EMULATOR_ENV_VAR, "1")
os.environ.setdefault("LMCACHE_DEVICE_BACKEND", "{{ cookiecutter.backend_name }}")
if os.environ[EMULATOR_ENV_VAR] == "1":
    if find_spec("{{ cookiecutter.__emulator_package }}") is None:
        raise ImportError(
            f"{EMULATOR_ENV_VAR}=1 but the CPU emulator is not installed: pip install "
            "./{{ cookiecutter.__emulator_dir }} "
            f"(or set {EMULATOR_ENV_VAR}=0 on a {DEVICE} host)"
        )
    # imported before this file set the variable: torch's autoloading has run
    if "torch" in sys.modules:
        # Third Party
        import {{ cookiecutter.__emulator_package }}

        {{ cookiecutter.__emulator_package }}.load()
{%- endif %}

# Imports nothing heavier than the standard library.
# Third Party
from lmcache_device_kit.harness.spawn import QUIET_ENV  # noqa: E402

for _key, _value in QUIET_ENV.items():
    os.environ.setdefault(_key, _value)

# The kit's conformance suite (test_conformance.py subclasses its classes): its markers,
# schedule, capability gates and fixtures, found here by name.
# Third Party
from lmcache_device_kit.conformance.plugin import *  # noqa: E402, F403
