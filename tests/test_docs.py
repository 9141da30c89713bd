"""The reference pages list exactly the flags and questions the template has."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys

import yaml
from combos import DEFAULT, PACKAGE, REPO_ROOT

DOCS = REPO_ROOT / "docs" / "reference"


def test_flags_page_lists_every_config_field(rendered) -> None:
    """Every field of the all-on Config is a row of flags.md, and every row is a field."""
    path = rendered(DEFAULT) / "src" / PACKAGE / "config.py"
    spec = importlib.util.spec_from_file_location("rendered_config", path)
    config = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = config  # dataclasses looks the module up while it is created
    spec.loader.exec_module(config)  # the standard library only: no torch import
    fields = {"--" + f.name.replace("_", "-") for f in dataclasses.fields(config.Config)}
    page = (DOCS / "flags.md").read_text()
    documented = set(re.findall(r"^\| `(--[a-z-]+)", page, re.MULTILINE)) - {"--config"}
    assert documented == fields


def test_questions_page_lists_every_question() -> None:
    """Every question of copier.yml has a row in questions.md."""
    questions = yaml.safe_load((REPO_ROOT / "copier.yml").read_text().split("---\n", 2)[-1])
    asked = {name for name in questions if not name.startswith("_")}
    page = (DOCS / "questions.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)`", page, re.MULTILINE))
    assert asked <= documented
