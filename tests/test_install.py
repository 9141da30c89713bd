"""The default project installs with pip in editable mode and runs from any folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from combos import DEFAULT, PACKAGE, describe

pytestmark = pytest.mark.e2e


def test_editable_install_runs_from_another_folder(rendered, tmp_path: Path) -> None:
    # A copy: the install writes its metadata (egg-info) into the project, which is shared.
    project = tmp_path / "project"
    shutil.copytree(rendered(DEFAULT), project)
    venv = tmp_path / "venv"
    venv_command = [sys.executable, "-m", "venv", "--without-pip", str(venv)]
    subprocess.run(venv_command, check=True, timeout=300)
    python = venv / "bin" / "python"
    # --system-site-packages would expose the base interpreter, not this (virtual)
    # environment, so a .pth file lends the new venv this environment's packages: torch,
    # and pip and setuptools (a venv's own bundled setuptools may be too old to build).
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "_parent_env.pth").write_text(sysconfig.get_path("purelib") + "\n")

    # No build isolation: it would download setuptools, and tests run offline.
    install = [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q"]
    result = subprocess.run(
        [*install, "-e", str(project)], capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, describe(result)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = f"import {PACKAGE}; print({PACKAGE}.__file__)"
    where = subprocess.run(
        [str(python), "-c", script], cwd=elsewhere, capture_output=True, text=True, check=False
    )
    assert where.returncode == 0, describe(where)
    assert Path(where.stdout.strip()).is_relative_to(project / "src")

    result = subprocess.run(
        [str(python), "-m", f"{PACKAGE}.train", "--help"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, describe(result)
    assert "--epochs" in result.stdout
