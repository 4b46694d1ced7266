# SPDX-License-Identifier: Apache-2.0
"""Check the answers as they are typed, and all of them before anything is written (``hooks/answer_rules.py``).

Why a Jinja extension (listed in ``_extensions``) and not the pre-generation hook: cookiecutter runs its
extensions in its own process, at two moments a hook cannot reach.

- As a person types. Cookiecutter renders each prompt's default right after the previous answer, and every
  default derived from the device name reads it through the ``checked`` filter (cookiecutter.json). The filter
  checks every answer given so far; a refused one is reported there, once, and asked again with the value to
  type instead as its default, so no default is ever derived from a refused answer. Without a person
  (``--no-input``, the Python API) the filter derives from that value and leaves the refusal to the end.
- Before anything is written. The project directory's name is the first thing cookiecutter renders when it
  generates; here it goes through ``accepted_project_dir``, which checks every answer and combination and, on a
  refusal, stops with one corrected command. A hook script cannot end a run quietly: cookiecutter logs a
  failed hook with its traceback (hooks.py, ``run_hook_from_repo_dir``), whereas its command line prints a
  ``FailedHookException`` raised here as the message alone and exits 1 (cli.py). No directory exists yet, so
  a refusal leaves nothing behind, and ``--accept-hooks no`` cannot skip the checks.
"""

from __future__ import annotations

import json
import os
import shlex
from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import click
from cookiecutter.exceptions import FailedHookException
from cookiecutter.prompt import read_user_variable
from jinja2 import Environment
from jinja2.ext import Extension

from hooks.answer_rules import Refusal, combination_refusals, extended_builtin, field_refusal, tested_releases

TEMPLATE_ROOT = Path(__file__).resolve().parent.parent
PROJECT_DIR_TEMPLATE = "{{cookiecutter.project_slug}}"


def someone_is_typing() -> bool:
    """Whether cookiecutter's command line is asking a person (no ``--no-input``); the Python API never is."""
    context = click.get_current_context(silent=True)
    return context is not None and context.params.get("no_input") is False


class AnswerChecks(Extension):
    """The ``checked`` filter (the answers so far, as typed) and the project directory's final check."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.template: dict[str, Any] = json.loads((TEMPLATE_ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
        self.questions = [key for key in self.template if not key.startswith("_")]
        self.finishing = False
        environment.filters["checked"] = self.checked
        environment.filters["accepted_project_dir"] = self.accepted_project_dir
        environment.filters["extended_builtin"] = self.extended_builtin
        environment.filters["default_extension_module"] = self.default_extension_module
        environment.filters["tested_releases"] = self.tested_releases
        environment.filters["package_name"] = self.package_name

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if name is None and source.strip() == PROJECT_DIR_TEMPLATE:
            return "{{ cookiecutter | accepted_project_dir }}"
        return source

    def facts(self, answers: Mapping[str, Any]) -> ChainMap[str, Any]:
        """The answers, with the template's private data (built-in backends, wire tags) that the rules read."""
        private = {key: value for key, value in self.template.items() if key.startswith("_")}
        return ChainMap(dict(answers), private)

    def checked(self, answers: MutableMapping[str, Any], field: str) -> str:
        """``answers[field]`` once every answer so far keeps its rules. A refused answer is asked again, with the
        value to type instead as the default; without a person, that value stands in for it."""
        for name in [key for key in answers if key in self.questions]:
            refusal = field_refusal(name, self.facts(answers))
            while refusal is not None and someone_is_typing() and not self.finishing:
                click.echo(f"lmcache-device-template: {refusal.message}. Asked again (Enter takes it):", err=True)
                number = f"  [dim][{self.questions.index(name) + 1}/{len(self.questions)}][/] "
                answers[name] = read_user_variable(name, refusal.fix[name], self.template["__prompts__"], number)
                refusal = field_refusal(name, self.facts(answers))
        refusal = field_refusal(field, self.facts(answers))
        return refusal.fix[field] if refusal is not None else str(answers[field])

    def extended_builtin(self, answers: Mapping[str, Any]) -> str:
        """The built-in backend the answers extend (a device type LMCache already has), or "" (``answer_rules``)."""
        return extended_builtin(str(answers["device_name"]), self.facts(answers))

    def package_name(self, answers: MutableMapping[str, Any]) -> str:
        """What the package is named after: the device name, or for a backend that extends a built-in (its device
        type is the built-in's) the backend name. Checks both, as a person types (``checked``)."""
        device = self.checked(answers, "device_name")
        if not extended_builtin(device, self.facts(answers)):
            return device
        return self.checked(answers, "backend_name")

    def default_extension_module(self, answers: MutableMapping[str, Any]) -> str:
        """``torch_<device>``, or "" for a device torch has built in (``torch.cuda``)."""
        device = self.checked(answers, "device_name")
        return "" if device in self.template["_torch_builtin_devices"] else f"torch_{device}"

    def tested_releases(self, answers: Mapping[str, Any]) -> list[str]:
        """The tested LMCache releases this render supports (``answer_rules.tested_releases``)."""
        return tested_releases(self.facts(answers))

    def default(self, field: str, answers: Mapping[str, Any]) -> Any:
        """What cookiecutter.json derives for ``field`` from ``answers`` (a choice's first option)."""
        raw = self.template[field]
        raw = raw[0] if isinstance(raw, list) else raw
        return self.environment.from_string(str(raw)).render(cookiecutter=dict(answers))

    def corrected(self, answers: Mapping[str, Any]) -> tuple[dict[str, Any], list[Refusal], set[str]]:
        """(the answers with every refusal's fix, each default derived again from them; what was refused; the
        answers given or fixed).

        An answer equal to what the template derives from the answers before it was not given: it is derived
        again from the corrected ones, and is not reported on its own (one bad device name, one message)."""
        self.finishing = True  # nobody is asked from here on: the defaults below are only compared
        fixed: dict[str, Any] = {}
        refusals: list[Refusal] = []
        named: set[str] = set()
        for field in self.questions:
            given = field in answers and answers[field] != self.default(field, answers)
            fixed[field] = answers[field] if given else self.default(field, fixed)
            named |= {field} if given else set()
            refusal = field_refusal(field, self.facts(fixed))
            if refusal is not None:
                refusals.append(refusal)
                fixed.update(refusal.fix)
        refusals += combination_refusals(self.facts(fixed))
        for _ in range(3):  # a fix can need another (a combination's name fix, checked as a name)
            found = [r for f in self.questions if (r := field_refusal(f, self.facts(fixed)))]
            found += combination_refusals(self.facts(fixed))
            if not found:
                break
            for refusal in found:
                fixed.update(refusal.fix)
        return fixed, refusals, named | {field for refusal in refusals for field in refusal.fix}

    def command(self, answers: Mapping[str, Any], fixed: Mapping[str, Any], named: set[str]) -> str:
        """The cookiecutter command that renders ``fixed``: the answers given or fixed (``named``), and any other
        that differs from its default."""
        words = ["cookiecutter", str(answers.get("_template") or TEMPLATE_ROOT)]
        if answers.get("_checkout"):
            words += ["--checkout", str(answers["_checkout"])]
        output = answers.get("_output_dir")
        if output and Path(output) != Path(os.getcwd()):
            words += ["-o", str(output)]
        words.append("--no-input")
        words += [f"{field}={fixed[field]}" for field in self.questions
                  if field in named or fixed[field] != self.default(field, fixed)]  # fmt: skip
        return " ".join(shlex.quote(word) for word in words)

    def accepted_project_dir(self, answers: Mapping[str, Any]) -> str:
        """The project directory's name, once every answer and combination is accepted; else stop, naming the fix."""
        fixed, refusals, named = self.corrected(answers)
        if not refusals:
            return str(answers["project_slug"])
        lines = ["lmcache-device-template: cannot render with these answers:"]
        lines += [f"  - {refusal.message}" for refusal in refusals]
        lines += ["Nothing was written. This command renders, with those fixes and your other answers:",
                  f"  {self.command(answers, fixed, named)}"]  # fmt: skip
        raise FailedHookException("\n".join(lines))
