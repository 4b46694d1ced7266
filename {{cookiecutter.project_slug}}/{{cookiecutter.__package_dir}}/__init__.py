{% if cookiecutter.ownership == 'in_tree' -%}
{% filter trim %}{% include 'device_spec.py.j2' %}{% endfilter %}
{%- else -%}
# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache device backend for {{ cookiecutter.device_name }} devices.

Modules: ``names`` (the backend's names), ``device`` (the DeviceSpec LMCache
discovers), ``device_ops`` (the KV-cache ops), ``_lmcache_compat`` (its binding to
the kit's LMCache release shims).

Why it imports LMCache, and before anything of its own: ``import lmcache`` discovers
this plugin (its entry point, ``device``) and skips it if a module the plugin needs
is half-imported then. A process whose first import is one of this package's modules
(say ``device_ops``) would start that discovery from inside the module, and lose the
plugin. Importing LMCache here, before any
module of the package, lets it find the package whole, as PyTorch device extensions
import torch first. Must import nothing else.
"""

#: The version, written here only: pyproject.toml reads it ([tool.setuptools.dynamic]).
__version__ = "{{ cookiecutter.version }}"

try:
    # First Party
    import lmcache  # noqa: F401
except Exception:  # noqa: BLE001, S110
    # Raised again, with its cause, by the importer's own ``import lmcache`` (the
    # doctor's first check reports it with the fix).
    pass
{%- endif %}
