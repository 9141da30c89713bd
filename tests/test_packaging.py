"""The all-on render as a package (issue 24, item 4): its sdist holds what the tests and the
noxfile need and runs the suite unpacked; its wheel, installed into a fresh environment, trains
from another folder through the console scripts and records its version in run.json.

Built with `uv build --no-build-isolation` against this environment's setuptools (offline).
Cost on 2 busy cores: a few seconds to build, then the unpacked sdist's fast tier.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from combos import DEFAULT, PACKAGE, SHORT_RUN, describe, render

pytestmark = pytest.mark.packaging

BIN = Path(sys.executable).parent
DIST = PACKAGE.replace("_", "-")
COMMANDS = ["train", "evaluate", "predict", "export", "doctor", "plot"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(project, sdist, wheel) of the all-on render."""
    root = tmp_path_factory.mktemp("packaging")
    project = render(DEFAULT.answers, root / "project")
    command = [str(BIN / "uv"), "build", "--no-build-isolation", "--out-dir", str(root / "dist")]
    result = subprocess.run(
        command,
        cwd=project,
        env={"PATH": str(BIN), "UV_PYTHON": sys.executable, "UV_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, describe(result)
    [sdist] = (root / "dist").glob("*.tar.gz")
    [wheel] = (root / "dist").glob("*.whl")
    return project, sdist, wheel


def test_sdist_holds_what_the_tests_and_the_noxfile_need(built) -> None:
    project, sdist, _ = built
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    wanted = {"noxfile.py", ".pre-commit-config.yaml", "slurm.sbatch", "pyproject.toml"}
    wanted |= {f"tests/{path.name}" for path in (project / "tests").glob("*.py")}
    assert {"tests/conftest.py", "tests/processes.py", "tests/samples.py"} <= wanted
    assert wanted <= names, sorted(wanted - names)


def test_wheel_has_types_and_console_scripts(built) -> None:
    _, _, wheel = built
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert f"{PACKAGE}/py.typed" in names
    for command in COMMANDS:
        assert f"{DIST}-{command} = {PACKAGE}.{command}:main" in scripts, scripts
    assert not any(name.startswith("tests/") for name in names)


def test_installed_wheel_trains_elsewhere_and_records_its_versions(built, tmp_path: Path) -> None:
    project, _, wheel = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # torch and numpy come from this environment (a .pth file), the package from the wheel only.
    purelib = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "_parent_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)]
    result = subprocess.run(install, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, describe(result)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    out = elsewhere / "runs" / "first"
    train = [str(venv / "bin" / f"{DIST}-train"), *SHORT_RUN, "--out-dir", str(out)]
    result = subprocess.run(
        train, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, describe(result)
    [entry] = json.loads((out / "run.json").read_text())
    assert entry["version"] == "0.1.0"
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert entry["template_version"] == answers["_commit"], "kept in the package, not the tree"
    for command in ["doctor", "evaluate"]:
        args = [str(venv / "bin" / f"{DIST}-{command}")]
        if command == "evaluate":
            args += ["--out-dir", str(out), "--checkpoint", "last"]
        result = subprocess.run(
            args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, describe(result)


def test_suite_runs_from_the_unpacked_sdist(built, tmp_path: Path) -> None:
    """The fast tier (pytest's default), in the unpacked sdist: no git, no answers file."""
    _, sdist, _ = built
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    [root] = tmp_path.iterdir()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"],
        cwd=root,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, describe(result)
    assert " passed" in result.stdout and "deselected" in result.stdout
