"""The pages agree with the template: the flags and questions it has, the code they quote and
the tests they cite."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
import textwrap
from pathlib import Path

import pytest
from combos import BY_ID, CONDITION, COVERING, DEFAULT, PACKAGE, REPO_ROOT, Combo
from docs_tables import TABLES, blocks, config_module, flag_of, page_rows

DOCS = REPO_ROOT / "docs" / "reference"
NONE = BY_ID["none"]  # every answer off


def flags_page() -> dict[str, dict[str, str]]:
    """The table of flags.md: each flag's row, by column name."""
    rows = page_rows((DOCS / "flags.md").read_text())
    rows.pop("--config")  # argparse's own, not a field
    return rows


def field_row(field: dataclasses.Field) -> dict[str, str]:
    """What flags.md says of a field, as its facts give it ("none" for a default of None or "")."""
    default = "none" if field.default in (None, "") else f"`{field.default}`"
    # argparse shows %% as %; the page may put flags in backticks.
    help_text = field.metadata["help"].replace("%%", "%")
    return {"default": default, "group": field.metadata["group"], "help": help_text}


DERIVED = [REPO_ROOT / "README.md", DOCS / "questions.md", DOCS / "flags.md"]


@pytest.mark.parametrize("page", DERIVED, ids=lambda page: page.name)
def test_derived_tables_are_what_the_template_makes(rendered, page: Path) -> None:
    """A derived table (tests/docs_tables.py) is what the renders make of it now."""
    found = blocks(page)
    assert found, f"{page.name}: no derived table (cog block) in it"
    for name, body in found.items():
        made = TABLES[name](rendered)
        diff = "".join(difflib.unified_diff(body.splitlines(True), made.splitlines(True), n=0))
        assert body == made, f"{page.name}'s {name} table is stale: run nox -s tables\n{diff}"


def test_flags_page_rows_are_the_fields_with_their_facts(rendered) -> None:
    """Every field of the all-on Config is a row of flags.md and every row a field; its
    default, group and help are the field's, word for word."""
    fields = {flag_of(f): f for f in dataclasses.fields(config_module(rendered(DEFAULT)).Config)}
    rows = flags_page()
    assert set(rows) == set(fields), "flags.md's rows and the all-on Config's fields differ"
    wrong = []
    for flag, field in fields.items():
        row = rows[flag]
        page = {"default": row["default"], "group": row["group"], "help": row["help"]}
        page["help"] = page["help"].replace("`", "")
        if page != field_row(field):
            wrong.append(f"{flag}: the page has {page},\n    the field {field_row(field)}")
    assert not wrong, "flags.md differs from Config:\n" + "\n".join(wrong)


@pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)
def test_flags_page_says_which_answers_bring_each_flag(rendered, combo: Combo) -> None:
    """A combination has exactly the flags whose "present with" answers it has ("always", or
    answers joined by " + "), each with the page's default and group."""
    rows = flags_page()
    fields = {flag_of(f): f for f in dataclasses.fields(config_module(rendered(combo)).Config)}
    brought = {
        flag
        for flag, row in rows.items()
        if row["present with"] == "always"
        or all(combo.toggles[answer] for answer in row["present with"].split(" + "))
    }
    assert set(fields) == brought, "flags.md's present-with column is wrong for these"
    for flag, field in fields.items():
        facts = {key: field_row(field)[key] for key in ("default", "group")}
        assert {key: rows[flag][key] for key in facts} == facts, flag


def test_a_training_setting_that_an_answer_adds_says_its_value_without_it(rendered) -> None:
    """A checkpoint crosses a change of answers (docs/features/checkpointing.md) only where a
    training setting that the answer adds says, in answer_off, what a project without the
    answer trains like; a running setting may differ anyway."""
    rows = flags_page()
    everywhere = {flag_of(f) for f in dataclasses.fields(config_module(rendered(NONE)).Config)}
    for field in dataclasses.fields(config_module(rendered(DEFAULT)).Config):
        flag = flag_of(field)
        if flag in everywhere or field.metadata["group"] == "running":
            continue
        assert "answer_off" in field.metadata, f"{flag}: give it option(..., answer_off=...)"
        answer, _ = field.metadata["answer_off"]
        assert answer in rows[flag]["present with"].split(" + "), flag


# ---------------------------------------------------------------- code quoted in the pages
# A ```python block in a page says what it is on the last non-blank line before it, in an
# HTML comment (the site does not show it):
#   <!-- quote: src/image_classifier/train.py -->  the block occurs in that file of the
#       all-on project, lines in order and under one common indent; a line that is just
#       "..." stands for lines left out, so the parts between them are checked one by one,
#       in order.
#   <!-- recipe: NAME -->  a recipe of own-data.md, run by tests/test_own_data.py.
#   <!-- not a quote -->   an example for the reader, checked by nothing here.
PAGES = sorted([*(REPO_ROOT / "docs").rglob("*.md"), REPO_ROOT / "README.md"])
FENCE = re.compile(r"^\s*```python\s*$")
QUOTE = re.compile(r"^<!-- quote: (?P<path>\S+) -->$")
NOT_CHECKED_HERE = re.compile(r"^<!-- (not a quote|recipe: [\w-]+) -->$")


@dataclasses.dataclass
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    marker: str  # the line before the fence, stripped
    code: list[str]  # dedented

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def python_blocks() -> list[Block]:
    blocks = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        number = 0
        while number < len(lines):
            if FENCE.match(lines[number]):
                end = next(i for i in range(number + 1, len(lines)) if lines[i].strip() == "```")
                before = [line.strip() for line in lines[:number] if line.strip()]
                code = textwrap.dedent("\n".join(lines[number + 1 : end])).splitlines()
                relative = page.relative_to(REPO_ROOT).as_posix()
                blocks.append(Block(relative, number + 1, before[-1] if before else "", code))
                number = end
            number += 1
    return blocks


def parts(code: list[str]) -> list[list[str]]:
    """The block split at its "..." lines, empty parts dropped."""
    found: list[list[str]] = [[]]
    for line in code:
        if line.strip() == "...":
            found.append([])
        else:
            found[-1].append(line.rstrip())
    # Blank lines around a "..." belong to no part.
    found = [[*itertools.dropwhile(lambda line: not line, part)] for part in found]
    found = [[*itertools.dropwhile(lambda line: not line, part[::-1])][::-1] for part in found]
    return [part for part in found if part]


def indent_at(part: list[str], line: str) -> str | None:
    """The indent that makes part's first line the file's line, or None if none does."""
    indent = line.rstrip()[: len(line.rstrip()) - len(part[0])]
    return indent if line.rstrip().endswith(part[0]) and not indent.strip() else None


def find(part: list[str], lines: list[str], start: int) -> int | None:
    """The index just after part's first occurrence in lines at or after start, or None.

    part occurs where its lines are consecutive lines of the file, all under one indent."""
    for i in range(start, len(lines) - len(part) + 1):
        indent = indent_at(part, lines[i])
        if indent is not None and all(
            lines[i + j].rstrip() == (indent + line if line else "") for j, line in enumerate(part)
        ):
            return i + len(part)
    return None


def quoted(code: list[str], lines: list[str]) -> bool:
    start = 0
    for part in parts(code):
        start = find(part, lines, start)
        if start is None:
            return False
    return True


def mismatch(code: list[str], lines: list[str], path: str) -> str:
    """Where the quote and the file part: the first quoted line that differs, and the file's."""
    start = 0
    for part in parts(code):
        found = find(part, lines, start)
        if found is None:
            break
        start = found
    # Where most of the part's first lines occur together (the part's first line at least).
    matched, at = 0, None
    for i in range(start, len(lines)):
        indent = indent_at(part, lines[i])
        k = 0
        while indent is not None and k < len(part) and i + k < len(lines):
            if lines[i + k].rstrip() != (indent + part[k] if part[k] else ""):
                break
            k += 1
        if k > matched:
            matched, at = k, i
    if at is None:
        stripped = [line.strip() for line in lines]
        nearest = difflib.get_close_matches(part[0].strip(), stripped, n=1, cutoff=0)
        number = stripped.index(nearest[0]) + 1 if nearest else 0
        return (
            f"the quoted line\n    {part[0].strip()}\nis not in {path}; the closest line is "
            f"{path}:{number}\n    {nearest[0] if nearest else ''}"
        )
    here = at + matched
    file_line = lines[here].strip() if here < len(lines) else "(end of file)"
    return (
        f"the quote follows {path} from line {at + 1}, then differs at {path}:{here + 1}\n"
        f"    quote: {part[matched].strip()}\n    file:  {file_line}"
    )


BLOCKS = python_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.where)
def test_python_block_is_marked(block: Block) -> None:
    assert QUOTE.match(block.marker) or NOT_CHECKED_HERE.match(block.marker), (
        f"{block.where}: put <!-- quote: src/{PACKAGE}/FILE.py --> (checked against the all-on "
        "project), <!-- recipe: NAME --> or <!-- not a quote --> on the line before the block"
    )


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if QUOTE.match(b.marker)], ids=lambda block: block.where
)
def test_quoted_code_is_in_the_rendered_project(rendered, block: Block) -> None:
    """The page quotes the all-on project's code as it is, so a change to one shows."""
    root = rendered(DEFAULT)
    path = QUOTE.match(block.marker)["path"]
    file = root / path
    if file.is_file() and quoted(block.code, file.read_text().splitlines()):
        return
    elsewhere = [
        other.relative_to(root).as_posix()
        for other in sorted(root.rglob("*.py"))
        if quoted(block.code, other.read_text().splitlines())
    ]
    if elsewhere:
        pytest.fail(f"{block.where}: the quote is in {', '.join(elsewhere)}: fix its marker")
    if not file.is_file():
        pytest.fail(f"{block.where}: the marker names {path}, which the all-on project lacks")
    pytest.fail(f"{block.where}: " + mismatch(block.code, file.read_text().splitlines(), path))


# ---------------------------------------------------------------- tests the pages cite
CITING = [*PAGES, REPO_ROOT / "template" / "README.md.jinja"]
TEST_FILES = [*(REPO_ROOT / "tests").glob("test_*.py"), *(REPO_ROOT / "template").rglob("*test_*")]
# Words of the test split that are no tests: make_datasets' test_set and its metrics' keys.
TEST_SPLIT = {"test_set", "test_loss", "test_acc", "test_top5_acc", "test_samples"}


def test_cited_test_files_and_tests_exist() -> None:
    """Every test_*.py and test function a page names is one of the template's or the
    rendered project's, so a reader who looks for the proof finds it."""
    files = {CONDITION.sub("", path.name).removesuffix(".jinja") for path in TEST_FILES}
    functions = {
        name
        for path in TEST_FILES
        if path.is_file()
        for name in re.findall(r"^\s*def (test_\w+)", path.read_text(), re.MULTILINE)
    }
    missing = []
    for page in CITING:
        text = page.read_text()
        for name in sorted(set(re.findall(r"\btest_\w+\.py\b", text)) - files):
            missing.append(f"{page.relative_to(REPO_ROOT)}: no test file {name}")
        cited = set(re.findall(r"\b(test_\w+)\b(?!\.py)", text))
        for name in sorted(cited - functions - TEST_SPLIT - {f.removesuffix(".py") for f in files}):
            missing.append(f"{page.relative_to(REPO_ROOT)}: no test function {name}")
    assert not missing, "\n".join(missing)


def test_every_template_ref_the_pages_name_exists() -> None:
    """A `--vcs-ref` or `git merge` of this template names HEAD, `:current:` or a commit that
    a CHANGELOG heading names (no release is tagged yet), or a tag the page's own commands
    make (a team's `+team.N`): copier fails with a traceback on a ref that does not exist."""
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    commits = set(
        re.findall(r"^## \[\d+\.\d+\.\d+\] - .*, template commit (\w+)$", changelog, re.M)
    )
    wrong = []
    for page in [REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")]:
        found = re.findall(r"--vcs-ref ([\w.:+]+)|git merge (v?\d[\w.+]*)", page.read_text())
        for ref in ["".join(groups) for groups in found]:
            if ref not in {"HEAD", ":current:", *commits} and not re.search(r"\+team\.\d+$", ref):
                wrong.append(f"{page.relative_to(REPO_ROOT)}: {ref}")
    assert not wrong, "refs that no commit or tag is: " + ", ".join(wrong)
