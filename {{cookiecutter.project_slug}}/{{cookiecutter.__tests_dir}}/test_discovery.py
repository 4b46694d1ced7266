# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""LMCache finds, validates and selects the {{ 'in-tree backend' if cookiecutter.ownership == 'in_tree' else 'installed plugin' }}.

Guide: "Debugging checklist". LMCache builds its registry once per process, inside
``import lmcache``, so every case runs in a fresh interpreter with its own
environment; cases that need the same environment read one probe of it.
"""

# Future
from __future__ import annotations

# Standard
from collections.abc import Mapping
from importlib import metadata
import json
import textwrap

# Third Party
from _support import run_python
import pytest

BACKEND = "{{ cookiecutter.backend_name }}"
DEVICE = "{{ cookiecutter.device_name }}"
PACKAGE = "{{ cookiecutter.__package }}"
SPEC_CLASS = "{{ cookiecutter.class_prefix }}DeviceSpec"
SPEC_PATH = f"{{ cookiecutter.__spec_module }}:{SPEC_CLASS}"
DISTRIBUTION = "{{ cookiecutter.project_slug }}"
EMULATOR = "{{ cookiecutter.__emulator_env_var }}"

PROBE = (
    textwrap.dedent(
        """
    import json, sys
    import lmcache
    from lmcache.v1.platform import _DEVICE_REGISTRY, resolve_device_ops
    from lmcache.v1.platform._device_detect import DEVICE_PLUGIN_ENTRY_POINT_GROUP
    after_import = sorted(
        m for m in sys.modules if m == __PACKAGE__ or m.startswith(__PACKAGE__ + ".")
    )
    ops = resolve_device_ops(__DEVICE__)
    name = lambda obj: type(obj).__module__ + "." + type(obj).__name__
{%- if cookiecutter.ownership == 'wheel' %}
    compat = sys.modules[__PACKAGE__ + "._lmcache_compat"]  # loaded with the spec
    release_range = [
        compat.SUPPORTED_LMCACHE,
        compat.TESTED_LMCACHE_VERSIONS,
        compat.installed_lmcache_version(),
    ]
{%- endif %}
    print(json.dumps(dict(
        registered=sorted(_DEVICE_REGISTRY),
        torch_device_type=lmcache.torch_device_type,
        device_ops=name(getattr(lmcache, "device_ops", None)),
        resolved_ops=name(ops),
        ops_is_process_singleton=ops is getattr(lmcache, "device_ops", None),
        plugin_modules_after_import=after_import,
        entry_point_group=DEVICE_PLUGIN_ENTRY_POINT_GROUP,
{%- if cookiecutter.ownership == 'wheel' %}
        release_range=release_range,
{%- endif %}
    )))
    """
    )
    .replace("__DEVICE__", repr(DEVICE))
    .replace("__PACKAGE__", repr(PACKAGE))
)

OUR_OPS = f"{PACKAGE}.device_ops.{{ cookiecutter.class_prefix }}DeviceOps"
#: One xdist worker runs this module, so cases that share an environment share its
#: probe.
pytestmark = pytest.mark.xdist_group("discovery")


#: Nothing selected and no device: what plain ``import lmcache`` sees on a host without
#: one.
PLAIN = {EMULATOR: "0", "LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None}
{%- if cookiecutter.ownership == 'wheel' %}
#: Loads the plugin on an untested LMCache (the canary's runs set it).
ALLOW_UNTESTED = "{{ cookiecutter.__untested_env_var }}"
{%- endif %}
_probes: dict[frozenset, tuple[dict, str]] = {}


def probe(env: Mapping[str, str | None]) -> tuple[dict, str]:
    """PROBE's findings and LMCache's log in a fresh interpreter with ``env`` (one
    interpreter per env)."""
    key = frozenset(env.items())
    if key not in _probes:
        done = run_python(PROBE, env)
        assert done.returncode == 0, done.stderr[-4000:]
        _probes[key] = json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
    return _probes[key]


{% if cookiecutter.ownership == 'in_tree' -%}
@pytest.mark.without_device
def test_built_in_scan_registers_the_package_init_spec_without_an_entry_point() -> None:
    """LMCache's scan of lmcache.v1.platform.devices finds the spec in ``__init__.py``;
    no entry point is used."""
    done = run_python(
        "import json, lmcache; from lmcache.v1.platform import _DEVICE_REGISTRY as r; "
        f"s = r.get({BACKEND!r}); "
        "print(json.dumps(s and [type(s).__module__, type(s).__name__]))",
        PLAIN,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == [PACKAGE, SPEC_CLASS], done.stderr[-3000:]
    group = metadata.entry_points(group="{{ cookiecutter._entry_point_group }}")
    assert not [
        ep for ep in group if ep.name == BACKEND or ep.value.startswith(PACKAGE)
    ]
{%- else -%}
@pytest.mark.without_device
def test_entry_point_is_named_after_the_backend_and_points_to_the_spec_class() -> None:
    """The wheel declares exactly one entry point, in LMCache's group, named
    backend_name."""
    ours = [
        ep
        for ep in metadata.entry_points(group="{{ cookiecutter._entry_point_group }}")
        if ep.value.startswith(PACKAGE + ".")
    ]
    assert [(ep.name, ep.value) for ep in ours] == [(BACKEND, SPEC_PATH)]
    assert ours[0].dist is not None and ours[0].dist.name == DISTRIBUTION


@pytest.mark.without_device
def test_entry_point_group_is_the_one_lmcache_scans() -> None:
    """The group name baked into pyproject.toml equals LMCache's own constant."""
    result, _ = probe(PLAIN)
    assert result["entry_point_group"] == "{{ cookiecutter._entry_point_group }}"
{%- endif %}


def test_lmcache_device_backend_selects_the_plugin_and_its_ops() -> None:
    """LMCACHE_DEVICE_BACKEND=<backend> binds our spec, our device type and our ops."""
    result, log = probe(
        {"LMCACHE_DEVICE_BACKEND": BACKEND, "DEVICE_TYPE": None, EMULATOR: "1"}
    )
    assert result["torch_device_type"] == DEVICE
    assert f"torch_device_type={DEVICE}" in log
    assert result["device_ops"] == OUR_OPS
    assert result["resolved_ops"] == OUR_OPS
    assert result["ops_is_process_singleton"] is True


def test_device_type_selects_the_plugin_without_a_backend_name() -> None:
    """DEVICE_TYPE=<device> alone picks our backend, the only available one of that
    type."""
    result, log = probe(
        {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": DEVICE, EMULATOR: "1"}
    )
    assert result["torch_device_type"] == DEVICE
    assert f"torch_device_type={DEVICE}" in log
    assert result["resolved_ops"] == OUR_OPS


def test_auto_detection_selects_the_plugin_when_its_device_is_available() -> None:
    """With no selection variables, an available device is detected on its own."""
    result, _ = probe(
        {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None, EMULATOR: "1"}
    )
    assert result["torch_device_type"] == DEVICE
{%- if cookiecutter.emulator == 'yes' %}


@pytest.mark.without_device
def test_backend_reports_unavailable_when_its_torch_module_is_missing() -> None:
    """Without torch.<device> the plugin says so, and LMCache refuses the explicit
    selection."""
    env = {"LMCACHE_DEVICE_BACKEND": BACKEND, "DEVICE_TYPE": None, EMULATOR: "0"}
    done = run_python("import lmcache", env)
    if done.returncode == 0:
        pytest.skip(f"a real {DEVICE} device is present on this host")
    assert (
        f"LMCACHE_DEVICE_BACKEND={BACKEND!r} is registered but not available"
        in done.stderr
    )
{%- endif %}


@pytest.mark.without_device
def test_registry_build_imports_only_the_spec_module() -> None:
    """Plain ``import lmcache`` loads the spec module, the names and the compat layer,
    nothing heavier."""
    result, log = probe(PLAIN)
    assert BACKEND in result["registered"], log[-3000:]
    assert "Failed to load LMCache device plugin" not in log
    loaded = {PACKAGE, f"{PACKAGE}.names", f"{PACKAGE}._lmcache_compat"}
    loaded.add(f"{PACKAGE}._lmcache_compat.surface")  # data only: imports nothing
{%- if cookiecutter.ownership == 'wheel' %}
    loaded |= {f"{PACKAGE}.device"{% if cookiecutter.lmcache_driven != 'no' %}, f"{PACKAGE}._lmcache_compat.wire"{% endif %}}
{%- endif %}
    assert set(result["plugin_modules_after_import"]) <= loaded
{%- if cookiecutter.ownership == 'wheel' %}


@pytest.mark.without_device
@pytest.mark.parametrize(
    "first",
    ["", ".device", ".device_ops", "._lmcache_compat"],
    ids=lambda module: module.lstrip(".") or "package",
)
def test_the_plugin_registers_whichever_of_its_modules_a_process_imports_first(
    first: str,
) -> None:
    """A process whose first import is the package, its entry point's module, its ops or
    its LMCache layer (not ``lmcache``) still finds the plugin registered: LMCache's
    discovery, run inside ``import lmcache``, skips a half-imported plugin."""
    done = run_python(
        f"import sys, {PACKAGE}{first}; "
        "from lmcache.v1.platform import _DEVICE_REGISTRY; "
        f"print({BACKEND!r} in _DEVICE_REGISTRY)",
        PLAIN,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "True", done.stderr[-3000:]


@pytest.mark.without_device
def test_plugin_refuses_to_load_on_an_untested_lmcache_release() -> None:
    """On an LMCache release outside the tested range, loading fails loudly and names
    the range."""
    code = textwrap.dedent(
        """
        import importlib.metadata as md
        real = md.version
        md.version = lambda name: "99.0.0" if name == "lmcache" else real(name)
        import lmcache
        from lmcache.v1.platform import _DEVICE_REGISTRY
        print({backend!r} in _DEVICE_REGISTRY)
        """
    ).format(backend=BACKEND)
    # The canary (nox -s canary) relaxes the check in its own runs: test it as shipped.
    done = run_python(code, {**PLAIN, ALLOW_UNTESTED: None})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"
    assert f"Failed to load LMCache device plugin {BACKEND!r}" in done.stderr
    assert (
        "{{ cookiecutter.__lmcache_requirement }}" in done.stderr
        and "lmcache 99.0.0 is installed" in done.stderr
    )


@pytest.mark.without_device
def test_declared_lmcache_range_is_exactly_the_tested_releases() -> None:
    """pyproject's lmcache requirement spans the tested releases, oldest to newest, and
    admits the installed one."""
    # Third Party
    from packaging.requirements import Requirement
    from packaging.version import Version

    supported, tested, installed = probe(PLAIN)[0]["release_range"]
    declared = [Requirement(r) for r in metadata.requires(DISTRIBUTION) or []]
    (lmcache_req,) = [r for r in declared if r.name == "lmcache"]
    assert lmcache_req.specifier == Requirement(supported).specifier
    oldest, newest = min(tested, key=Version), max(tested, key=Version)
    assert (
        lmcache_req.specifier == Requirement(f"lmcache>={oldest},<={newest}").specifier
    )
    assert installed in tested and lmcache_req.specifier.contains(installed)
{%- endif %}
