"""How much of the Python templates is Jinja control rather than Python: per file and overall.

    python benchmarks/control_lines.py              # the working tree
    python benchmarks/control_lines.py --rev main   # a commit, for a before/after comparison

A control line is a line that holds nothing but Jinja statement tags (``{% if ... %}``,
``{%- else %}``, ``{% endif -%}``...): it renders to nothing in any project. A line that
mixes Python and an inline ``{% if %}`` counts as Python. ``if-blocks`` counts the
``{% if`` tags. The Python templates are every file under ``template/`` that renders to a
``.py`` file, those that only some answers render (``{% if amp %}precision.py{% endif %}``)
too; a plain ``.py`` file has no control lines but counts in the total. The last line
repeats the sum over the files whose names hold no condition, as issue 25 first measured.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = re.compile(r"\{%.*?%\}")
CONTROL = re.compile(r"^\s*(\{%-?(?:(?!%\}).)*-?%\}\s*)+$")
IF = re.compile(r"\{%-?\s*if\b")


def is_python(name: str) -> bool:
    """Whether the template file ``name`` renders to a Python file."""
    return TAG.sub("", name).removesuffix(".jinja").endswith(".py")


def python_templates(rev: str | None) -> dict[str, str]:
    """The Python templates' paths (under template/) and texts, at ``rev`` or as on disk."""
    if rev is None:
        paths = sorted(p for p in (ROOT / "template").rglob("*") if p.is_file())
        return {
            str(p.relative_to(ROOT / "template")): p.read_text() for p in paths if is_python(p.name)
        }
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "template/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {
        name.removeprefix("template/"): subprocess.run(
            ["git", "show", f"{rev}:{name}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for name in listing
        if is_python(Path(name).name)
    }


def count(text: str) -> tuple[int, int, int]:
    """Lines, control lines and if-blocks of one template."""
    lines = text.splitlines()
    control = sum(1 for line in lines if CONTROL.match(line))
    return len(lines), control, len(IF.findall(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", help="a git revision (default: the working tree)")
    parser.add_argument("--all", action="store_true", help="list files without control lines")
    args = parser.parse_args()
    rows = [(name, *count(text)) for name, text in python_templates(args.rev).items()]
    rows.sort(key=lambda row: row[2] / max(row[1], 1), reverse=True)
    print(f"{'control':>7} {'lines':>6} {'ratio':>6} {'ifs':>4}  file")
    for name, lines, control, ifs in rows:
        if control or args.all:
            print(f"{control:7d} {lines:6d} {control / max(lines, 1):6.1%} {ifs:4d}  {name}")
    for label, chosen in [
        ("all", rows),
        ("unconditional", [row for row in rows if not TAG.search(Path(row[0]).name)]),
    ]:
        lines, control, ifs = (sum(row[i] for row in chosen) for i in (1, 2, 3))
        ratio = control / lines
        print(f"{control:7d} {lines:6d} {ratio:6.1%} {ifs:4d}  {label}: {len(chosen)} files")


if __name__ == "__main__":
    main()
