# SPDX-License-Identifier: Apache-2.0
"""The sample backends the template proves, declared once, as data.

Everything else (the nox sessions, the matrix, the template's tests) reads the
variants from here; the sample device name appears nowhere else.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from packaging.version import Version

from hooks.answer_rules import TEXT_CHOICES

ROOT = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((ROOT / "cookiecutter.json").read_text())
#: The sample device the variants render (one renders an odd but valid name instead).
DEVICE = "foo"
#: The LMCache releases the rendered package supports, oldest first (cookiecutter.json; the rendered
#: requirement spans them: supporting a new final release is one line there).
LMCACHE_RELEASES: list[str] = CONTEXT["_lmcache_tested"]
NEWEST = LMCACHE_RELEASES[-1]
OLDEST = LMCACHE_RELEASES[0]
#: Pre-releases proven too (a tier of their own: the rendered canary on them, with its expected
#: differences), while they are newer than the newest tested final; a final's own candidates drop
#: out when it joins LMCACHE_RELEASES.
PRERELEASES: list[str] = [
    release for release in CONTEXT["_lmcache_prereleases"] if Version(release) > Version(NEWEST)
]


def chosen_release(arguments: list[str]) -> tuple[str, list[str]]:
    """``--lmcache <version|pre>`` taken out of a session's arguments: (the release it names, the other arguments).
    ``pre`` is the newest pre-release the template proves; without the option, the newest final. Any other value is
    refused, naming the releases there are."""
    rest, release = list(arguments), NEWEST
    if "--lmcache" in rest:
        at = rest.index("--lmcache")
        value = rest[at + 1] if at + 1 < len(rest) else ""
        del rest[at : at + 2]
        known = [*LMCACHE_RELEASES, *PRERELEASES]
        release = (PRERELEASES[-1] if PRERELEASES else "") if value == "pre" else value
        if release not in known:
            raise ValueError(f"--lmcache {value!r}: choose one of {', '.join(known)} or 'pre' (the newest pre-release "
                             f"newer than {NEWEST}: {', '.join(PRERELEASES) or 'none now'})")  # fmt: skip
    return release, rest


#: The options a variant chooses, each with its values (the first is the template's default).
OPTIONS = ("ownership", "lmcache_driven", "native_ops", "emulator")
#: Each option's values, the template's default first, for a device LMCache has no backend for (the sample's): a
#: choice's, or those of an answer typed as text whose default follows the device (``hooks/answer_rules.py``).
CHOICES: dict[str, list[str]] = {
    option: CONTEXT[option] if isinstance(CONTEXT[option], list) else list(TEXT_CHOICES[option]) for option in OPTIONS
}
#: The backend that extends a built-in the template proves (a CUDA look-alike on device type cuda, as MetaX MACA):
#: rendered, built, installed and its suite run without the device (``extends_builtin``).
BUILTIN_EXTENSION = {"device_name": "cuda", "backend_name": "maca"}

#: The variants proven end to end (render, build, install, the whole suite against real servers),
#: by name. Between them every value of every option is proven end to end at least once: they are
#: the heavy subset of the option matrix.
VARIANTS: dict[str, dict[str, str]] = {
    # The representative pass: every rendered module, both transfer modes, every sub-path.
    "native-lmcache-driven": {"lmcache_driven": "default", "native_ops": "yes"},
    "engine-driven": {"lmcache_driven": "no"},
    "lmcache-driven-default": {"lmcache_driven": "default"},
    # An odd but valid name (24 characters, underscores) proven end to end, not only rendered and built.
    "lmcache-driven-opt-in": {"lmcache_driven": "opt_in", "device_name": "acme_tensor_core_unit_xy"},
    # No emulator on a host without the device: the suite must skip what needs one and run the rest.
    "no-emulator": {"lmcache_driven": "default", "emulator": "no"},
    # In-tree contributions, overlaid onto an installed lmcache with their wire patch (in_tree session).
    "in-tree-lmcache-driven-default": {"ownership": "in_tree", "lmcache_driven": "default"},
    "in-tree-engine-driven": {"ownership": "in_tree", "lmcache_driven": "no"},
}
#: The emulator's runtime rules a variant's suite runs with changed from their defaults (each NAME: VALUE sets
#: ``<emulator env var>_NAME``), so the whole suite meets a runtime like that; the rendered README's table of
#: emulator rules says which runtimes each stands for.
EMULATOR_RUNTIMES: dict[str, dict[str, str]] = {
    # torch_musa: no host functions (every publish synchronizes its stream first), CUDA's IPC (any process opens a
    # handle: no importer allowlist).
    "lmcache-driven-default": {"HOST_FUNCS": "0", "IPC": "cuda"},
    # CUDA with expandable segments (or vLLM's sleep mode): device memory from a VMM allocator, which legacy IPC
    # cannot export; the wrapper shares it as a file descriptor.
    "lmcache-driven-opt-in": {"VMM": "1"},
}
#: The host-function models (the rendered runtime.py's ``host_function_model``) besides the one the emulator runs by
#: default, which the sample answers with (``launch``): the tests marked ``publishes`` run again under each on the
#: representative variant in CI (``lmcache_releases`` on the newest release), each emulator rule as above.
OTHER_HOST_FUNCTION_MODELS: dict[str, dict[str, str]] = {
    "subscribed": {"HOST_FUNCS": "subscribed"},  # Ascend: callbacks run on a thread subscribed to their stream
    "none": {"HOST_FUNCS": "0"},  # torch_npu, torch_musa: synchronize, then publish
}
#: What ``nox -s generate_and_test`` proves with no arguments.
REPRESENTATIVE = "native-lmcache-driven"
#: LMCache's own test suites the representative variant runs in the release sessions (CI): on the newest release
#: and the pre-releases, where LMCache's server code is new, all of them; QUICK_CONTRACT_SUITES on older releases
#: and in ``generate_and_test`` (the multiprocess one starts servers for one to two minutes).
CONTRACT_SUITES = ("platform", "multiprocess", "devices")
#: The platform suite (its sdist) and the devices one: LMCache's per-device tests, ported to the plugin
#: (the kit's classes, subclassed in tests/test_lmcache_ports.py; no sdist; about 9 s).
QUICK_CONTRACT_SUITES = ("platform", "devices")
#: What ``lmcache_releases`` proves on a release older than the newest (``-- all``: every wheel variant):
#: the variants whose code differs by release. The compat layer's capability spellings, wire format
#: (pickle before 0.5.6) and transfer-mode resolution all run in the representative pass; the spec
#: without LMCache-driven transfer is the other shape the compat layer must serve.
OLDER_RELEASE_VARIANTS = [REPRESENTATIVE, "engine-driven"]
#: What ``lmcache_releases`` proves on a pre-release (``-- all``, ``-- engine-driven``: more): the representative
#: variant has every rendered module and both transfer modes; its canary covers LMCache's interface.
PRERELEASE_VARIANTS = [REPRESENTATIVE]
#: Combinations the answer checks refuse (hooks/answer_rules.py; tests/test_hooks.py proves each refusal).
REFUSED = {("in_tree", "yes"): "in-tree native ops belong in LMCache's own csrc/ build"}
_IDS = {
    "lmcache_driven": {"no": "engine_driven", "opt_in": "lmcache_driven_opt_in", "default": "lmcache_driven_default"},
    "native_ops": {"no": "torch_ops", "yes": "native_ops"},
    "emulator": {"yes": "emulator", "no": "no_emulator"},
}


def answers(variant: dict[str, str]) -> dict[str, str]:
    """Every option of ``variant`` with the template's defaults filled in, and its device (the sample's by default)."""
    full = {"device_name": variant.get("device_name", DEVICE)}
    for option in OPTIONS:
        full[option] = variant.get(option, CHOICES[option][0])
    return full


def is_in_tree(variant: dict[str, str]) -> bool:
    return answers(variant)["ownership"] == "in_tree"


def combination(variant: dict[str, str]) -> tuple[str, ...]:
    """(ownership, lmcache_driven, native_ops, emulator) of a variant."""
    full = answers(variant)
    return tuple(full[option] for option in OPTIONS)


def combination_id(combo: tuple[str, ...]) -> str:
    """A readable id, e.g. ``in_tree-lmcache_driven_default-torch_ops-emulator``."""
    ownership, *rest = combo
    return "-".join([ownership, *(_IDS[option][value] for option, value in zip(OPTIONS[1:], rest, strict=True))])


def matrix() -> list[tuple[str, ...]]:
    """Every combination of the options, minus the refused ones."""
    combos = itertools.product(*(CHOICES[option] for option in OPTIONS))
    return [combo for combo in combos if (combo[0], combo[2]) not in REFUSED]


#: The heavy subset: combination -> the variant that proves it end to end.
HEAVY = {combination(variant): name for name, variant in VARIANTS.items()}
