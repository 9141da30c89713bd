"""Render every toggle combination and check the source it produces (fast: no training)."""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from combos import ALL, DEFAULT, PACKAGE, REPO_ROOT, Combo, describe, expected_files, render

COMBOS = pytest.mark.parametrize("combo", ALL, ids=lambda combo: combo.id)
PKG = Path("src") / PACKAGE

# What a switched-off toggle must not leave anywhere in the rendered project. The bare word
# "checkpoint" is no marker: model.py always uses torch.utils.checkpoint (activations).
MARKERS = {
    "amp": ["autocast", "GradScaler", "precision"],
    "ddp": ["torch.distributed", "DistributedDataParallel", "no_sync", "world_size", "torchrun"],
    "grad_accum": ["accum_steps", "accum-steps", "micro-batch", "window_samples"],
    "checkpointing": ["resume", "save_checkpoint", "CheckpointError", "SIGTERM", "safetensors"],
    "deterministic": ["use_deterministic_algorithms", "CUBLAS"],
    "profiling": ["torch.profiler", "--profile"],
    "sync_bn": ["SyncBatchNorm", "sync_bn"],
}
ANSWERS_FILE = ".copier-answers.yml"


def project_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


@COMBOS
def test_no_jinja_residue(rendered, combo: Combo) -> None:
    root = rendered(combo)
    residue = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in project_files(root)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(mark in line for mark in ("{{", "{%", "{#"))
    ]
    assert not residue, "Jinja residue:\n" + "\n".join(residue)


@COMBOS
def test_compiles(rendered, combo: Combo, tmp_path: Path) -> None:
    root = rendered(combo)
    # The bytecode goes to tmp_path, so the rendered tree stays as copier wrote it.
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(root)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, describe(result)


@COMBOS
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_clean(rendered, combo: Combo, command: list[str]) -> None:
    root = rendered(combo)
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "."],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, describe(result)


@COMBOS
def test_expected_files(rendered, combo: Combo) -> None:
    root = rendered(combo)
    for always in ["pyproject.toml", ".gitignore", ANSWERS_FILE]:
        assert (root / always).is_file(), always
    for module in ["__init__", "config", "data", "model", "train"]:
        assert (root / PKG / f"{module}.py").is_file(), module
    for module, toggle in [
        ("distributed", "ddp"),
        ("checkpoint", "checkpointing"),
        ("profiling", "profiling"),
    ]:
        assert (root / PKG / f"{module}.py").is_file() == getattr(combo, toggle), module
    # Every file the template names conditionally, found from template/ itself.
    present, absent = expected_files(combo)
    missing = sorted(name for name in present if not (root / name).is_file())
    stray = sorted(name for name in absent if (root / name).exists())
    assert not missing, f"missing: {missing}"
    assert not stray, f"rendered although switched off: {stray}"
    leftovers = [p.name for p in project_files(root) if p.name.endswith(".jinja") or not p.name]
    assert not leftovers


@COMBOS
def test_switched_off_toggles_leave_no_trace(rendered, combo: Combo) -> None:
    root = rendered(combo)
    markers = [m for toggle, found in MARKERS.items() if not getattr(combo, toggle) for m in found]
    if not markers:
        return
    pattern = re.compile("|".join(re.escape(m) for m in markers), re.IGNORECASE)
    traces = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in project_files(root)
        if path.name != ANSWERS_FILE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not traces, "traces of switched-off toggles:\n" + "\n".join(traces)


@COMBOS
def test_answers_file_records_answers(rendered, combo: Combo) -> None:
    answers = yaml.safe_load((rendered(combo) / ANSWERS_FILE).read_text())
    for name, value in combo.answers.items():
        assert answers[name] == value, name
    if not combo.ddp:
        assert "sync_bn" not in answers  # not asked, so not recorded
    assert answers["package_name"] == PACKAGE
    assert answers["project_name"]
    assert answers["_src_path"]
    assert "_commit" in answers


def test_defaults_render_without_prompts(tmp_path: Path) -> None:
    """The copier CLI with --defaults and no terminal: it must not wait for input."""
    dest = tmp_path / "project"
    result = subprocess.run(
        [sys.executable, "-m", "copier", "copy", "--defaults", "--vcs-ref", "HEAD"]
        + [str(REPO_ROOT), str(dest)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, describe(result)
    answers = yaml.safe_load((dest / ANSWERS_FILE).read_text())
    for name, value in DEFAULT.answers.items():
        assert answers[name] == value, name
    assert (dest / PKG / "train.py").is_file()


# Each breaks a render: not an identifier, a keyword, a module or test helper of the project,
# the standard library, a package the project or its extras import.
REFUSED_NAMES = ["2abc", "my-pkg", "_x", "import", "class", "train", "conftest", "processes"]
REFUSED_NAMES += ["test_data", "torch", "json", "os", "matplotlib", "tensorboard", "setuptools"]
REFUSED_NAMES += ["loggers", "mlflow", "wandb"]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_invalid_package_name_is_rejected(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="package_name") as error:
        render({"package_name": name}, tmp_path / "project")
    message = str(error.value)
    assert f'"{name}"' in message
    # It says what to change, with an example of a valid name.
    assert re.search(r"\b(use|choose)\b", message), message
    assert "e.g." in message, message
    assert not (tmp_path / "project" / "src").exists()


def test_empty_project_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="project_name") as error:
        render({"project_name": "  "}, tmp_path / "project")
    assert "empty" in str(error.value)
    assert "e.g." in str(error.value)
    assert not (tmp_path / "project" / "src").exists()


def test_rendering_is_deterministic(tmp_path: Path) -> None:
    first = render(DEFAULT.answers, tmp_path / "first")
    second = render(DEFAULT.answers, tmp_path / "second")
    names = [p.relative_to(first) for p in project_files(first)]
    assert names == [p.relative_to(second) for p in project_files(second)]
    match, mismatch, errors = filecmp.cmpfiles(first, second, names, shallow=False)
    assert not errors
    assert mismatch in ([], [Path(ANSWERS_FILE)]), f"differ between two renders: {mismatch}"
    if mismatch:
        # Copier commits uncommitted template changes in its own clone, with the time in the
        # commit, and records that commit: the only difference allowed, and only when dirty.
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert dirty.stdout.strip(), "the answers files differ although HEAD is clean"
        answers = [yaml.safe_load((root / ANSWERS_FILE).read_text()) for root in (first, second)]
        for record in answers:
            del record["_commit"]
        assert answers[0] == answers[1]


def test_all_combinations_are_distinct() -> None:
    assert len({combo.id for combo in ALL}) == len(ALL) == 96
