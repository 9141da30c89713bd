"""The template's Jinja discipline: a condition is seen whole, where it acts.

A toggle switches whole lines, or a part of one line: an argument, an imported name, a
clause. A condition that opens on a line of code closes on the same line, so that a reader
of the template sees at once what each combination gets; one that opens a block stands on
a line of its own. (Copying a line per combination instead, as an earlier rule asked, made
copied branches: a fix made in one copy and not the other.) Tricks that make the template
hard to change safely (``set``, ``filter``, macros) are not used at all.
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
    """(number, line) of the lines where a condition opens or closes beside code without
    closing or opening on that line too: its part of the code is not on one line.

    Lines inside a triple-quoted string, and comments, may vary their wording.
    """
    found = []
    in_string = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if "{%" in line and not WHOLE_LINE.match(line):
            words = in_string or stripped.startswith(('"""', "#"))
            comment = "#" in line and line.index("#") < line.index("{%")
            tags = CONTROL.findall(line)
            balanced = tags.count("if") == tags.count("endif")
            if not (words or comment or balanced):
                found.append((number, stripped))
        if line.count('"""') % 2:
            in_string = not in_string
    return found


def test_the_check_finds_a_condition_that_spans_lines_of_code():
    text = 'def f(a{% if ddp %}, rank,\n    b{% endif %}):\n    """Say {% if ddp %}rank."""\n'
    assert code_lines_with_control_tags(text) == [
        (1, text.splitlines()[0].strip()),
        (2, text.splitlines()[1].strip()),
    ]
    assert not code_lines_with_control_tags(
        "{%- if ddp %}\nx = 1\n{%- endif %}\n# a{% if x %}b{% endif %}\n"
        "def f(a{% if ddp %}, rank{% endif %}):\n"
    )


@pytest.mark.parametrize("path", PYTHON_TEMPLATES, ids=lambda p: str(p.relative_to(TEMPLATE_DIR)))
def test_conditions_in_code_close_on_their_line(path: Path):
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
