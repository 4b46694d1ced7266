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


def lmcache_name_problem(field: str, value: str, builtins: Mapping[str, str]) -> tuple[str, str] | None:
    """Rules LMCache applies to device_type/backend_name, plus Python's for module names: (why, a closer name)."""
    if not IDENTIFIER.match(value) or len(value) > MAX_NAME:
        return (f"{field}={value!r} must be a lowercase Python identifier of at most {MAX_NAME} characters "
                "(letters, digits, underscores; starting with a letter)", suggest_name(value, builtins))  # fmt: skip
    if keyword.iskeyword(value) or keyword.issoftkeyword(value):
        return f"{field}={value!r} is a Python keyword; choose another name", value + "_dev"
    if value in builtins:
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
    problem = lmcache_name_problem(field, value, builtins)
    if problem is None:
        return None
    suggestion = problem[1]
    for _ in range(4):  # each step fixes one rule; four rules
        closer = lmcache_name_problem(field, suggestion, builtins)
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


#: Each answer's own rules, in prompt order; an answer not here (a choice) is checked by cookiecutter itself.
FIELD_RULES: dict[str, Callable[[str, Mapping[str, Any]], Refusal | None]] = {
    "device_name": lambda value, answers: name_refusal("device_name", value, answers),
    "backend_name": lambda value, answers: name_refusal("backend_name", value, answers),
    "torch_extension_module": module_refusal,
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
    # (An LMCache built-in name is already refused, with its own fix.)
    if emulator and device in answers["_torch_builtin_devices"] and device not in answers["_builtin_backends"]:
        found.append(Refusal(
            f"emulator='yes' cannot emulate device_name={device!r}: torch already has a {device!r} device type, "
            "and the emulator registers its device through PyTorch's PrivateUse1 slot, which can only take a new "
            "name. Set emulator='no' and run the tests on the real device", {"emulator": "no"}))  # fmt: skip
    elif emulator and not str(answers["torch_extension_module"]):
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
