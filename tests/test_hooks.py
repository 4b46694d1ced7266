# SPDX-License-Identifier: Apache-2.0
"""Answers that cannot render a working plugin are refused, with the fix, and leave nothing on disk.

``--no-input`` runs here (a person typing: tests/test_prompts.py). The rules are hooks/answer_rules.py; the
refusal ends on one command that renders, which each test runs as printed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

RenderCli = Callable[..., tuple[subprocess.CompletedProcess[str], Path]]

REFUSED = [
    (["device_name=Foo"], "device_name='Foo' must be a lowercase Python identifier", "device_name='foo'"),
    (["device_name=foo-bar"], "device_name='foo-bar' must be a lowercase Python identifier", "device_name='foo_bar'"),
    (["device_name=9foo"], "device_name='9foo'", "for example device_name="),
    (["device_name=" + "x" * 25], "at most 24 characters", "for example device_name="),
    (["device_name=class"], "device_name='class' is a Python keyword", "device_name='class_dev'"),
    # torch's device strings allow letters and underscores only: torch.device("acme7") raises.
    (["device_name=acme7"], "device_name='acme7' has digits, which torch device types cannot have", "device_name='acme'"),
    (["device_name=acme_npu2"], "torch.device('acme_npu2:0') raises", "device_name='acme_npu'"),
    # A device type a built-in backend has renders a backend that extends it, under a backend name of its own.
    (["device_name=cuda"], "backend_name='cuda' is one of LMCache's built-in backends", "backend_name='acme_cuda'"),
    (["device_name=rbln"], "built-in backends", "backend_name='acme_rbln'"),
    (["device_name=rocm"], "device_name='rocm' is LMCache's built-in rocm backend, not a torch device type: its "
     "tensors report device type 'cuda'", "device_name='cuda'"),
    (["device_name=cuda", "backend_name=maca", "emulator=yes"], "emulator='yes' cannot be torch.cuda", "emulator='no'"),
    (["device_name=cuda", "backend_name=maca", "emulator=maybe"], "emulator='maybe' must be one of yes, no",
     "emulator='no'"),
    (["device_name=cuda", "backend_name=maca", "native_ops=yes"], "native_ops='yes' renders the sample's own ops",
     "Set native_ops='no'"),
    (["device_name=cuda", "backend_name=maca", "ownership=in_tree"], "ownership='in_tree' is not rendered for it",
     "Set ownership='wheel'"),
    (["backend_name=npu"], "backend_name='npu' is one of LMCache's built-in backends", "backend_name='acme_npu'"),
    # Built in from lmcache 0.5.7 (Cambricon's torch_mlu, Biren's SUPA): a plugin so named loads on 0.5.6, then not.
    (["device_name=mlu"], "LMCache's built-in mlu backend, which arrives in lmcache 0.5.7, newer than every release",
     "device_name='acme_mlu'"),
    (["device_name=supa"], "which arrives in lmcache 0.5.7", "device_name='acme_supa'"),
    (["backend_name=supa"], "backend_name='supa' is one of LMCache's built-in backends", "backend_name='acme_supa'"),
    (["torch_extension_module=torch-foo"], "torch_extension_module='torch-foo' must be an importable module name", "'torch_acme'"),
    (["import_package=lmcache"], "import_package='lmcache' would shadow the real lmcache", "'lmcache_<device>'"),
    (["project_slug=lmcache foo"], "project_slug='lmcache foo' must be", "'lmcache-acme-device'"),
    (["project_slug=parent/lmcache-foo"], "project_slug='parent/lmcache-foo' must be a distribution name", "project_slug='parent-lmcache-foo'"),
    (["project_slug=Lmcache_Foo"], "project_slug='Lmcache_Foo' must be a distribution name", "'lmcache-acme-device'"),
    (["class_prefix=foo"], "class_prefix='foo' must be a CamelCase identifier", "'Acme'"),
    (["author_email=nobody"], "author_email='nobody' must look like", "name@example.com"),
    (["version=one"], "version='one' must be a PEP 440 version", "'0.1.0'"),
    # Combinations: each choice valid, together unworkable.
    (["device_name=mps"], "emulator='yes' cannot emulate device_name='mps'", "Set emulator='no'"),
    (["torch_extension_module="], "emulator='yes' with an empty torch_extension_module", "torch_extension_module='torch_foo'"),
    (["ownership=in_tree", "native_ops=yes"], "ownership='in_tree' with native_ops='yes'", "Set native_ops='no'"),
    (["ownership=in_tree", "license=MIT"], "LMCache, which is Apache-2.0 licensed", "Set license='Apache-2.0'"),
    (["ownership=in_tree", "lmcache_driven=default", "device_name=cpu_shm"], "which LMCache's ipc_wire.py already uses (cuda (0.5.6), cuda_raw (0.5.6), cuda_vmm (0.5.6), cpu_shm (0.5.6)", "backend_name='acme_cpu_shm'"),
]


@pytest.mark.parametrize(("answers", "problem", "fix"), REFUSED, ids=["+".join(a)[:40] for a, _, _ in REFUSED])
def test_bad_answer_is_refused_with_the_fix_and_nothing_is_written(render_cli: RenderCli, answers: list[str], problem: str, fix: str) -> None:
    """The run exits non-zero, says what is wrong and what to type, and the output directory stays empty; it ends
    on one command, no traceback, and that command, pasted, renders."""
    done, out = render_cli(*answers)
    said = done.stderr + done.stdout
    assert done.returncode != 0
    assert problem in said and fix in said, said
    assert "Nothing was written" in said and "Traceback" not in said
    assert list(out.iterdir()) == []
    pasted = run_printed_command(said, cwd=out.parent)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert len(list(out.iterdir())) == 1


def run_printed_command(said: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the refusal's one ``cookiecutter ...`` line as printed, with this environment's ``cookiecutter``."""
    (command,) = [line.strip() for line in said.splitlines() if line.strip().startswith("cookiecutter ")]
    assert shlex.split(command)[2:].count("--no-input") == 1, command
    tools = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": tools}
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_every_problem_is_reported_at_once(render_cli: RenderCli) -> None:
    """Several bad answers give several messages in one run, not one per attempt, and a default derived from a
    bad answer is not reported again (backend_name defaults to device_name)."""
    done, out = render_cli("device_name=Acme-NPU", "author_email=x", "version=v1")
    assert done.returncode != 0
    assert done.stdout.count("  - ") == 3, done.stdout  # device_name, email, version
    assert "backend_name" not in done.stdout
    assert "--no-input device_name=acme_npu author_email=lmcache-acme-npu@example.com version=0.1.0\n" in done.stdout
    assert list(out.iterdir()) == []


def test_answers_are_data_not_code(render_cli: RenderCli, tmp_path: Path) -> None:
    """A value carrying quotes and Python is refused as a name; nothing ever executes it."""
    marker = tmp_path / "PWNED"
    payload = f'foo"""; open({str(marker)!r}, "w").close(); x = """'
    done, out = render_cli(f"device_name={payload}")
    assert done.returncode != 0
    assert "must be a lowercase Python identifier" in done.stdout + done.stderr
    assert not marker.exists()
    assert list(out.iterdir()) == []


def test_answers_reach_the_checks_as_data_not_code(render_cli: RenderCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that would be valid Python code if pasted into a script is only ever compared, never run."""
    marker = tmp_path / "PWNED"
    monkeypatch.setenv("PWN_MARKER", str(marker))
    payload = 'foo"""; open(__import__("os").environ["PWN_MARKER"], "w").close(); x = """'
    done, out = render_cli(f"device_name={payload}", "project_slug=lmcache-foo-device", "import_package=lmcache_foo")
    assert done.returncode != 0
    assert "device_name='foo" in done.stdout and "must be a lowercase Python identifier" in done.stdout
    assert not marker.exists()
    assert list(out.iterdir()) == []


def test_a_valid_custom_answer_set_renders(render_cli: RenderCli) -> None:
    """The command line a vendor would type renders and exits zero."""
    done, out = render_cli("device_name=acme", "author_name=Acme Corp.", "author_email=dev@acme.example", "license=MIT")
    assert done.returncode == 0, done.stderr
    assert (out / "lmcache-acme-device" / "src" / "lmcache_acme" / "device.py").is_file()


def test_an_answer_outside_a_choice_list_is_refused_naming_the_choices(render_cli: RenderCli) -> None:
    """cookiecutter itself refuses an unknown choice (before the hook), listing the valid ones; nothing is written."""
    done, out = render_cli("ownership=vendored")
    assert done.returncode != 0
    assert "vendored provided for choice variable ownership" in done.stderr and "in_tree" in done.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "answers",
    [["device_name=mps", "emulator=no", "torch_extension_module="], ["ownership=in_tree", "lmcache_driven=opt_in"]],
    ids=["torch-built-in-device-without-emulator", "in-tree-lmcache-driven"],
)
def test_the_combination_each_refusal_suggests_renders(render_cli: RenderCli, answers: list[str]) -> None:
    """Following a refusal's fix gives a render (the messages do not send vendors in circles)."""
    done, out = render_cli(*answers)
    assert done.returncode == 0, done.stderr
    assert len(list(out.iterdir())) == 1


BAD = {
    "device_name": ["Acme-NPU", "Acme-NPU2", "9", "class", "rocm", "mlu", "cuda2", "x" * 40, "", "mps_2"],
    "backend_name": ["npu", "Acme NPU", "match", "_", "y" * 30],
    "torch_extension_module": ["torch-foo", "9torch", "a..b", "torch foo"],
    "project_slug": ["parent/lmcache-foo", "Lmcache_Foo", "../x", "", "a--b"],
    "import_package": ["lmcache", "torch", "Acme-Pkg", "import", "z" * 40],
    "class_prefix": ["foo", "9Acme", "Acme-Npu", "", "Q" * 30],
    "author_name": ["", "   ", "Acme\nCorp"],
    "author_email": ["nobody", "a@b", "a b@c.d"],
    "version": ["one", "v1", "1.0-beta"],
}


@pytest.mark.parametrize(("field", "value"), [(field, value) for field, values in BAD.items() for value in values])
def test_the_value_a_refusal_offers_is_accepted_by_the_same_rule(field: str, value: str) -> None:
    """Typing what a refusal suggests (the default when the answer is asked again) never gets refused again."""
    from hooks.answer_rules import field_refusal

    context = json.loads((Path(__file__).resolve().parent.parent / "cookiecutter.json").read_text())
    answers = {**context, "device_name": "acme", field: value}
    refusal = field_refusal(field, answers)
    assert refusal is not None, f"{field}={value!r} was accepted"
    assert field_refusal(field, {**answers, **refusal.fix}) is None, refusal
    assert f"{field}={refusal.fix[field]!r}" in refusal.message or refusal.fix[field] in refusal.message, refusal
