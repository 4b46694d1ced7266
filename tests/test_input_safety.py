# SPDX-License-Identifier: Apache-2.0
"""Answers are data: quotes, newlines, Jinja and Python in any answer are refused or rendered inert.

Every hostile value is fed to every free-text answer through the command line a
vendor (or a CI job) would use. Whatever happens, nothing is executed, and a
render either fails leaving nothing behind or produces valid Python and TOML
that holds the value literally.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

RenderCli = Callable[..., tuple[subprocess.CompletedProcess[str], Path]]

FIELDS = [
    "device_name", "backend_name", "torch_extension_module", "project_slug", "import_package",
    "class_prefix", "author_name", "author_email", "version",
]  # fmt: skip
#: Each payload would, if executed or evaluated, create the file MARKER in the working directory.
PAYLOADS = {
    "double-quote": 'Acme "Chips"',
    "single-quote": "O'Brien",
    "triple-quotes-and-code": '"""; open("MARKER", "w").close(); """',
    "newline": "Acme\nimport os; os.system('touch MARKER')",
    "backslash": "Acme\\",
    "toml-breakout": '", email = "x@y.z" }]\n[tool.evil]\nx = "',
    "jinja-expression": "{{ 7 * 7 }}",
    "jinja-statement": "{% if true %}Acme{% endif %}",
    "jinja-code-execution": "{{ cycler.__init__.__globals__.os.system('touch MARKER') }}",
    "python-code": "__import__('os').system('touch MARKER')",
}


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", FIELDS)
def test_a_hostile_answer_is_refused_or_rendered_inert_and_never_executed(render_cli: RenderCli, field: str, payload: str) -> None:
    """Refused: non-zero exit, a message, an empty output directory. Rendered: valid Python/TOML holding the value verbatim."""
    done, out = render_cli(f"{field}={payload}")
    marker = out.parent / "MARKER"
    assert not marker.exists(), "an answer was executed"
    # Only the author's name is free text (one line, no Jinja); every other answer becomes an identifier,
    # a path, a module, an address or a version, and is validated as such.
    free_text = field == "author_name" and "\n" not in payload and "{" not in payload
    assert (done.returncode == 0) == free_text, done.stderr[-2000:]
    if done.returncode != 0:
        assert "Traceback" not in done.stderr + done.stdout, done.stdout[-2000:]  # cookiecutter logs to stdout
        assert "lmcache-device-template:" in done.stderr + done.stdout or "provided for choice variable" in done.stderr
        assert list(out.iterdir()) == [], "a refused render left files behind"
        return
    (project,) = out.iterdir()
    recorded = json.loads((project / ".cookiecutter.json").read_text())
    assert recorded[field] == payload  # taken literally, never rendered
    for path in project.rglob("*.py"):
        compile(path.read_text(), str(path), "exec")
    meta = tomllib.loads((project / "pyproject.toml").read_text())
    if field == "author_name":
        assert meta["project"]["authors"][0]["name"] == payload
    assert "evil" not in meta.get("tool", {})

