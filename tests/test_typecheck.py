"""mypy, with the rendered pyproject's strict settings, passes on every distinct variant of
every file it checks.

Every combination is rendered; a file's variants are its distinct contents across them. The
fewest renders that hold every variant of every file mypy checks (`files` in the rendered
[tool.mypy]: src/) are chosen greedily, and mypy runs once on each, in CHUNKS tests so the
test processes share the work; within a process the cache is shared, so a render's files
already checked with the same contents and imports are not checked again. Today config.py and
train.py each have a variant per combination, so every render is chosen.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from combos import ALL, ALL_ON, describe

pytestmark = pytest.mark.typecheck

CHUNKS = 4


def variants(root: Path) -> set[tuple[str, str]]:
    """(path, content hash) of each file under src/ of a render."""
    return {
        (path.relative_to(root).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted((root / "src").rglob("*.py"))
    }


def fewest_renders(found: dict[str, set[tuple[str, str]]]) -> list[str]:
    """Greedy set cover, deterministic: the render with the most variants not yet covered
    (the first id in sorted order on a tie), until every variant is covered."""
    left = set().union(*found.values())
    chosen = []
    while left:
        best = max(sorted(found), key=lambda name: len(found[name] & left))
        chosen.append(best)
        left -= found[best]
    return chosen


def test_fewest_renders_cover_every_variant() -> None:
    found = {"a": {("x", "1"), ("y", "1")}, "b": {("x", "2"), ("y", "1")}, "c": {("x", "1")}}
    assert fewest_renders(found) == ["a", "b"]


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_mypy_passes(request, rendered, mypy_cache: Path, chunk: int) -> None:
    if request.config.getoption("--quick"):  # nox -s quick: one mypy run, on the all-on render
        roots = {ALL_ON.id: rendered(ALL_ON)} if chunk == 0 else {}
        chosen = list(roots)
    else:
        roots = {combo.id: rendered(combo) for combo in ALL}
        chosen = fewest_renders({name: variants(root) for name, root in roots.items()})
    for name in chosen[chunk::CHUNKS]:
        # No file arguments: the project's own [tool.mypy] settings say what to check, and how.
        result = subprocess.run(
            [sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache)],
            cwd=roots[name],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"{name}: " + describe(result)
        assert "Success: no issues found" in result.stdout
