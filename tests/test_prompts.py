# SPDX-License-Identifier: Apache-2.0
"""A person at a terminal: answers are checked as they are typed, and a run that must stop ends on a command.

Each test drives ``cookiecutter <template>`` through a pseudo-terminal (pexpect), typing as a person does:
an answer, or Enter for the default shown. The transcript is what the person saw.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect

TEMPLATE = Path(__file__).resolve().parent.parent
#: The numbered questions (cookiecutter numbers each ``[n/N]``; choices list their options on the lines after).
CONTEXT = json.loads((TEMPLATE / "cookiecutter.json").read_text())
QUESTIONS = [key for key in CONTEXT if not key.startswith("_")]
FREE_TEXT = [key for key in QUESTIONS if isinstance(CONTEXT[key], str)]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: The end of every prompt: the default in parentheses (coloured), then ": ".
PROMPT_END = r"\)\S*: "
#: A free-text prompt as shown, colours removed: number, question, default, what was typed.
SHOWN = re.compile(rf"^\s*\[(\d+)/{len(QUESTIONS)}\] (.*) \(([^()]*)\): (.*?)\r?$", re.MULTILINE)


def spawn(tmp_path: Path) -> tuple[pexpect.spawn, io.StringIO, Path]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    seen = io.StringIO()
    # A terminal wide enough that no prompt wraps; its size, not an inherited COLUMNS, is what rich reads.
    env = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
    child = pexpect.spawn(sys.executable, ["-m", "cookiecutter", "-o", str(out), str(TEMPLATE)], cwd=str(tmp_path),
                          env=env, encoding="utf-8", timeout=60, dimensions=(50, 400))  # fmt: skip
    child.logfile_read = seen
    return child, seen, out


def type_answers(tmp_path: Path, typed: list[str]) -> tuple[str, int, Path]:
    """Type ``typed`` at the prompts in turn, then Enter at each one after; (transcript, exit status, output dir)."""
    child, seen, out = spawn(tmp_path)
    replies = iter(typed)
    for _ in range(2 * len(QUESTIONS) + len(typed)):  # a prompt asked again and again fails, never hangs
        if child.expect([PROMPT_END, pexpect.EOF]) == 1:
            break
        child.sendline(next(replies, ""))
    else:
        child.terminate(force=True)
        raise AssertionError(f"the prompts never ended:\n{ANSI.sub('', seen.getvalue())[-3000:]}")
    child.close()
    return ANSI.sub("", seen.getvalue()), child.exitstatus, out


def shown(transcript: str) -> list[tuple[str, str, str]]:
    """(question, default shown, typed) for each free-text prompt, in order."""
    return [(QUESTIONS[int(number) - 1], default, typed) for number, _, default, typed in SHOWN.findall(transcript)]


def test_a_refused_device_name_is_reported_at_the_next_prompt_once_with_the_name_to_type(tmp_path: Path) -> None:
    """``Acme-NPU`` is refused as soon as Enter is pressed, naming ``acme_npu``, and the next prompt asks the device
    name again with it as the default; a second bad name gets its own message, and neither is repeated."""
    child, seen, _ = spawn(tmp_path)
    for typed in ("Acme-NPU", "acme7"):
        child.expect(PROMPT_END)
        child.sendline(typed)
    child.expect(PROMPT_END)
    child.terminate(force=True)
    transcript = ANSI.sub("", seen.getvalue())
    assert shown(transcript) == [("device_name", "foo", "Acme-NPU"), ("device_name", "acme_npu", "acme7"),
                                 ("device_name", "acme", "")], transcript  # fmt: skip
    first = "device_name='Acme-NPU' must be a lowercase Python identifier"
    second = "device_name='acme7' has digits, which torch device types cannot have"
    assert transcript.count(first) == 1 and transcript.count(second) == 1, transcript
    assert "for example device_name='acme_npu'" in transcript and "for example device_name='acme'" in transcript


def test_typing_the_suggested_name_continues_with_defaults_derived_from_it_and_renders(tmp_path: Path) -> None:
    """After the refusal, typing ``acme_npu`` gives every later default from ``acme_npu``, never from
    ``Acme-NPU``, and Enter at each of them renders ``lmcache-acme-npu-device``."""
    transcript, status, out = type_answers(tmp_path, ["Acme-NPU", "acme_npu"])
    defaults = {question: default for question, default, _ in shown(transcript)[2:]}
    assert defaults == {
        "backend_name": "acme_npu", "torch_extension_module": "torch_acme_npu", "emulator": "yes",
        "project_slug": "lmcache-acme-npu-device", "import_package": "lmcache_acme_npu", "class_prefix": "AcmeNpu",
        "author_name": "Example Vendor", "author_email": "lmcache-acme-npu@example.com", "version": "0.1.0",
    }, transcript  # fmt: skip
    assert status == 0, transcript
    answers = json.loads((out / "lmcache-acme-npu-device" / ".cookiecutter.json").read_text())
    assert (answers["device_name"], answers["class_prefix"]) == ("acme_npu", "AcmeNpu")


def test_a_device_type_lmcache_has_asks_for_a_backend_name_of_its_own_and_renders_a_backend_that_extends_it(
    tmp_path: Path,
) -> None:
    """``cuda`` is a device type LMCache's cuda backend has: the backend name derived from it is refused at the next
    prompt and asked again with a name of its own; typing ``maca`` derives the rest from it (no torch extension: torch
    has cuda built in; no emulator), and Enter at each renders ``lmcache-maca-device``."""
    transcript, status, out = type_answers(tmp_path, ["cuda", "", "maca"])
    assert transcript.count("backend_name='cuda' is one of LMCache's built-in backends") == 1, transcript
    questions = shown(transcript)
    assert questions[:3] == [("device_name", "foo", "cuda"), ("backend_name", "cuda", ""),
                             ("backend_name", "acme_cuda", "maca")], transcript  # fmt: skip
    defaults = {question: default for question, default, _ in questions[3:]}
    assert defaults["torch_extension_module"] == "" and defaults["emulator"] == "no", transcript
    assert defaults["project_slug"] == "lmcache-maca-device" and defaults["class_prefix"] == "Maca", transcript
    assert status == 0, transcript
    names = (out / "lmcache-maca-device" / "src" / "lmcache_maca" / "names.py").read_text()
    assert 'DEVICE_TYPE = "cuda"' in names and 'BACKEND_NAME = "maca"' in names and 'EXTENDS = "cuda"' in names


def test_a_refusal_left_at_the_end_prints_one_command_that_renders_and_no_traceback(tmp_path: Path) -> None:
    """Choices each valid but refused together (in-tree with native ops, MIT) end the run on the reasons and one
    paste-able command holding the answers typed, corrected; nothing is written, and the command renders."""
    # device, backend, module, lmcache_driven, native_ops=yes, ownership=in_tree, emulator, slug, package,
    # prefix, author, e-mail, license=MIT.
    typed = ["acme", "", "", "", "2", "2", "", "", "", "", "Acme Corp.", "", "2"]
    transcript, status, out = type_answers(tmp_path, typed)
    assert status == 1, transcript
    assert "Traceback" not in transcript and "Stopping generation" not in transcript, transcript
    assert "ownership='in_tree' with native_ops='yes'" in transcript and "license='MIT'" in transcript
    assert list(out.iterdir()) == [], "a refused run left files behind"
    commands = [line.strip() for line in transcript.splitlines() if line.strip().startswith("cookiecutter ")]
    assert len(commands) == 1, transcript
    assert commands[0].endswith("--no-input device_name=acme native_ops=no ownership=in_tree 'author_name=Acme Corp.' "
                                "license=Apache-2.0"), commands  # fmt: skip

    tools = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # where pip put ``cookiecutter``
    pasted = subprocess.run(commands[0], shell=True, cwd=tmp_path, env={**os.environ, "PATH": tools},
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    answers = json.loads((out / "lmcache-acme-device" / ".cookiecutter.json").read_text())
    assert (answers["ownership"], answers["native_ops"], answers["license"]) == ("in_tree", "no", "Apache-2.0")
    assert answers["author_name"] == "Acme Corp."


def test_a_good_interactive_run_renders_with_every_default_from_the_device_name(tmp_path: Path) -> None:
    """``acme`` then Enter at every prompt: no message, and the render a person expects."""
    transcript, status, out = type_answers(tmp_path, ["acme"])
    assert status == 0, transcript
    assert "lmcache-device-template:" not in transcript, transcript
    assert [question for question, _, _ in shown(transcript)] == FREE_TEXT, transcript
    assert (out / "lmcache-acme-device" / "src" / "lmcache_acme" / "device.py").is_file()
