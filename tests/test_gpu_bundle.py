"""The GPU bundle builds, and its run.py works without copier or nox: on the CPU in CI,
its CUDA checks reported as skip (under `nox -s gpu`, TEMPLATE_TEST_DEVICE=cuda, on the GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import venv
from importlib import metadata
from pathlib import Path

import pytest
from combos import ALL_OFF, COVERING, DEFAULT, DEVICE, MOST, REPO_ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

sys.path.insert(0, str(REPO_ROOT / "gpu_bundle"))

from build import MAX_BYTES, build  # noqa: E402

pytestmark = pytest.mark.suite


# What a GPU machine is asked to hold: docs/gpu-results.md's venv.
BUNDLE_PACKAGES = ["torch", "numpy", "pytest"]


def venv_of(packages: list[str], dest: Path) -> Path:
    """A venv that holds exactly ``packages`` and the distributions they require, linked from
    this environment's site-packages (pip would unpack torch's wheel for a minute): nothing
    else of the template's tools can be imported there. Returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(dest)
    python = dest / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([python, "-c", where], text=True).strip())
    seen: set[str] = set()
    todo = list(packages)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            found = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # an optional dependency not installed here
            continue
        for requirement in map(Requirement, found.requires or []):
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
        tops = {file.parts[0] for file in found.files or [] if file.parts[0] != ".."}
        for top in tops:
            source = Path(str(found.locate_file(top)))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return python


def test_bundle_builds_and_runs_quick(rendered, tmp_path: Path) -> None:
    bundle = build(tmp_path / "gpu-bundle", rendered)
    assert {p.name for p in (bundle / "projects").iterdir()} == {c.id for c in COVERING}
    assert sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) <= MAX_BYTES

    # Run from another folder, in a venv of torch, numpy and pytest alone: the bundle needs
    # nothing else (no copier, nox, hypothesis or trackers), as on the GPU machine.
    python = venv_of(BUNDLE_PACKAGES, tmp_path / "venv")
    missing = subprocess.run([python, "-c", "import copier"], capture_output=True, check=False)
    assert missing.returncode != 0, "the bundle's venv holds more than its packages"
    out = tmp_path / "results"
    command = [str(python), str(bundle / "run.py"), "--out", str(out), "--quick"]
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [*command, "--device", DEVICE],
        cwd=tmp_path,
        env={**environment, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    # Three files, rewritten after each result: a run cut at its limit keeps what it finished.
    assert sorted(path.name for path in out.iterdir()) == [
        "logs.tar.gz",
        "results.json",
        "results.md",
    ]
    with tarfile.open(out / "logs.tar.gz") as archive:
        assert f"junit/{DEFAULT.id}.xml" in archive.getnames()
    results = json.loads((out / "results.json").read_text())
    assert all(r.keys() == {"name", "status", "seconds", "detail"} for r in results)
    # The CUDA checks first, then the trainings.
    assert results[1]["name"] == f"cuda checks: {DEFAULT.id}"
    assert results[1]["status"] == "pass", results[1]
    cuda = [r for r in results if r["name"].startswith("cuda: ")]
    assert len(cuda) == 12
    if DEVICE == "cpu":
        assert all(r["status"] == "skip" for r in cuda), cuda
    else:  # a GPU without native bf16 skips those checks
        assert all(r["status"] == "pass" or r["detail"].endswith("no native bf16") for r in cuda)
    trainings = [r for r in results if r["name"].startswith("train: ")]
    assert [r["name"] for r in trainings] == [
        f"train: bf16 ({DEFAULT.id})",
        f"train: FSDP2 ({MOST['sharding'].id})",  # on nccl with CUDA
        f"train: all off ({ALL_OFF.id})",
    ]
    assert all(r["status"] == "pass" and "samples/s" in r["detail"] for r in trainings), trainings
    assert results[-1]["name"].startswith("not proven on ")
    table = (out / "results.md").read_text()
    assert table.count("\n") == len(results) + 2

    # A second run into the same folder is refused with one line, not mixed into the old one.
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2
    assert again.stderr.strip().endswith("already holds results; choose a new folder")
