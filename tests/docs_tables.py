"""The tables of the pages that are derived, not written: the questions of
docs/reference/questions.md, the training flags of docs/reference/flags.md and the package's
modules in README.md's layout.

A derived table sits in its page between cog markers (https://cog.readthedocs.io), which the
site and GitHub do not show:

    <!-- [[[cog import docs_tables; cog.out(docs_tables.table("flags")) ]]] -->
    ...the table, as this module makes it...
    <!-- [[[end]]] -->

``nox -s tables`` rewrites them (``cog -r``); tests/test_docs.py fails on a page whose table
is not what this module makes now, naming the command. The facts come from where they live:
a question's type, default and condition from copier.yml; a flag's default, group and help
from its field in the rendered ``config.py``, and which answer brings it from TABLE
(tests/combos.py); a module's line from the rendered README's file list, and which answer
owns it from the template's file names. Two columns are written by hand, read back from the
page and kept row by row: the questions' *what it decides* (a new question starts with its
copier.yml help) and the flags' *more*.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from combos import (
    ALONE,
    DEFAULT,
    PACKAGE,
    REPO_ROOT,
    TABLE,
    Combo,
    chain,
    owned_files,
    questions,
)
from combos import render as render_into

Rendered = Callable[[Combo], Path]
FLAGS_PAGE = REPO_ROOT / "docs" / "reference" / "flags.md"
QUESTIONS_PAGE = REPO_ROOT / "docs" / "reference" / "questions.md"
# A table's combinations: the all-on one first, whose words and order the table takes; then
# each answer alone, for what the all-on one lacks (a choice such as sharding's shard).
SOURCES = [DEFAULT, *ALONE.values()]
BLOCK = re.compile(
    r"^<!-- \[\[\[cog .*?docs_tables\.table\(\"(?P<name>\w+)\"\).*?\]\]\] -->\n"
    r"(?P<body>.*?)^<!-- \[\[\[end\]\]\] -->$",
    re.MULTILINE | re.DOTALL,
)


def config_module(root: Path):
    """The rendered project's config.py, imported from its path (the standard library only:
    no torch import)."""
    path = root / "src" / PACKAGE / "config.py"
    name = f"rendered_config_{root.parent.name}_{root.name}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    config = importlib.util.module_from_spec(spec)
    sys.modules[name] = config  # dataclasses looks the module up while it is created
    spec.loader.exec_module(config)
    return config


def flag_of(field: dataclasses.Field) -> str:
    return "--" + field.name.replace("_", "-")


def merged(lists: list[list[str]]) -> list[str]:
    """The keys of every list, in the first list's order, each key another list adds placed
    after the key it follows there."""
    order: list[str] = []
    for keys in lists:
        after = None
        for key in keys:
            if key not in order:
                order.insert(order.index(after) + 1 if after else 0, key)
            after = key
    return order


# ---------------------------------------------------------------- flags.md
def page_rows(text: str) -> dict[str, dict[str, str]]:
    """A page's table, each row by column name, by its first cell's first word (for flags.md
    ``--sync-bn`` for ``--sync-bn / --no-sync-bn``, ``--config`` too)."""
    lines = [line for line in text.splitlines() if line[:2] == "| "]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, [cell.strip() for cell in line.strip("|").split("|")], strict=True))
        rows[row[header[0]].strip("`").split()[0]] = row
    return rows


def invocation(action) -> str:
    """The flag as --help shows it: ``--lr LR``, ``--schedule {onecycle,...}``, ``--compile /
    --no-compile``."""
    if action.nargs == 0:  # BooleanOptionalAction
        return " / ".join(action.option_strings)
    if action.choices:
        return f"{action.option_strings[0]} {{{','.join(action.choices)}}}"
    return f"{action.option_strings[0]} {action.metavar or action.dest.upper()}"


def with_code(text: str) -> str:
    """Flags in backticks, as the pages write them."""
    return re.sub(r"(?<![\w`])(--[a-z][a-z0-9-]*)", r"`\1`", text)


def flags_table(rendered: Rendered) -> str:
    """flags.md's table: every flag a project can have, with its facts."""
    brings = {
        flag: " + ".join(chain(toggle))
        for toggle in TABLE
        for flag in toggle.flags
        if not flag.startswith("--no-")  # on the row of its positive form
    }
    parsers = {}  # flag -> (the parser's action, the field or None)
    order = []
    for combo in SOURCES:
        config = config_module(rendered(combo))
        fields = {flag_of(f): f for f in dataclasses.fields(config.Config)}
        actions = [a for a in config.build_parser()._actions if a.option_strings[0] != "-h"]
        order.append([a.option_strings[0] for a in actions])
        for action in actions:
            flag = action.option_strings[0]
            parsers.setdefault(flag, (action, fields.get(flag)))
    more = {flag: row["more"] for flag, row in page_rows(FLAGS_PAGE.read_text()).items()}
    lines = [
        "| flag | default | present with | group | help | more |",
        "|---|---|---|---|---|---|",
    ]
    for flag in merged(order):
        action, field = parsers[flag]
        default = "none" if action.default in (None, "") else f"`{action.default}`"
        group = field.metadata["group"] if field else ""
        help_text = field.metadata["help"] if field else action.help
        help_text = with_code(help_text.replace("%%", "%"))
        cells = [f"`{invocation(action)}`", default, brings.get(flag, "always"), group]
        lines.append("| " + " | ".join([*cells, help_text, more.get(flag, "")]) + " |")
    return "\n".join(line.replace("|  |", "| |") for line in lines) + "\n"


# ---------------------------------------------------------------- questions.md
def condition(when: str) -> str:
    """copier.yml's ``when:`` in words: ``{{ ddp and sharding != 'shard' }}`` is "ddp and
    sharding is not shard"."""
    words = when.strip().removeprefix("{{").removesuffix("}}").strip()
    words = re.sub(r"\s*!=\s*'([^']*)'", r" is not \1", words)
    return re.sub(r"\s*==\s*'([^']*)'", r" is \1", words)


def questions_table(rendered: Rendered) -> str:
    """questions.md's table: every question of copier.yml, in the order copier asks them."""
    # The defaults as copier computed them (package_name's from project_name, say).
    answers = yaml.safe_load((rendered(DEFAULT) / ".copier-answers.yml").read_text())
    asked = {name: q for name, q in questions().items() if not name.startswith("_")}
    decides = {
        name: row["what it decides"] for name, row in page_rows(QUESTIONS_PAGE.read_text()).items()
    }
    lines = [
        "| question | type | default | asked when | what it decides |",
        "|---|---|---|---|---|",
    ]
    for name, question in asked.items():
        choices = question.get("choices")
        if question["type"] == "bool":
            kind, default = "yes/no", "yes" if answers[name] else "no"
        else:
            values = choices.values() if isinstance(choices, dict) else choices
            kind = ", ".join(map(str, values)) if choices else "text"
            default = f"`{answers[name]}`" if answers[name] != "" else "empty"
            template = str(question["default"])
            if "{{" in template:  # computed from the answers before it
                sources = [other for other in asked if re.search(rf"\b{other}\b", template)]
                default = f"from {', '.join(sources)} ({default})"
        when = condition(question["when"]) if "when" in question else "always"
        text = decides.get(name) or " ".join(question["help"].split())
        lines.append(f"| `{name}` | {kind} | {default} | {when} | {text} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- README.md's layout
def module_lines(readme: str) -> dict[str, str]:
    """A rendered README's file list: each module of the package with its words."""
    block = readme.split("## Files", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = block.split(f"src/{PACKAGE}/\n", 1)[1].splitlines()
    found: dict[str, str] = {}
    for line in lines:
        if not line.startswith("    "):  # the package's list has ended
            break
        if line.startswith("     "):  # the last module's words go on
            found[next(reversed(found))] += " " + line.strip()
            continue
        name, words = line.strip().split(None, 1)
        found[name] = words
    return found


def layout_tree(rendered: Rendered) -> str:
    """README.md's list of the package's modules: each with the answer that brings it, in
    parentheses, and the rendered README's words for it; in a ```text block."""
    owner = {
        path.rsplit("/", 1)[1]: toggle.name
        for toggle in TABLE
        for path in owned_files(toggle.name)
        if path.startswith(f"src/{PACKAGE}/")
    }
    found = [module_lines((rendered(combo) / "README.md").read_text()) for combo in SOURCES]
    words: dict[str, str] = {}
    for lines in found:
        for name, text in lines.items():
            words.setdefault(name, text)
    out = ["```text", f"src/{PACKAGE}/"]
    for name in merged([list(lines) for lines in found]):
        text = f"({owner[name]}) {words[name]}" if name in owner else words[name]
        out.append(f"    {name:<19} {text}")
    return "\n".join([*out, "```"]) + "\n"


TABLES = {"questions": questions_table, "flags": flags_table, "layout": layout_tree}


# ---------------------------------------------------------------- cog and the tests
def blocks(page: Path) -> dict[str, str]:
    """The derived tables of a page, by name, as the page has them."""
    return {match["name"]: match["body"] for match in BLOCK.finditer(page.read_text())}


# For cog, outside pytest: each combination rendered once per process, into a temporary
# folder that goes when the process ends.
_renders: dict[str, Path] = {}
_folder = tempfile.TemporaryDirectory(prefix="docs-tables-")


def _fresh(combo: Combo) -> Path:
    if combo.id not in _renders:
        _renders[combo.id] = render_into(combo.answers, Path(_folder.name) / combo.id)
    return _renders[combo.id]


def table(name: str, rendered: Rendered = _fresh) -> str:
    """The table ``name`` as the template makes it now."""
    return TABLES[name](rendered)
