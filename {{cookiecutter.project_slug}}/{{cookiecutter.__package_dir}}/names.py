# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""The names of this backend, defined once: every other module imports them from here.

Why a module of its own: the spec, the ops, the IPC parts{{ " and the doctor" if cookiecutter.ownership == "wheel" else "" }} all need
them, and a module that imports nothing can be imported by any of them (and
before ``import lmcache``) without an import circle.

Must not import anything: not LMCache, not torch, not this package.
"""

#: ``tensor.device.type`` of your KV-cache tensors.
DEVICE_TYPE = "{{ cookiecutter.device_name }}"
#: LMCache's name for this backend: {{ 'the entry-point name and ' if cookiecutter.ownership == 'wheel' else '' }}the value of
#: ``LMCACHE_DEVICE_BACKEND`` that selects it.
BACKEND_NAME = "{{ cookiecutter.backend_name }}"
#: ``torch.<name>``: the device module LMCache synchronises through.
TORCH_MODULE_NAME = "{{ cookiecutter.__torch_module_name }}"
#: The module that creates ``torch.{{ cookiecutter.__torch_module_name }}`` when imported; empty if
#: torch has the device built in.
TORCH_EXTENSION_MODULE = "{{ cookiecutter.torch_extension_module }}"
#: Starts every log line that reports a slow path: a transfer that works but takes
#: a path many times slower than the device offers (``_lmcache_compat.slow_paths``).
SLOW_PATH_MARK = "{{ cookiecutter.backend_name }} slow path:"
{%- if cookiecutter.ownership == 'wheel' %}
#: Set to ``1`` to load on an LMCache release this plugin was not tested with (the
#: canary and ``doctor --api`` do, in their own processes; never set it to serve).
ALLOW_UNTESTED_ENV_VAR = "{{ cookiecutter.__untested_env_var }}"
{%- endif %}
{%- if cookiecutter.__extends %}
#: The built-in LMCache backend this one extends: its spec is this backend's base
#: class, and what this backend does not override is the built-in's.
EXTENDS = "{{ cookiecutter.__extends }}"
{%- endif %}
{%- if cookiecutter.emulator == 'yes' %}
#: Tests and CI set this to ``1`` to run on the CPU emulator of
#: ``torch.{{ cookiecutter.__torch_module_name }}``, a distribution of its own that torch loads at
#: import, from ``{{ cookiecutter.__emulator_dir }}/``.
#: This package never reads it: the doctor names it in its advice.
EMULATOR_ENV_VAR = "{{ cookiecutter.__emulator_env_var }}"
{%- endif %}
