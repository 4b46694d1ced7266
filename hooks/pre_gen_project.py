# SPDX-License-Identifier: Apache-2.0
"""Refuse template answers that would render a package LMCache cannot load.

Cookiecutter runs this after the answers are known and before any file is
written (it removes the project directory when this exits non-zero), so a
refused render leaves nothing behind. Every message names the value to type
instead.

The answers arrive as JSON data (``tojson``), never pasted into Python source,
so a value containing quotes, newlines or code cannot change what runs here.
"""

from __future__ import annotations

import json
import keyword
import re
import sys

ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")

IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*\Z")
DOTTED_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
CLASS_PREFIX = re.compile(r"[A-Z][A-Za-z0-9]*\Z")
PROJECT_SLUG = re.compile(r"[a-z0-9]+([-_.][a-z0-9]+)*\Z")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+\Z")
VERSION = re.compile(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?\Z")
#: Longer names push generated lines past the 88 columns the rendered code is linted at (LMCache's style).
MAX_NAME = 24


def suggest_identifier(value: str) -> str:
    """A lowercase identifier close to ``value`` (for the error message)."""
    cleaned = re.sub(r"[^a-z0-9_]+", "_", value.strip().lower()).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "dev_" + cleaned
    return cleaned[:MAX_NAME]


def suggest_name(value: str, builtins: dict[str, str]) -> str:
    """A valid, non-built-in LMCache name close to ``value``."""
    name = suggest_identifier(value)
    return "acme_" + name if name in builtins or keyword.iskeyword(name) else name


def check_lmcache_name(field: str, value: str, builtins: dict[str, str]) -> list[str]:
    """Rules LMCache applies to device_type/backend_name, plus Python's for module names."""
    if not IDENTIFIER.match(value) or len(value) > MAX_NAME:
        return [
            f"{field}={value!r} must be a lowercase Python identifier of at most {MAX_NAME} "
            f"characters (letters, digits, underscores; starting with a letter), "
            f"for example {field}={suggest_name(value, builtins)!r}"
        ]
    if keyword.iskeyword(value) or keyword.issoftkeyword(value):
        return [f"{field}={value!r} is a Python keyword; choose another name, for example {field}={value + '_dev'!r}"]
    if value in builtins:
        return [
            f"{field}={value!r} is one of LMCache's built-in backends (built in since lmcache {builtins[value]}; "
            f"all of them: {by_release(builtins)}); LMCache keeps the built-in and ignores a plugin of the same name. "
            f"Choose a vendor-specific name, for example {field}={'acme_' + value!r}"
        ]
    return []


def by_release(names: dict[str, str]) -> str:
    """``{"cpu": "0.5.4", "mlu": "0.5.7"}`` -> ``cpu (0.5.4), mlu (0.5.7)``: each name with the lmcache
    release it arrived in (cookiecutter.json; 0.5.4 is the first release with device plugins)."""
    return ", ".join(f"{name} ({release})" for name, release in names.items())


def check_torch_device_type(value: str, builtins: dict[str, str]) -> list[str]:
    """torch's device-string grammar: a device type is letters and underscores only (no digits)."""
    if not IDENTIFIER.match(value) or not any(ch.isdigit() for ch in value):
        return []  # not an identifier: check_lmcache_name already said so
    suggestion = suggest_name(re.sub(r"_+", "_", re.sub(r"\d+", "", value)).strip("_") or "acme", builtins)
    return [
        f"device_name={value!r} has digits, which torch device types cannot have: "
        f"torch.device('{value}:0') raises 'Invalid device string', so torch.{value} could not be registered "
        f"and LMCache would never find the device. Use letters and underscores, for example "
        f"device_name={suggestion!r} (backend_name may keep digits)"
    ]


def problems(answers: dict) -> list[str]:
    """Every reason the answers cannot render a working package (empty if none)."""
    builtins: dict[str, str] = answers["_builtin_backends"]
    found: list[str] = []
    for field in ("device_name", "backend_name"):
        found += check_lmcache_name(field, str(answers[field]), builtins)
    found += check_torch_device_type(str(answers["device_name"]), builtins)

    extension = str(answers["torch_extension_module"])
    if extension and not DOTTED_MODULE.match(extension):
        found.append(
            f"torch_extension_module={extension!r} must be an importable module name such as "
            "'torch_acme' or 'acme.torch_ext', or empty when torch has the device built in"
        )

    package = str(answers["import_package"])
    if not IDENTIFIER.match(package) or keyword.iskeyword(package) or len(package) > MAX_NAME + 8:
        found.append(
            f"import_package={package!r} must be a lowercase Python identifier of at most {MAX_NAME + 8} "
            f"characters, for example import_package={suggest_identifier(package)!r}"
        )
    elif package in ("lmcache", "torch"):
        found.append(f"import_package={package!r} would shadow the real {package}; use 'lmcache_<device>'")

    slug = str(answers["project_slug"])
    if not PROJECT_SLUG.match(slug):
        found.append(
            f"project_slug={slug!r} must be a distribution name of lowercase letters, digits and "
            "single '-', '_' or '.' separators, for example 'lmcache-acme-device'"
        )

    prefix = str(answers["class_prefix"])
    if not CLASS_PREFIX.match(prefix) or len(prefix) > MAX_NAME:
        found.append(f"class_prefix={prefix!r} must be a CamelCase identifier of at most {MAX_NAME} characters such as 'Acme' (classes become AcmeDeviceSpec)")

    author = str(answers["author_name"])
    if not author.strip() or any(ord(ch) < 32 for ch in author):
        found.append(f"author_name={author!r} must be a non-empty single line, for example 'Acme Corp.'")
    email = str(answers["author_email"])
    if not EMAIL.match(email):
        found.append(f"author_email={email!r} must look like name@example.com")

    found += combination_problems(answers)

    version = str(answers["version"])
    if not VERSION.match(version):
        found.append(f"version={version!r} must be a PEP 440 version such as '0.1.0'")
    return found


def combination_problems(answers: dict) -> list[str]:
    """Choices that are each valid but cannot work together, with the change that makes them work."""
    found: list[str] = []
    device = str(answers["device_name"])
    emulator = answers["emulator"] == "yes"
    # (An LMCache built-in name is already refused, with its own fix.)
    if emulator and device in answers["_torch_builtin_devices"] and device not in answers["_builtin_backends"]:
        found.append(
            f"emulator='yes' cannot emulate device_name={device!r}: torch already has a {device!r} device type, "
            "and the emulator registers its device through PyTorch's PrivateUse1 slot, which can only take a new name. "
            "Set emulator='no' and run the tests on the real device"
        )
    elif emulator and not str(answers["torch_extension_module"]):
        found.append(
            f"emulator='yes' with an empty torch_extension_module says torch has {device!r} built in, which the "
            "emulator cannot replace. Set emulator='no' (torch has the device built in), or name the module that "
            f"creates torch.{device}, for example torch_extension_module='torch_{device}'"
        )
    if answers["ownership"] == "in_tree" and answers["native_ops"] == "yes":
        found.append(
            "ownership='in_tree' with native_ops='yes' is not rendered: in LMCache's tree, native kernels belong in "
            "LMCache's own csrc/ and setup.py build (lmcache.lmcache_native), which this template cannot edit. "
            "Set native_ops='no' for the in-tree contribution (it uses the torch baseline), or ownership='wheel'"
        )
    backend = str(answers["backend_name"])
    if answers["ownership"] == "in_tree" and answers["lmcache_driven"] != "no" and backend in answers["_lmcache_wire_tags"]:
        found.append(
            f"ownership='in_tree' with lmcache_driven tags the IPC wire type with backend_name={backend!r}, which "
            f"LMCache's ipc_wire.py already uses ({by_release(answers['_lmcache_wire_tags'])}); the codec would refuse "
            f"the duplicate. Choose another backend_name, for example backend_name={'acme_' + backend!r}"
        )
    if answers["ownership"] == "in_tree" and answers["license"] != "Apache-2.0":
        found.append(
            f"ownership='in_tree' contributes the backend to LMCache, which is Apache-2.0 licensed; "
            f"license={answers['license']!r} cannot be merged there. Set license='Apache-2.0', or ownership='wheel'"
        )
    return found


def main() -> int:
    found = problems(ANSWERS)
    if not found:
        return 0
    print("lmcache-device-template: cannot render with these answers:", file=sys.stderr)
    for message in found:
        print(f"  - {message}", file=sys.stderr)
    print("Nothing was written. Run cookiecutter again with the values above.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
