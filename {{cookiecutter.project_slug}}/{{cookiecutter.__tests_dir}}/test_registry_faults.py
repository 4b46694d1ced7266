# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Plugin-loading faults: LMCache's registry stays usable and says why it skipped a
plugin.

Each case runs ``import lmcache`` in a fresh interpreter with fake plugins on
``PYTHONPATH`` (LMCache builds its registry once per process), and must end
within 30 s.
"""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import textwrap
import time

# Third Party
from _support import RIVAL_SPEC, fake_plugin, run_python
import pytest

BACKEND = "{{ cookiecutter.backend_name }}"
DEVICE = "{{ cookiecutter.device_name }}"
SPEC_CLASS = "{{ cookiecutter.class_prefix }}DeviceSpec"
SPEC_PATH = f"{{ cookiecutter.__spec_module }}:{SPEC_CLASS}"
DEADLINE_S = 30

REGISTRY = textwrap.dedent(
    """
    import json, lmcache
    from lmcache.v1.platform import _DEVICE_REGISTRY
    name = lambda spec: type(spec).__module__ + "." + type(spec).__name__
    print(json.dumps(
        {backend: name(spec) for backend, spec in _DEVICE_REGISTRY.items()}
    ))
    print(json.dumps(lmcache.torch_device_type))
    """
)
CLEAN = {"LMCACHE_DEVICE_BACKEND": None, "DEVICE_TYPE": None}


def registry(
    pythonpath: Path | None = None, **env: str | None
) -> tuple[dict[str, str], str, str, float]:
    """(backend -> spec class, selected device type, LMCache's log, seconds) from a
    fresh ``import lmcache``."""
    overrides = {
        **CLEAN,
        **env,
        **({"PYTHONPATH": str(pythonpath)} if pythonpath else {}),
    }
    started = time.monotonic()
    done = run_python(REGISTRY, overrides, timeout=DEADLINE_S + 30)
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    backends, selected = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    return backends, selected, done.stderr, seconds


@pytest.fixture(scope="module")
def beside_faulty_plugins(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, str], str, str, float]:
    """``registry()`` with two faulty plugins installed beside this one (the registry
    state allows both in one interpreter): one whose import raises, and one whose entry
    point points at this spec under another name."""
    root = fake_plugin(
        tmp_path_factory.mktemp("faulty-plugins"),
        "broken",
        "broken = broken_plugin:Spec",
        "broken_plugin",
        "raise ImportError('vendor runtime libfoo.so not found')",
    )
    info = root / "misnamed-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: misnamed\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{{ cookiecutter._entry_point_group }}]\nmisnamed = {SPEC_PATH}\n"
    )
    return registry(root)


def test_a_broken_plugin_is_skipped_and_logged_while_lmcache_and_this_plugin_still_load(
    beside_faulty_plugins: tuple[dict[str, str], str, str, float],
) -> None:
    """Another plugin whose import raises: LMCache starts, logs why it skipped it, and
    selects this backend."""
    backends, selected, log, seconds = beside_faulty_plugins
    assert "broken" not in backends and backends[BACKEND] == SPEC_PATH.replace(":", ".")
    assert selected == DEVICE and seconds < DEADLINE_S
    assert (
        "Failed to load LMCache device plugin 'broken'" in log
        and "libfoo.so not found" in log
    )


def test_an_entry_point_named_differently_from_its_backend_is_refused_with_the_reason(
    beside_faulty_plugins: tuple[dict[str, str], str, str, float],
) -> None:
    """An entry point ``other = <this spec>``: LMCache refuses that one, naming both
    names; ours still loads."""
    backends, _, log, _ = beside_faulty_plugins
    assert "misnamed" not in backends and BACKEND in backends
    assert (
        "entry-point name must match DeviceSpec.backend_name "
        f"('misnamed' != {BACKEND!r})" in log
    )


def test_a_duplicate_backend_name_keeps_one_spec_and_logs_which_it_ignored(
    tmp_path: Path,
) -> None:
    """Two plugins claiming one backend name: LMCache keeps one (entry-point value
    order) and logs the other."""
    root = fake_plugin(
        tmp_path,
        "impostor",
        f"{BACKEND} = impostor_plugin:RivalSpec",
        "impostor_plugin",
        RIVAL_SPEC.replace("__BACKEND__", BACKEND),
    )
    backends, _, log, _ = registry(root)
    kept = backends[BACKEND]
    ignored = "RivalSpec" if kept == SPEC_PATH.replace(":", ".") else SPEC_CLASS
    assert (
        f"Ignoring DeviceSpec {ignored} because backend_name {BACKEND!r} "
        "is already registered" in log
    )


def test_an_unknown_backend_name_fails_import_naming_the_registered_backends() -> None:
    """LMCACHE_DEVICE_BACKEND=<typo>: ``import lmcache`` raises at once, listing the
    backends to choose from."""
    started = time.monotonic()
    done = run_python(
        "import lmcache",
        {**CLEAN, "LMCACHE_DEVICE_BACKEND": f"{BACKEND}_typo"},
        timeout=DEADLINE_S + 30,
    )
    assert done.returncode != 0 and time.monotonic() - started < DEADLINE_S
    assert f"LMCACHE_DEVICE_BACKEND='{BACKEND}_typo' is not registered" in done.stderr
    assert BACKEND in done.stderr.split("Available backends:", 1)[1]
