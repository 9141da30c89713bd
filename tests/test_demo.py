"""`nox -s demo` ends with commands that work as printed, from any folder."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from combos import DEFAULT, PACKAGE, REPO_ROOT, describe, run

pytestmark = pytest.mark.e2e

HEADER = "the run's next commands, from any folder:"
SHORT = ["--epochs", "1", "--train-size", "256", "--val-size", "64", "--num-workers", "0"]


def test_the_demo_prints_commands_that_work_as_printed(tmp_path: Path) -> None:
    # A copy of the checkout (uncommitted changes and all): the demo replaces its build/demo.
    repo = tmp_path / "template"
    shutil.copytree(REPO_ROOT, repo, ignore=shutil.ignore_patterns(".venv", "build", ".nox"))
    demo = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(repo / "noxfile.py"), "-s", "demo", "--", *SHORT],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert demo.returncode == 0, describe(demo)
    lines = demo.stdout.splitlines()
    assert HEADER in lines, demo.stdout[-3000:]
    evaluate, plot = (line.strip() for line in lines[lines.index(HEADER) + 1 :][:2])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = subprocess.run(
        ["bash", "-c", evaluate], cwd=elsewhere, capture_output=True, text=True, check=False
    )
    assert evaluated.returncode == 0, describe(evaluated)
    assert "val_acc" in evaluated.stdout, evaluated.stdout
    if " -m pip install " in plot:
        # It would install matplotlib into this environment, which other tests share: here
        # the line is only read (where matplotlib is installed, it is run).
        install, plot = plot.split(" && ", 1)
        assert install.endswith("-m pip install --quiet matplotlib"), install
        assert plot.startswith("PYTHONPATH=") and ".plot " in plot, plot
        return
    plotted = subprocess.run(
        ["bash", "-c", plot], cwd=elsewhere, capture_output=True, text=True, check=False
    )
    assert plotted.returncode == 0, describe(plotted)
    assert (repo / "build" / "demo" / "runs" / "demo" / "metrics.png").is_file()


def test_the_readmes_sample_output_is_a_real_runs(rendered, tmp_path: Path) -> None:
    """The rendered README's sample lines (the start line, the best epoch and the next
    commands) are what its own train command prints, run as the README says: the same text,
    but for the best epoch's number and accuracy."""
    project = shutil.copytree(rendered(DEFAULT), tmp_path / "project")
    readme = (project / "README.md").read_text()
    train = re.search(rf"^python -m {PACKAGE}\.train (--epochs \d+ --out-dir \S+)$", readme, re.M)
    assert train, "the README's train command"
    samples = re.findall(r"^```text\n(.*?)^```", readme, flags=re.M | re.S)
    lines = [line for block in samples for line in block.splitlines()]
    starts = [line for line in lines if line.startswith("training on ")]
    ends = [line for line in lines if line.startswith(("best: ", "next: "))]
    assert len(starts) == 1 and len(ends) == 2, samples
    result = run([sys.executable, "-m", f"{PACKAGE}.train", *train[1].split()], cwd=project)
    assert result.returncode == 0, describe(result)
    printed = result.stdout.splitlines()
    assert starts[0] in printed, f"README: {starts[0]}\nprinted: {result.stdout[:2000]}"
    for sample in ends:
        pattern = re.sub(r"\\ (\d+)\\ of", r"\\ \\d+\\ of", re.escape(sample))
        pattern = re.sub(r"val_acc\\ \d\\.\d+", r"val_acc\\ \\d\\.\\d+", pattern)
        assert any(re.fullmatch(pattern, line) for line in printed), (
            f"README: {sample}\nprinted: {result.stdout[-2000:]}"
        )
