"""Any project and package name renders a project that its own linters pass untouched.

Names change line lengths (``python -m <package>.predict ...`` in a docstring) and the order
of imports (a package that sorts before ``conftest`` or after ``test_checkpoint``, the test
helpers imported beside it). The rendered CI runs ruff and mypy, so a name must not make
them fail on a project nobody has edited yet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from combos import BY_ID, DEFAULT, describe, render

# The longest package and project names copier.yml accepts (line length 100 in the project).
LONGEST = 40
LONGEST_TITLE = 80
NAMES = {
    # Sorts before every test helper, and is as long as a name may be.
    "long": (("Breast cancer tumour classifier " * 3)[:LONGEST_TITLE], "a" * LONGEST),
    # Sorts between conftest and processes.
    "middle": ("Image classifier", "image_classifier"),
    # Sorts after every test helper.
    "last": ("Zebra", "zz"),
}


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each name, with every feature on and with every feature off."""
    roots = {}
    for name, (project_name, package_name) in NAMES.items():
        for combo in (DEFAULT, BY_ID["none"]):
            answers = {**combo.answers, "project_name": project_name}
            answers["package_name"] = package_name
            dest = tmp_path_factory.mktemp(f"{name}-{combo.id}") / "project"
            roots[f"{name}-{combo.id}"] = render(answers, dest)
    return roots


def test_ruff_passes_for_any_name(renders: dict[str, Path]) -> None:
    for root in renders.values():
        for check in (["check"], ["format", "--check"]):
            result = subprocess.run(
                [sys.executable, "-m", "ruff", *check, "."],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            assert result.returncode == 0, describe(result)


@pytest.mark.typecheck
def test_mypy_passes_for_the_longest_name(renders: dict[str, Path], mypy_cache: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache)],
        cwd=renders[f"long-{DEFAULT.id}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, describe(result)
