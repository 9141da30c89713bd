"""TABLE (tests/combos.py) agrees with copier.yml and with the pages that list the answers, so
a new answer is one entry there: a question without an entry, or a page that says otherwise,
fails here with the line to change."""

from __future__ import annotations

import re

import jinja2
import pytest
import yaml
from combos import (
    ALL,
    ALONE,
    BY_NAME,
    CONDITION,
    COVERING,
    DEFAULT,
    PACKAGE,
    REPO_ROOT,
    TABLE,
    TEMPLATE_DIR,
    Combo,
    Toggle,
    asked,
    chain,
    defaults,
    owned_files,
    questions,
)

IDS = pytest.mark.parametrize("toggle", TABLE, ids=lambda t: t.name)


@IDS
def test_each_entry_is_a_question_of_copier_yml(toggle: Toggle) -> None:
    question = questions().get(toggle.name)
    assert question, f"copier.yml has no question {toggle.name}: TABLE's entry is stale"
    if toggle.values == (False, True):
        assert question["type"] == "bool", toggle.name
    else:
        choices = question["choices"]
        values = choices.values() if isinstance(choices, dict) else choices
        assert set(values) == set(toggle.values), f"{toggle.name}: values {toggle.values}"
    assert defaults()[toggle.name] in toggle.values, toggle.name
    assert toggle.name not in dir(Combo), f"{toggle.name} is a name Combo uses already"


@IDS
def test_copier_asks_each_when_the_table_says(toggle: Toggle) -> None:
    """copier.yml's `when:`, evaluated for every combination, against needs and conflicts."""
    when = questions()[toggle.name].get("when", "true")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    for combo in ALL:
        context = {t.name: t.values[t.name in combo.on] for t in TABLE}
        said = env.from_string(when).render(context).strip().lower() == "true"
        assert said == asked(toggle, combo.on), (
            f"copier.yml asks {toggle.name} {'with' if said else 'without'} {combo.id}: "
            f"its `when: {when}` and TABLE's needs/conflicts disagree"
        )


def test_every_yes_no_question_has_an_entry() -> None:
    """A yes/no question switches a feature on or off: TABLE must say what it adds."""
    asked = {name: q for name, q in questions().items() if not name.startswith("_")}
    toggles = {name for name, q in asked.items() if q.get("type") == "bool"}
    missing = sorted(toggles - BY_NAME.keys())
    assert not missing, f"add an entry to TABLE in tests/combos.py for {missing}"


def test_combinations() -> None:
    """Every combination once; the covering ones among them; the default one of them."""
    assert len({c.id for c in ALL}) == len(ALL)
    assert all(c in ALL for c in COVERING) and DEFAULT in ALL
    # Each answer alone has just the answers it needs.
    for name, combo in ALONE.items():
        assert combo.on == set(chain(BY_NAME[name])), name


@IDS
def test_flags_page_says_which_answer_brings_each_flag(toggle: Toggle) -> None:
    page = (REPO_ROOT / "docs" / "reference" / "flags.md").read_text()
    rows = re.findall(r"^\| `(--[a-z-]+)[^|]*\| [^|]* \| ([^|]+) \|", page, re.MULTILINE)
    present_with = {flag: where.strip() for flag, where in rows}
    wanted = " + ".join(chain(toggle))
    for flag in toggle.flags:
        if flag.startswith("--no-"):
            continue  # on the row of its positive form: `--sync-bn / --no-sync-bn`
        assert present_with.get(flag) == wanted, f"flags.md: {flag} is present with {wanted}"
    theirs = sorted(flag for flag, where in present_with.items() if where == wanted)
    assert theirs == sorted(f for f in toggle.flags if not f.startswith("--no-")), (
        f"flags.md lists {theirs} as present with {wanted}; TABLE's flags: {toggle.flags}"
    )


@IDS
def test_readme_says_which_answer_brings_each_module(toggle: Toggle) -> None:
    """README.md's list of modules (derived: tests/docs_tables.py) marks each module an answer
    owns with that answer."""
    readme = (REPO_ROOT / "README.md").read_text()
    for path in sorted(owned_files(toggle.name)):
        if path.startswith(f"src/{PACKAGE}/"):
            module = path.rsplit("/", 1)[1]
            line = rf"^    {re.escape(module)} +\({toggle.name}\) "
            assert re.search(line, readme, re.MULTILINE), f"README's modules: {module}"


def test_update_message_names_the_modules_each_answer_owns() -> None:
    """copier.yml's _message_after_update names the files an update deletes with an answer."""
    message = questions()["_message_after_update"]
    listed = dict(re.findall(r'"(\w+)": \[([^\]]*)\]', message))
    for toggle in TABLE:
        owned = sorted(
            path.rsplit("/", 1)[1].removesuffix(".py")
            for path in owned_files(toggle.name)
            if path.startswith(f"src/{PACKAGE}/")
        )
        said = sorted(re.findall(r'"(\w+)"', listed.get(toggle.name, "")))
        assert said == owned, f"copier.yml, _message_after_update: {toggle.name}: {owned}"


def test_reserved_module_names_are_the_templates_modules() -> None:
    """copier refuses a package_name that is one of the project's own modules or test helpers
    (includes/reserved_names.yml); the list is every such module the template can render,
    whatever the answers, found from its file names: a new module is caught here."""
    modules = {"test", "tests"}  # the test folder itself
    for folder in ("src/{{package_name}}", "tests", "."):
        for path in (TEMPLATE_DIR / folder).iterdir():
            name = CONDITION.sub("", path.name).removesuffix(".jinja")
            if path.is_file() and name.endswith(".py") and not name.startswith(("_", "test_")):
                modules.add(name.removesuffix(".py"))
    reserved = yaml.safe_load((REPO_ROOT / "includes" / "reserved_names.yml").read_text())
    listed = set(reserved["project_module_names"]["default"])
    assert listed == modules, (
        f"includes/reserved_names.yml, project_module_names: add {sorted(modules - listed)}, "
        f"remove {sorted(listed - modules)}"
    )
