"""Run each covering combination's own test suite, as its user would, inside the project."""

from __future__ import annotations

import sys

import pytest
from combos import COVERING, DEVICE, Combo, describe, run

pytestmark = pytest.mark.suite


@pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)
def test_rendered_project_suite_passes(rendered, combo: Combo) -> None:
    root = rendered(combo)
    assert (root / "tests").is_dir(), "every rendered project carries its own tests"
    # The project's pyproject puts src on the path; TEMPLATE_TEST_DEVICE passes through to
    # it unchanged, so a suite that wants to know the device can read it.
    result = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        TEMPLATE_TEST_DEVICE=DEVICE,
    )
    assert result.returncode == 0, describe(result)
