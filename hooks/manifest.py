# SPDX-License-Identifier: Apache-2.0
"""The optional parts of a render, listed once, and what a set of answers leaves out.

Why: the template's files have plain names (Jinja in names is for the backend's names
only), so tools read the template tree as it is; which files an answer set keeps is
decided here, in ``PARTS``, and the post-generation hook deletes the rest
(``hooks/post_gen_project.py`` calls ``dropped_paths`` through the Jinja extension in
``hooks/manifest_extension.py``, listed in ``_extensions``). Imports no jinja2: the
template's automation (``tasks/checks.py``) reads ``PARTS`` in nox's own environment. Adding an option touches ``cookiecutter.json``, ``PARTS``,
the answer rules (``hooks/answer_rules.py``) and the files the option adds.

A file in no part is rendered for every answer set. A path may name a directory (all
of it goes). Paths are relative to the project directory, as the template names them.

``COPIES`` lists the other way round what an answer set adds from beside the template:
the kit's run-time LMCache shims (``kit/src/lmcache_device_kit/compat``), which a
wheel requires as a dependency but LMCache's tree cannot, so an in-tree backend carries
a copy of them (the hook copies them, unrendered: they stay written once, in the kit);
and ``KIT_SOURCE``, the kit's module that says where a wheel render's sessions take the
kit from, which runs before the kit is installed, so it sits beside the noxfile.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from hooks.answer_rules import extendable_builtins

if TYPE_CHECKING:  # the template's automation imports PARTS where jinja2 is not installed
    from jinja2 import Environment

PACKAGE = "{{cookiecutter.__package_dir}}"
TESTS = "{{cookiecutter.__tests_dir}}"
BACKEND = "{{cookiecutter.backend_name}}"
LMCACHE_DRIVEN = ("opt_in", "default")
#: ``__extends`` of a render for a device LMCache has no backend for (its own ops, IPC parts, emulator).
OWN_DEVICE = ("",)
#: ``__extends`` of a render that extends a built-in backend (``answer_rules.extendable_builtins``).
EXTENDS_BUILTIN = extendable_builtins(
    json.loads((Path(__file__).resolve().parent.parent / "cookiecutter.json").read_text())["_builtin_device_types"]
)
KIT_PACKAGE = Path(__file__).resolve().parent.parent / "kit" / "src" / "lmcache_device_kit"
#: The kit's run-time shims, beside the template, and where an in-tree backend keeps its copy.
KIT_COMPAT = KIT_PACKAGE / "compat"
COMPAT_COPY = f"{PACKAGE}/_compat"


class Part(NamedTuple):
    """Files kept only when every option in ``when`` has one of its listed answers."""

    name: str
    when: Mapping[str, tuple[str, ...]]
    paths: tuple[str, ...]


PARTS = (
    Part(
        "a wheel of its own: packaging, CI, the spec module, the doctor",
        {"ownership": ("wheel",)},
        (
            ".github/dependabot.yml",
            ".github/workflows/ci.yml",
            ".github/workflows/release.yml",
            ".gitattributes",
            ".gitignore",
            "CHANGELOG.md",
            ".pre-commit-config.yaml",
            "LICENSE",
            "README.md",
            "noxfile.py",
            "pyproject.toml",
            f"{PACKAGE}/device.py",
            f"{PACKAGE}/doctor.py",
            f"{PACKAGE}/py.typed",
        ),
    ),
    Part("an LMCache contribution's PR text", {"ownership": ("in_tree",)}, ("PR_DESCRIPTION.md",)),
    Part(
        "the wire patch an in-tree LMCache-driven backend applies to LMCache",
        {"ownership": ("in_tree",), "lmcache_driven": LMCACHE_DRIVEN},
        ("patches/0001-ipc-wire-{{ cookiecutter.backend_name }}.patch",),
    ),
    Part(
        "the backend's own KV-cache ops (one that extends a built-in backend takes the built-in's)",
        {"__extends": OWN_DEVICE},
        (f"{PACKAGE}/device_ops.py",),
    ),
    Part(
        "how a backend that extends a built-in one knows its runtime is here (the spec, the doctor, the tests)",
        {"__extends": EXTENDS_BUILTIN},
        (f"{PACKAGE}/detect.py",),
    ),
    Part(
        "LMCache-driven transfer: IPC wrapper, cache context, events, pinning (a backend that extends a built-in "
        "takes the built-in's)",
        {"lmcache_driven": LMCACHE_DRIVEN, "__extends": OWN_DEVICE},
        tuple(
            f"{PACKAGE}/{name}"
            for name in (
                "_ipc_rendezvous.py",
                "cache_context.py",
                "event_ipc.py",
                "ipc_wrapper.py",
                "pin_memory.py",
                "runtime.py",
            )
        ),
    ),
    Part(
        "native ops: the C++ extension and its build",
        {"native_ops": ("yes",)},
        (
            "setup.py",
            *(
                f"{PACKAGE}/{name}"
                for name in ("_host_access.py", "_kernels.cpp", "_native_plan.py", "_recorders.cpp", "native_ops.py")
            ),
        ),
    ),
    Part("the CPU emulator of torch.<device>", {"emulator": ("yes",)}, ("{{cookiecutter.__emulator_dir}}",)),
    Part(
        "the sample kernels' own tests, on the emulator (the kit's suite reads only what native_ops declares)",
        {"native_ops": ("yes",), "emulator": ("yes",)},
        (f"{TESTS}/test_sample_kernels.py",),
    ),
    Part(
        "the kit's conformance suite, subclassed (LMCache's tree does not depend on the kit: the template runs it "
        "beside an in-tree contribution)",
        {"ownership": ("wheel",)},
        (f"{TESTS}/conftest.py", f"{TESTS}/test_conformance.py", f"{TESTS}/test_cluster.py"),
    ),
    Part(
        "an in-tree contribution's own tests, in LMCache's per-device style: support, transfers",
        {"ownership": ("in_tree",)},
        tuple(f"{TESTS}/test_{BACKEND}_{name}.py" for name in ("support", "transfer")),
    ),
    Part(
        "an in-tree engine-driven backend's capability surface, in LMCache's per-device style",
        {"ownership": ("in_tree",), "lmcache_driven": ("no",)},
        (f"{TESTS}/test_{BACKEND}_engine_driven.py",),
    ),
    Part(
        "an in-tree backend's LMCache-driven parts, tested in LMCache's per-device style",
        {"ownership": ("in_tree",), "lmcache_driven": LMCACHE_DRIVEN},
        tuple(f"{TESTS}/test_{BACKEND}_{name}.py" for name in ("ipc_wrapper", "cache_context", "event_ipc", "pin_memory")),
    ),
    Part(
        "LMCache's per-device tests, ported to a wheel's LMCache-driven parts",
        {"lmcache_driven": LMCACHE_DRIVEN, "ownership": ("wheel",), "__extends": OWN_DEVICE},
        (f"{TESTS}/test_lmcache_ports.py",),
    ),
)


#: The kit's shims an in-tree backend copies (names in ``KIT_COMPAT``): the modules it runs, not what only a wheel
#: does at load (``release``, ``wire``) nor what only the kit's doctor reads (``declared``).
COPIES = (
    Part(
        "the kit's run-time LMCache shims, copied into an in-tree backend",
        {"ownership": ("in_tree",)},
        ("__init__.py", "ops_support.py", "resolve.py", "spec.py", "surface.py"),
    ),
    Part(
        "the kit's KV layouts, for an in-tree backend's LMCache-driven transfer",
        {"ownership": ("in_tree",), "lmcache_driven": LMCACHE_DRIVEN},
        ("kv_layout.py",),
    ),
)


#: Where a wheel render's sessions take the kit from (``lmcache_device_kit/kit_source.py``): its noxfile loads it
#: before the kit is installed, so a wheel render carries a copy beside the noxfile (source, project-relative copy).
KIT_SOURCE = (KIT_PACKAGE / "kit_source.py", "kit_source.py")


def kept(part: Part, answers: Mapping[str, object]) -> bool:
    return all(answers[option] in choices for option, choices in part.when.items())


def dropped_paths(environment: Environment, answers: Mapping[str, object]) -> list[str]:
    """The project-relative paths (rendered) that ``answers`` leave out."""
    dropped = set()
    for part in PARTS:
        if not kept(part, answers):
            dropped.update(environment.from_string(path).render(cookiecutter=answers) for path in part.paths)
    return sorted(dropped)


def copied_files(environment: Environment, answers: Mapping[str, object]) -> list[tuple[str, str]]:
    """(the kit's source file, the project-relative path of its copy) of each kit file ``answers`` copy in."""
    target = environment.from_string(COMPAT_COPY).render(cookiecutter=answers)
    copies = [
        (str(KIT_COMPAT / name), f"{target}/{name}") for part in COPIES if kept(part, answers) for name in part.paths
    ]
    if answers["ownership"] == "wheel":
        copies.append((str(KIT_SOURCE[0]), KIT_SOURCE[1]))
    return copies
