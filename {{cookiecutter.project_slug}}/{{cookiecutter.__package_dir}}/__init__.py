{% if cookiecutter.ownership == 'in_tree' -%}
{% filter trim %}{% include 'device_spec.py.j2' %}{% endfilter %}
{%- else -%}
# SPDX-License-Identifier: {{ cookiecutter.license }}
# {{ cookiecutter._owner.template }}
"""LMCache device backend for {{ cookiecutter.device_name }} devices.

Modules: ``names`` (the backend's names), ``device`` (the DeviceSpec LMCache
discovers), ``device_ops`` (the KV-cache ops), ``_lmcache_compat`` (everything
specific to an LMCache release).

Must not import LMCache or torch: a process that imports this package before
``import lmcache`` would otherwise start LMCache's plugin discovery while this
package is half-initialised, and LMCache would skip the plugin.
"""

__version__ = "{{ cookiecutter.version }}"
{%- endif %}
