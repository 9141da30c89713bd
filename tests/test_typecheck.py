"""mypy, with the rendered pyproject's strict settings, passes on every variant of every file.

The covering combinations (all on, all off, each toggle alone and each left out) render every
variant of every file: a `# type: ignore` that one variant needs and another does not, or an
annotation that only one variant breaks, shows up in one of them. The cache is shared, so the
unchanged files of one render are not checked again in the next.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from combos import COVERING, Combo, describe

pytestmark = pytest.mark.typecheck


@pytest.fixture(scope="session")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)
def test_mypy_passes(rendered, mypy_cache: Path, combo: Combo) -> None:
    root = rendered(combo)
    # No file arguments: the project's own [tool.mypy] settings say what to check, and how.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, describe(result)
    assert "Success: no issues found" in result.stdout
