# SPDX-License-Identifier: Apache-2.0
"""The rules a set of template answers must follow to render a package LMCache can load, each with its fix.

Defined once, here, and used twice by ``hooks/answer_checks.py``: as a person types (each answer is checked
when the next derived default renders, and a refused one is asked again with the value to type instead), and
before anything is written (every answer and every combination, refused with one corrected command). Plain
Python on plain data: it imports neither Jinja nor cookiecutter, and never evaluates an answer.

A rule returns a ``Refusal``: the message a person reads (what is wrong, why, what to type) and ``fix``, the
answers that make it work, so that a refusal can be turned into a command that renders.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*\Z")
DOTTED_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
CLASS_PREFIX = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
PROJECT_SLUG = re.compile(r"[a-z0-9]+([-_.][a-z0-9]+)*\Z")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+\Z")
VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?\Z")
#: Longer names push generated lines past the 88 columns the rendered code is linted at (LMCache's style).
MAX_NAME = 24


@dataclass(frozen=True)
class Refusal:
    """Why some answers cannot render, and the answers that make them render (the first fix the message names)."""

    message: str
    fix: dict[str, str]


def suggest_identifier(value: str) -> str:
    """A lowercase identifier close to ``value``."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", value.strip().lower()).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "dev_" + cleaned
    return cleaned[:MAX_NAME]


def suggest_name(value: str, builtins: Mapping[str, str]) -> str:
    """A valid, non-built-in LMCache name close to ``value``."""
    name = suggest_identifier(value)
    return "acme_" + name if name in builtins or keyword.iskeyword(name) else name


def by_release(names: Mapping[str, str]) -> str:
    """``{"cpu": "0.5.4", "mlu": "0.5.7"}`` -> ``cpu (0.5.4), mlu (0.5.7)``: each name with the lmcache
    release it arrived in (cookiecutter.json; 0.5.4 is the first release with device plugins)."""
    return ", ".join(f"{name} ({release})" for name, release in names.items())


def release_key(release: str) -> tuple[int, ...]:
    """``"0.5.10"`` -> ``(0, 5, 10)``: final releases in order (cookiecutter.json lists finals only)."""
    return tuple(int(part) for part in release.split("."))


def extendable_builtins(device_types: Mapping[str, str]) -> tuple[str, ...]:
    """The built-in backends a render can extend (``_builtin_device_types``: built-in -> its device type): LMCache's
    default backend of each device type, the built-in named as its device type (``get_device_spec``'s default), as
    ``cuda`` is for device type ``cuda``, which ``rocm`` shares."""
    return tuple(sorted(name for name, device_type in device_types.items() if name == device_type))


def extended_builtin(device: str, facts: Mapping[str, Any]) -> str:
    """The built-in backend a render on ``device`` extends (``extendable_builtins``), or "" for a device LMCache has
    no backend for."""
    return device if device in extendable_builtins(facts["_builtin_device_types"]) else ""


def extension_releases(facts: Mapping[str, Any]) -> list[str]:
    """The tested LMCache releases a render that extends a built-in supports: from the release the built-in's location
    holds for (``_builtin_extension_since``) and the built-in exists in; none when the built-in is newer."""
    builtin = extended_builtin(str(facts["device_name"]), facts)
    floor = max(facts["_builtin_extension_since"], facts["_builtin_backends"][builtin], key=release_key)
    return [release for release in facts["_lmcache_tested"] if release_key(release) >= release_key(floor)]


def tested_releases(facts: Mapping[str, Any]) -> list[str]:
    """The tested LMCache releases a render supports: all of them, or for one that extends a built-in
    ``extension_releases`` (all of them while ``builtin_device_problem`` refuses it: it renders nothing)."""
    if not extended_builtin(str(facts["device_name"]), facts):
        return list(facts["_lmcache_tested"])
    return extension_releases(facts) or list(facts["_lmcache_tested"])


def builtin_device_problem(value: str, facts: Mapping[str, Any]) -> tuple[str, str] | None:
    """Why ``device_name=value``, which a built-in backend has, cannot render (None if it can)."""
    builtins, types = facts["_builtin_backends"], facts["_builtin_device_types"]
    if value not in builtins:
        return None
    if types.get(value) != value:
        return (f"device_name={value!r} is LMCache's built-in {value} backend, not a torch device type: its tensors "
                f"report device type {types[value]!r}. A backend of your own on that device type is "
                f"device_name={types[value]!r} with a backend_name of your own", types[value])  # fmt: skip
    if not extension_releases({**facts, "device_name": value}):
        return (f"device_name={value!r} would extend LMCache's built-in {value} backend, which arrives in lmcache "
                f"{builtins[value]}, newer than every release this template tests "
                f"({', '.join(facts['_lmcache_tested'])}). Choose a device type of your own, or wait for a "
                "template that tests that release", "acme_" + value)  # fmt: skip
    return None


def lmcache_name_problem(field: str, value: str, builtins: Mapping[str, str]) -> tuple[str, str] | None:
    """Rules LMCache applies to device_type/backend_name, plus Python's for module names: (why, a closer name).

    A device type a built-in backend has is not refused here: ``builtin_device_problem`` says when it renders."""
    if not IDENTIFIER.match(value) or len(value) > MAX_NAME:
        return (f"{field}={value!r} must be a lowercase Python identifier of at most {MAX_NAME} characters "
                "(letters, digits, underscores; starting with a letter)", suggest_name(value, builtins))  # fmt: skip
    if keyword.iskeyword(value) or keyword.issoftkeyword(value):
        return f"{field}={value!r} is a Python keyword; choose another name", value + "_dev"
    if value in builtins and field == "backend_name":
        return (f"{field}={value!r} is one of LMCache's built-in backends (built in since lmcache {builtins[value]}; "
                f"all of them: {by_release(builtins)}); LMCache keeps the built-in and ignores a plugin of the same "
                "name. Choose a vendor-specific name", "acme_" + value)  # fmt: skip
    if field == "device_name" and any(ch.isdigit() for ch in value):  # torch's device-string grammar
        return (f"device_name={value!r} has digits, which torch device types cannot have: "
                f"torch.device('{value}:0') raises 'Invalid device string', so torch.{value} could not be "
                "registered and LMCache would never find the device. Use letters and underscores "
                "(backend_name may keep digits)",
                re.sub(r"_+", "_", re.sub(r"\d+", "", value)).strip("_") or "acme")  # fmt: skip
    return None


def name_refusal(field: str, value: str, answers: Mapping[str, Any]) -> Refusal | None:
    """The first rule ``value`` breaks, with a name that breaks none (a closer name can break the next rule)."""
    builtins = answers["_builtin_backends"]

    def problem_of(name: str) -> tuple[str, str] | None:
        found = lmcache_name_problem(field, name, builtins)
        return found if found or field != "device_name" else builtin_device_problem(name, answers)

    problem = problem_of(value)
    if problem is None:
        return None
    suggestion = problem[1]
    for _ in range(5):  # each step fixes one rule; five rules
        closer = problem_of(suggestion)
        if closer is None:
            break
        suggestion = closer[1]
    return Refusal(f"{problem[0]}, for example {field}={suggestion!r}", {field: suggestion})


def module_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if not value or DOTTED_MODULE.match(value):
        return None
    fix = ".".join(re.sub(r"\W+", "_", part).strip("_") or "torch" for part in value.split("."))
    fix = fix if DOTTED_MODULE.match(fix) else f"torch_{answers['device_name']}"
    return Refusal(f"torch_extension_module={value!r} must be an importable module name such as 'torch_acme' or "
                   "'acme.torch_ext', or empty when torch has the device built in, for example "
                   f"torch_extension_module={fix!r}", {"torch_extension_module": fix})  # fmt: skip


def package_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if value in ("lmcache", "torch"):
        fix = f"lmcache_{answers['device_name']}"
        return Refusal(f"import_package={value!r} would shadow the real {value}; use 'lmcache_<device>', "
                       f"for example import_package={fix!r}", {"import_package": fix})  # fmt: skip
    if not IDENTIFIER.match(value) or keyword.iskeyword(value) or len(value) > MAX_NAME + 8:
        fix = suggest_identifier(value)
        fix = "lmcache_" + fix if keyword.iskeyword(fix) or fix in ("lmcache", "torch") else fix
        return Refusal(f"import_package={value!r} must be a lowercase Python identifier of at most {MAX_NAME + 8} "
                       f"characters and not a keyword, for example import_package={fix!r}",
                       {"import_package": fix})  # fmt: skip
    return None


def slug_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if PROJECT_SLUG.match(value):
        return None
    fix = "-".join(re.findall(r"[a-z0-9]+", value.lower())) or f"lmcache-{answers['device_name']}-device"
    return Refusal(f"project_slug={value!r} must be a distribution name of lowercase letters, digits and single "
                   "'-', '_' or '.' separators (one directory name), such as 'lmcache-acme-device', for example "
                   f"project_slug={fix!r}", {"project_slug": fix})  # fmt: skip


def prefix_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if CLASS_PREFIX.match(value) and len(value) <= MAX_NAME:
        return None
    words = re.findall(r"[A-Za-z][A-Za-z0-9]*", value)
    fix = "".join(word[0].upper() + word[1:] for word in words)[:MAX_NAME] or "Acme"
    return Refusal(f"class_prefix={value!r} must be a CamelCase identifier of at most {MAX_NAME} characters such "
                   f"as 'Acme' (classes become AcmeDeviceSpec), for example class_prefix={fix!r}",
                   {"class_prefix": fix})  # fmt: skip


def author_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if value.strip() and not any(ord(ch) < 32 for ch in value):
        return None
    fix = " ".join(re.sub(r"[\x00-\x1f]", " ", value).split()) or "Acme Corp."
    return Refusal(f"author_name={value!r} must be a non-empty single line such as 'Acme Corp.', for example "
                   f"author_name={fix!r}", {"author_name": fix})  # fmt: skip


def email_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if EMAIL.match(value):
        return None
    fix = f"lmcache-{answers['device_name'].replace('_', '-')}@example.com"
    return Refusal(f"author_email={value!r} must look like name@example.com, for example author_email={fix!r}",
                   {"author_email": fix})


def version_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if VERSION.match(value):
        return None
    return Refusal(f"version={value!r} must be a PEP 440 version such as '0.1.0'", {"version": "0.1.0"})


#: Answers typed as text that take one of a few values (their default follows the device: ``emulator`` is ``no``
#: for a device type a built-in backend has, which the emulator cannot be).
TEXT_CHOICES = {"emulator": ("yes", "no")}


def emulator_refusal(value: str, answers: Mapping[str, Any]) -> Refusal | None:
    if value in TEXT_CHOICES["emulator"]:
        return None
    fix = "no" if extended_builtin(str(answers["device_name"]), answers) else "yes"  # its default, as derived
    return Refusal(f"emulator={value!r} must be one of {', '.join(TEXT_CHOICES['emulator'])}, for example "
                   f"emulator={fix!r}", {"emulator": fix})  # fmt: skip


#: Each answer's own rules, in prompt order; an answer not here (a choice) is checked by cookiecutter itself.
FIELD_RULES: dict[str, Callable[[str, Mapping[str, Any]], Refusal | None]] = {
    "device_name": lambda value, answers: name_refusal("device_name", value, answers),
    "backend_name": lambda value, answers: name_refusal("backend_name", value, answers),
    "torch_extension_module": module_refusal,
    "emulator": emulator_refusal,
    "project_slug": slug_refusal,
    "import_package": package_refusal,
    "class_prefix": prefix_refusal,
    "author_name": author_refusal,
    "author_email": email_refusal,
    "version": version_refusal,
}


def field_refusal(field: str, answers: Mapping[str, Any]) -> Refusal | None:
    """What is wrong with ``answers[field]`` on its own (None if nothing, or if no rule is about it)."""
    rule = FIELD_RULES.get(field)
    return None if rule is None else rule(str(answers[field]), answers)


def combination_refusals(answers: Mapping[str, Any]) -> list[Refusal]:
    """Choices that are each valid but cannot work together, with the change that makes them work."""
    found: list[Refusal] = []
    device = str(answers["device_name"])
    emulator = answers["emulator"] == "yes"
    found += extension_refusals(answers)  # a backend that extends a built-in: its own reasons
    own_device = not extended_builtin(device, answers)
    if own_device and emulator and device in answers["_torch_builtin_devices"]:
        found.append(Refusal(
            f"emulator='yes' cannot emulate device_name={device!r}: torch already has a {device!r} device type, "
            "and the emulator registers its device through PyTorch's PrivateUse1 slot, which can only take a new "
            "name. Set emulator='no' and run the tests on the real device", {"emulator": "no"}))  # fmt: skip
    elif own_device and emulator and not str(answers["torch_extension_module"]):
        found.append(Refusal(
            f"emulator='yes' with an empty torch_extension_module says torch has {device!r} built in, which the "
            "emulator cannot replace. Set emulator='no' (torch has the device built in), or name the module that "
            f"creates torch.{device}, for example torch_extension_module='torch_{device}'",
            {"emulator": "no"}))  # fmt: skip
    if answers["ownership"] == "in_tree" and answers["native_ops"] == "yes":
        found.append(Refusal(
            "ownership='in_tree' with native_ops='yes' is not rendered: in LMCache's tree, native kernels belong in "
            "LMCache's own csrc/ and setup.py build (lmcache.lmcache_native), which this template cannot edit. "
            "Set native_ops='no' for the in-tree contribution (it uses the torch baseline), or ownership='wheel'",
            {"native_ops": "no"}))  # fmt: skip
    backend = str(answers["backend_name"])
    tags = answers["_lmcache_wire_tags"]
    if answers["ownership"] == "in_tree" and answers["lmcache_driven"] != "no" and backend in tags:
        found.append(Refusal(
            f"ownership='in_tree' with lmcache_driven tags the IPC wire type with backend_name={backend!r}, which "
            f"LMCache's ipc_wire.py already uses ({by_release(tags)}); the codec would refuse the duplicate. "
            f"Choose another backend_name, for example backend_name={'acme_' + backend!r}",
            {"backend_name": "acme_" + backend}))  # fmt: skip
    if answers["ownership"] == "in_tree" and answers["license"] != "Apache-2.0":
        found.append(Refusal(
            f"ownership='in_tree' contributes the backend to LMCache, which is Apache-2.0 licensed; "
            f"license={answers['license']!r} cannot be merged there. Set license='Apache-2.0', or ownership='wheel'",
            {"license": "Apache-2.0"}))  # fmt: skip
    return found


def extension_refusals(answers: Mapping[str, Any]) -> list[Refusal]:
    """What a backend that extends a built-in (a CUDA look-alike on device type cuda) cannot have: it reuses the
    built-in's device, ops and IPC parts, so no emulator, no sample native ops, and a wheel of its own."""
    device = str(answers["device_name"])
    builtin = extended_builtin(device, answers)
    if not builtin:
        return []
    reason = f"device_name={device!r} extends LMCache's built-in {builtin} backend (its ops, IPC, events and pinning)"
    found = []
    if answers["emulator"] == "yes":
        found.append(Refusal(
            f"{reason}; emulator='yes' cannot be torch.{device}: the CPU emulator registers a new device type through "
            "PyTorch's PrivateUse1 slot. Set emulator='no' (the suite runs the device tests on a host with the "
            "device)", {"emulator": "no"}))  # fmt: skip
    if answers["native_ops"] == "yes":
        found.append(Refusal(
            f"{reason}; native_ops='yes' renders the sample's own ops, which it does not have: your kernels, built "
            "with your compiler, override the built-in's ops class (device.py's ops_cls). Set native_ops='no'",
            {"native_ops": "no"}))  # fmt: skip
    if answers["ownership"] == "in_tree":
        found.append(Refusal(
            f"{reason}; ownership='in_tree' is not rendered for it: the template renders such a backend as a wheel "
            "of its own over an unmodified LMCache. Set ownership='wheel'", {"ownership": "wheel"}))  # fmt: skip
    return found
