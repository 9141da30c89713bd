"""The template's Jinja discipline: toggles switch whole lines, never parts of code.

A condition inside a signature, an import or a call changes some combinations and not
others, in ways a reader of one rendered project cannot see. So in the template's Python
files every control tag (``{% if %}``, ``{% else %}``, ...) stands on a line of its own;
wording may still vary inside docstrings and comments. Tricks that make the template hard
to change safely (``set``, ``filter``, macros) are not used at all.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from combos import TEMPLATE_DIR

PYTHON_TEMPLATES = sorted(
    path
    for path in TEMPLATE_DIR.rglob("*.jinja")
    if path.name.endswith(".py.jinja") or ".py{%" in path.name
)
WHOLE_LINE = re.compile(r"\s*\{%-?[^%]*-?%\}\s*$")
CONTROL = re.compile(r"\{%-?\s*(\w+)")


def code_lines_with_control_tags(text: str) -> list[tuple[int, str]]:
    """(number, line) of the lines where a control tag shares the line with code.

    Lines inside a triple-quoted string, and comments, may vary their wording.
    """
    found = []
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if "{%" in line and not WHOLE_LINE.match(line):
            words = in_string or stripped.startswith(('"""', "#"))
            comment = "#" in line and line.index("#") < line.index("{%")
            if not (words or comment):
                found.append((number, stripped))
        if line.count('"""') % 2:
            in_string = not in_string
    return found


def test_the_check_finds_a_condition_inside_code():
    text = 'def f(a{% if ddp %}, rank{% endif %}):\n    """Say {% if ddp %}rank{% endif %}."""\n'
    assert code_lines_with_control_tags(text) == [(1, text.splitlines()[0])]
    assert not code_lines_with_control_tags(
        "{%- if ddp %}\nx = 1\n{%- endif %}\n# a{% if x %}b{% endif %}\n"
    )


@pytest.mark.parametrize("path", PYTHON_TEMPLATES, ids=lambda p: str(p.relative_to(TEMPLATE_DIR)))
def test_control_tags_stand_on_their_own_lines(path: Path):
    found = code_lines_with_control_tags(path.read_text())
    assert not found, "\n".join(f"{path.name}:{n}: {line}" for n, line in found)


def test_no_set_filter_or_macro():
    used = [
        f"{path.relative_to(TEMPLATE_DIR)}: {{% {tag} %}}"
        for path in sorted(TEMPLATE_DIR.rglob("*"))
        if path.is_file()
        for tag in CONTROL.findall(path.read_text(errors="replace"))
        if tag in {"set", "filter", "macro", "call", "include", "import"}
    ]
    assert not used, "\n".join(used)
