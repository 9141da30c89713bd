"""Render every toggle combination and check the source it produces (fast: no training)."""

from __future__ import annotations

import ast
import logging
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import vulture
import yaml
from combos import (
    ALL,
    ALL_OFF,
    ALL_ON,
    BY_ID,
    DEFAULT,
    PACKAGE,
    TABLE,
    TEMPLATE_DIR,
    Combo,
    describe,
    expected_files,
    render,
)
from jinja2.sandbox import SandboxedEnvironment
from jinja2_ansible_filters import AnsibleCoreFiltersExtension

COMBOS = pytest.mark.parametrize("combo", ALL, ids=lambda combo: combo.id)
PKG = Path("src") / PACKAGE
ANSWERS_FILE = ".copier-answers.yml"


def project_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


@pytest.fixture(scope="module")
def every_render(request, rendered) -> dict[str, Path]:
    """Every combination, rendered (once per session, shared by the test processes); under
    --quick (nox -s quick) the all-on and all-off ones."""
    combos = [ALL_ON, ALL_OFF] if request.config.getoption("--quick") else ALL
    return {combo.id: rendered(combo) for combo in combos}


@COMBOS
def test_no_jinja_residue(rendered, combo: Combo) -> None:
    root = rendered(combo)
    residue = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in project_files(root)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        # GitHub Actions' own expressions, ${{ ... }}, are meant to be there.
        if any(mark in line.replace("${{", "") for mark in ("{{", "{%", "{#"))
    ]
    assert not residue, "Jinja residue:\n" + "\n".join(residue)


def test_every_python_file_compiles(every_render: dict[str, Path]) -> None:
    """What compileall checks, in this process: each distinct file content compiled once."""
    seen: dict[bytes, str] = {}
    for root in every_render.values():
        for path in root.rglob("*.py"):
            seen.setdefault(path.read_bytes(), str(path))
    errors = []
    for source, name in seen.items():
        try:
            compile(source, name, "exec", dont_inherit=True)
        except SyntaxError as error:
            errors.append(f"{name}:{error.lineno}: {error.msg}")
    assert not errors, "\n".join(errors)


# The private names a rendered package may reach, each listed with its reason in
# docs/reference/beyond-public-api.md: (module file, name).
BEYOND_THE_PUBLIC_API = {
    ("sharding.py", name)
    for name in ("_collective_utils", "_redistribute", "_op_dispatcher", "_gen_transform_infos")
    + ("_propagate_tensor_meta_cached", "_clear_DTensor_sharding_propagator_cache", "_C")
    + ("_orig_mod", "_StorageInfo", "_MEM_FORMAT_ENCODING", "_get_layout")
} | {("distributed.py", "_orig_mod")}


def private_uses(source: str) -> list[tuple[int, str]]:
    """Where ``source`` imports ctypes, imports a private module or name, or reads or sets
    another module's private attribute (``os._exit`` is public)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ctypes"]
            found += [(node.lineno, a.name) for a in node.names if private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(a.name for a in node.names)]
            found += [(node.lineno, name) for name in names if private(name)]
        elif isinstance(node, ast.Attribute) and private(node.attr) and node.attr != "_exit":
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in NAMED_ATTRIBUTE:
            named = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            found += [(node.lineno, name) for name in named if private(str(name))]
        elif isinstance(node, ast.Constant) and re.fullmatch(TORCH_NAME, str(node.value)):
            found.append((node.lineno, str(node.value)))  # a name for torch's allowlist
    return found


NAMED_ATTRIBUTE = ("getattr", "setattr", "hasattr", "delattr")
# A private class or function named in a string ("_StorageInfo", "_get_layout"), not a key
# such as the answers file's "_commit".
TORCH_NAME = r"_[A-Z]\w*|_[a-z]\w*_\w*"


def private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def test_rendered_code_uses_public_mechanisms(every_render: dict[str, Path]) -> None:
    """No ctypes, no private module or attribute of torch or the standard library, in any
    package file of any combination, but the places docs/reference/beyond-public-api.md
    lists."""
    seen: dict[bytes, Path] = {}
    for root in every_render.values():
        for path in (root / "src" / PACKAGE).glob("*.py"):
            seen.setdefault(path.read_bytes(), path)
    offending = [
        f"{path}:{line}: {name}"
        for source, path in seen.items()
        for line, name in private_uses(source.decode())
        if (path.name, name) not in BEYOND_THE_PUBLIC_API
    ]
    assert not offending, "\n".join(offending)


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_clean(every_render: dict[str, Path], command: list[str]) -> None:
    """One ruff over every render: each file under its own project's settings (ruff finds
    the pyproject.toml nearest to a file), named by its combination's folder."""
    roots = sorted({root.parent for root in every_render.values()})
    assert len(roots) == 1, roots  # the shared folder that holds them all
    paths = sorted(root.name for root in every_render.values())
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", *paths],
        cwd=roots[0],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, describe(result)


@COMBOS
def test_expected_files(rendered, combo: Combo) -> None:
    root = rendered(combo)
    for always in ["pyproject.toml", ".gitignore", ANSWERS_FILE]:
        assert (root / always).is_file(), always
    for module in ["__init__", "config", "data", "model", "train"]:
        assert (root / PKG / f"{module}.py").is_file(), module
    # Every file the template names conditionally, found from template/ itself.
    present, absent = expected_files(combo)
    missing = sorted(name for name in present if not (root / name).is_file())
    stray = sorted(name for name in absent if (root / name).exists())
    assert not missing, f"missing: {missing}"
    assert not stray, f"rendered although switched off: {stray}"
    leftovers = [p.name for p in project_files(root) if p.name.endswith(".jinja") or not p.name]
    assert not leftovers


@COMBOS
def test_switched_off_toggles_leave_no_trace(rendered, combo: Combo) -> None:
    root = rendered(combo)
    traces = [word for t in TABLE if not getattr(combo, t.name) for word in t.traces]
    if not traces:
        return
    pattern = re.compile("|".join(re.escape(word) for word in traces), re.IGNORECASE)
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in project_files(root)
        if path.name != ANSWERS_FILE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "traces of switched-off toggles:\n" + "\n".join(found)


@COMBOS
def test_every_command_named_is_there(rendered, combo: Combo) -> None:
    """No file of a render tells the user to run a command it lacks: each ``python -m
    <package>.X`` names a module of the package, each ``<package>-X`` a script of pyproject."""
    root = rendered(combo)
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    script = PACKAGE.replace("_", "-")
    pattern = re.compile(rf"python -m {PACKAGE}\.(\w+)|(?<![\w/-]){script}-(\w+)")
    missing = [
        f"{path.relative_to(root)}:{number}: {match.group(0)}"
        for path in project_files(root)
        if path.name != ANSWERS_FILE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in pattern.finditer(line)
        if (match[1] and match[1] != "X" and not (root / PKG / f"{match[1]}.py").is_file())
        or (match[2] and f"{script}-{match[2]}" not in scripts)
    ]
    assert not missing, "commands the render does not have:\n" + "\n".join(missing)


# Names a library calls: torch a module's forward, pytest its hooks and marks,
# multiprocessing the feeder-error hook of its queues.
CALLED_BY_LIBRARIES = ("forward", "pytestmark", "pytest_*", "_on_queue_feeder_error")


def test_no_render_leaves_code_unused(every_render: dict[str, Path]) -> None:
    """No combination defines a function, method, class or variable it never uses: what an
    answer switched off leaves behind when it takes a helper's last caller with it. vulture
    finds them (down to its 60% confidence; the rendered pyproject asks 80%, for a user's own
    code). What it cannot see counts as a use: a string that is a name (`usefixtures`), a
    name in a string of several lines that is not a docstring (the tests' hooks are Python
    source in strings), an autouse fixture, the names torch and pytest call (`forward`,
    `pytestmark`, `pytest_*` hooks), and the hook data.py sets on multiprocessing's Queue for
    multiprocessing to call."""
    left = []
    for name, root in every_render.items():
        files = sorted((root / "src").rglob("*.py")) + sorted((root / "tests").rglob("*.py"))
        scanner = vulture.Vulture(ignore_names=list(CALLED_BY_LIBRARIES))
        scanner.scavenge([str(path) for path in files])
        called = set().union(*(unseen_uses(path.read_text()) for path in files))
        left += [
            f"{name}: {Path(item.filename).relative_to(root)}:{item.first_lineno}: {item.message}"
            for item in scanner.get_unused_code(min_confidence=60)
            if item.name not in called
        ]
    assert not left, "unused code:\n" + "\n".join(left)


def unseen_uses(source: str) -> set[str]:
    """The names a module uses where vulture does not look: strings that are a name, the
    words of its strings of several lines but its docstrings, and its autouse fixtures."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    strings = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    ]
    words = {text for text in strings if text.isidentifier()}
    words |= {word for text in strings if "\n" in text for word in re.findall(r"\w+", text)}
    autouse = {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for decorator in node.decorator_list
        if "autouse=True" in ast.unparse(decorator)
    }
    return words | autouse


@COMBOS
def test_answers_file_records_answers(rendered, combo: Combo) -> None:
    answers = yaml.safe_load((rendered(combo) / ANSWERS_FILE).read_text())
    for name, value in combo.answers.items():
        assert answers[name] == value, name
    for name in combo.toggles.keys() - combo.answers.keys():
        assert name not in answers  # not asked, so not recorded
    assert answers["package_name"] == PACKAGE
    assert answers["project_name"]
    assert answers["_src_path"]
    assert "_commit" in answers


# Each breaks a render: not an identifier, a keyword, a module or test helper of the project,
# the standard library, a package the project or its extras import.
REFUSED_NAMES = ["2abc", "my-pkg", "_x", "import", "class", "train", "conftest", "processes"]
REFUSED_NAMES += ["test_data", "torch", "json", "os", "matplotlib", "tensorboard", "setuptools"]
REFUSED_NAMES += ["loggers", "mlflow", "wandb"]
# A distribution name pip refuses ("my-pkg-"), or the name of a dev tool, an extra or a
# startup hook: the package would shadow it, or be shadowed.
REFUSED_NAMES += ["my_pkg_", "safetensors", "nox", "mypy", "sitecustomize", "pytest_cov", "yaml"]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_invalid_package_name_is_rejected(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="package_name") as error:
        render({"package_name": name}, tmp_path / "project")
    message = str(error.value)
    assert f'"{name}"' in message
    # It says what to change, with an example of a valid name.
    assert re.search(r"\b(use|choose)\b", message), message
    assert "e.g." in message, message
    assert not (tmp_path / "project" / "src").exists()


@pytest.mark.parametrize("length", [41, 300])
def test_long_package_name_is_refused_politely(tmp_path: Path, length: int) -> None:
    name = ("a_" * length)[: length - 1] + "z"
    with pytest.raises(ValueError, match="package_name") as error:
        render({"package_name": name}, tmp_path / "project")
    message = str(error.value)
    assert f"{length} characters" in message and "40 or fewer" in message, message
    assert "e.g." in message and len(message) < 400, message
    assert not (tmp_path / "project" / "src").exists()


def test_longest_package_name_renders(tmp_path: Path) -> None:
    name = "a" * 39 + "z"  # names.LONGEST: renders lint-clean up to it (test_names.py)
    root = render({**BY_ID["none"].answers, "package_name": name}, tmp_path / "project")
    assert (root / "src" / name / "train.py").is_file()


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("project_name", "x" * 81),
        ("project_name", "Two\nlines"),
        ("description", "one\ntwo"),
        ("description", "d" * 301),
        ("author", "A\tB"),
    ],
)
def test_free_text_that_breaks_a_file_is_refused(tmp_path: Path, question: str, value: str) -> None:
    with pytest.raises(ValueError, match=question) as error:
        render({question: value, "package_name": "pkg"}, tmp_path / "project")
    assert "e.g." in str(error.value)
    assert not (tmp_path / "project" / "src").exists()


# Backslashes, quotes, triple quotes and Markdown/TOML/HTML punctuation, where they land.
HOSTILE = {
    "project_name": "C:\\Temp \"Net\" #1 <b>*x*</b> 'q'",
    "description": 'Reads C:\\Users\\me\\data; says """hi""" and \\N{x} [a](b) `c` _d_ "end"',
    "author": 'Ada "A." \\ Lovelace',
}


def test_free_text_is_escaped_wherever_it_lands(tmp_path: Path) -> None:
    answers = {**BY_ID["none"].answers, **HOSTILE, "package_name": "pkg", "ci": "gitlab"}
    root = render(answers, tmp_path / "project")
    init = (root / "src" / "pkg" / "__init__.py").read_text()
    docstring = ast.get_docstring(ast.parse(init))  # a SyntaxError would fail here
    assert docstring.split("\n")[0] == HOSTILE["project_name"] + "."
    assert " ".join(docstring.split("\n")[2:]) == HOSTILE["description"]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["description"] == HOSTILE["description"]
    assert project["authors"] == [{"name": HOSTILE["author"]}]
    readme = (root / "README.md").read_text().splitlines()
    # Markdown punctuation is backslash-escaped: the title and the paragraph read as typed.
    unescape = re.compile(r"\\([\\`*_{}\[\]<>#|])")
    assert (
        readme[0].startswith("# ") and unescape.sub(r"\1", readme[0][2:]) == HOSTILE["project_name"]
    )
    assert unescape.sub(r"\1", readme[2]) == HOSTILE["description"]
    assert "<b>" not in readme[0]
    recorded = yaml.safe_load((root / ANSWERS_FILE).read_text())
    assert {key: recorded[key] for key in HOSTILE} == HOSTILE
    for command in (["ruff", "check", "src"], ["ruff", "format", "--check", "src"]):
        result = subprocess.run(
            [sys.executable, "-m", *command], cwd=root, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, describe(result)
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import pkg; print(pkg.__doc__)"],
        cwd=root / "src",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, describe(result)


def test_empty_project_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="project_name") as error:
        render({"project_name": "  "}, tmp_path / "project")
    assert "empty" in str(error.value)
    assert "e.g." in str(error.value)
    assert not (tmp_path / "project" / "src").exists()


def test_all_combinations_are_distinct() -> None:
    assert len({combo.id for combo in ALL}) == len(ALL) == len(set(ALL))


# ---------------------------------------------------------------- the team scaffold questions
# Each tuple renders once, all toggles off (the cheapest project), and varies the answers
# outside the toggle matrix together: every licence, every ci, every python_min.
SCAFFOLD = {
    "mit-github": dict(license="MIT", ci="github"),
    "bsd-gitlab": dict(
        license="BSD-3-Clause",
        ci="gitlab",
        python_min="3.12",
        copyright_year="2024",
        author="Ada Lovelace",
    ),
    "apache-none": dict(license="Apache-2.0", ci="none", python_min="3.13"),
    "proprietary-github": dict(license="none", ci="github", copyright_year="2020-2025"),
}
SPDX = {"MIT": "MIT", "BSD-3-Clause": "BSD-3-Clause", "Apache-2.0": "Apache-2.0"}
PYTHONS = ["3.11", "3.12", "3.13"]


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory: pytest.TempPathFactory):
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            answers = {**BY_ID["none"].answers, **SCAFFOLD[name]}
            cache[name] = render(answers, tmp_path_factory.mktemp(name) / "project")
        return cache[name]

    return get


@pytest.mark.parametrize("name", SCAFFOLD)
def test_license_file_and_metadata(scaffold, name: str) -> None:
    answers = SCAFFOLD[name]
    root = scaffold(name)
    text = (root / "LICENSE").read_text()
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    holder = answers.get("author", "The Image Classifier authors")
    year = answers.get("copyright_year")
    if answers["license"] == "Apache-2.0":
        # The licence's own text, unchanged: it carries no copyright line.
        assert text.lstrip().startswith("Apache License\n")
        assert "Version 2.0, January 2004" in text
        assert "END OF TERMS AND CONDITIONS" in text
    else:
        notice = f"Copyright (c) {year} {holder}" if year else f"Copyright (c) {holder}"
        assert notice + "\n" in text.splitlines(keepends=True)[2], text[:200]
    if answers["license"] == "none":
        assert "All rights reserved." in text
        assert project["license"] == "LicenseRef-Proprietary"
        assert "Private :: Do Not Upload" in project["classifiers"]
    else:
        assert project["license"] == SPDX[answers["license"]]
        assert "classifiers" not in project  # License :: classifiers are deprecated by SPDX
    assert project["license-files"] == ["LICENSE"]


@pytest.mark.parametrize("name", SCAFFOLD)
def test_ci_runs_the_nox_sessions_on_every_supported_python(scaffold, name: str) -> None:
    answers = SCAFFOLD[name]
    root = scaffold(name)
    github, gitlab = root / ".github" / "workflows" / "ci.yml", root / ".gitlab-ci.yml"
    assert github.is_file() == (answers["ci"] == "github")
    assert (root / ".github").exists() == (answers["ci"] == "github")
    assert gitlab.is_file() == (answers["ci"] == "gitlab")
    # CI tests every Python torch publishes wheels for, from python_min on.
    wanted = [v for v in [*PYTHONS, "3.14"] if v >= answers.get("python_min", "3.11")]
    noxfile = (root / "noxfile.py").read_text()
    for session in ["lint", "typecheck", "tests"]:
        assert f"def {session}(session: nox.Session)" in noxfile
    if answers["ci"] == "github":
        workflow = yaml.safe_load(github.read_text())
        jobs = workflow["jobs"]
        assert jobs["checks"]["strategy"]["matrix"]["python-version"] == wanted
        commands = [step.get("run", "") for job in jobs.values() for step in job["steps"]]
        assert "nox -s lint" in commands
        assert "nox -s typecheck" in commands and "nox -s tests" in commands
        caches = [s for s in jobs["checks"]["steps"] if "actions/cache" in s.get("uses", "")]
        assert caches[0]["with"]["path"] == "~/.cache/pip"
        assert "concurrency" in workflow
    elif answers["ci"] == "gitlab":
        pipeline = yaml.safe_load(gitlab.read_text())
        matrix = pipeline["checks"]["parallel"]["matrix"][0]["PYTHON_VERSION"]
        assert matrix == wanted
        assert pipeline["checks"]["script"][-2:] == ["nox -s typecheck", "nox -s tests"]
        assert pipeline["lint"]["script"][-1] == "nox -s lint"
        assert ".cache/pip" in pipeline["checks"]["cache"]["paths"]
    else:
        # Hooks are fetched from GitHub whatever the CI: their addresses do not count.
        files = [p for p in project_files(root) if p.name != ANSWERS_FILE]
        everything = re.sub(r"https://github\.com/\S+", "", "\n".join(map(Path.read_text, files)))
        assert not re.search(r"github|gitlab", everything, re.IGNORECASE)


def test_invalid_copyright_year_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="copyright_year") as error:
        render({"copyright_year": "last year"}, tmp_path / "project")
    assert "e.g." in str(error.value)


def test_pre_commit_config(scaffold) -> None:
    """The hooks cannot be installed offline, so their configuration is what is checked."""
    for name in ["mit-github", "apache-none"]:
        config = yaml.safe_load((scaffold(name) / ".pre-commit-config.yaml").read_text())
        hooks = {repo["repo"]: [h["id"] for h in repo["hooks"]] for repo in config["repos"]}
        revs = [repo["rev"] for repo in config["repos"]]
        assert all(re.fullmatch(r"v\d+\.\d+\.\d+", rev) for rev in revs), revs
        standard = hooks["https://github.com/pre-commit/pre-commit-hooks"]
        for hook in ["trailing-whitespace", "end-of-file-fixer", "check-yaml", "check-toml"]:
            assert hook in standard
        assert "check-added-large-files" in standard
        ruff = hooks["https://github.com/astral-sh/ruff-pre-commit"]
        assert ruff == ["ruff-check", "ruff-format"]
        zizmor = "https://github.com/zizmorcore/zizmor-pre-commit"
        assert (zizmor in hooks) == (SCAFFOLD[name]["ci"] == "github")
    # The rendered ruff hook is the ruff these tests check the renders with.
    ruff_repo = next(r for r in config["repos"] if "ruff-pre-commit" in r["repo"])
    version = subprocess.run(
        [sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    # Formatting changes between minor versions of ruff: then update the hook's rev.
    assert ruff_repo["rev"].split(".")[:2] == f"v{version}".split(".")[:2], (ruff_repo, version)


@COMBOS
def test_files_pass_the_hygiene_hooks(rendered, combo: Combo) -> None:
    """What the pre-commit hooks check, checked here: they would rewrite a failing file."""
    root = rendered(combo)
    problems = []
    for path in project_files(root):
        name = str(path.relative_to(root))
        data = path.read_bytes()
        text = data.decode()
        if path.stat().st_size > 500_000:
            problems.append(f"{name}: larger than check-added-large-files allows")
        if b"\r" in data:
            problems.append(f"{name}: CR line endings")
        if not text.endswith("\n") or text.endswith("\n\n"):
            problems.append(f"{name}: must end with exactly one newline")
        for number, line in enumerate(text.splitlines(), 1):
            if line != line.rstrip():
                problems.append(f"{name}:{number}: trailing whitespace")
            if re.search(r"#\s*noqa(?!:)|#\s*type:\s*ignore(?!\[)", line):
                problems.append(f"{name}:{number}: blanket noqa or type: ignore")
            if re.match(r"(<<<<<<< |=======$|======= |>>>>>>> )", line):
                problems.append(f"{name}:{number}: looks like a merge conflict marker")
            if "\ufffd" in line:
                problems.append(f"{name}:{number}: unicode replacement character")
            if path.suffix == ".py" and re.search(r"\bimport pdb\b|\bbreakpoint\(\)", line):
                problems.append(f"{name}:{number}: debug statement")
        if path.suffix in (".yml", ".yaml"):
            yaml.safe_load(text)
        if path.suffix == ".toml":
            tomllib.loads(text)
    assert not problems, "\n".join(problems)


def test_render_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Under nox, whose root logger shows DEBUG, copier's git calls logged one line each."""
    with caplog.at_level(logging.DEBUG):
        render(BY_ID["none"].answers, tmp_path / "project")
    assert not caplog.records, [record.getMessage() for record in caplog.records][:5]


def test_the_readme_conflict_search_finds_markers_and_not_itself(rendered, tmp_path: Path) -> None:
    """The README's command for conflict markers, run in a fresh project: nothing; with a
    conflict left by copier update: that file alone."""
    root = tmp_path / "project"
    shutil.copytree(rendered(DEFAULT), root)
    readme = (root / "README.md").read_text()
    command = re.search(r"Find them with `(git grep [^`]+)`", readme)
    assert command, "the README names no conflict search"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    search = ["bash", "-c", command.group(1)]
    found = subprocess.run(search, cwd=root, capture_output=True, text=True, check=False)
    assert found.stdout == "", found.stdout
    config = root / "src" / PACKAGE / "config.py"
    config.write_text("<<<<<<< before updating\n=======\n>>>>>>> after updating\n")
    found = subprocess.run(search, cwd=root, capture_output=True, text=True, check=False)
    assert found.stdout.splitlines() == [f"src/{PACKAGE}/config.py:1:<<<<<<< before updating"]


@pytest.mark.parametrize("backend", ["cu128", "none"])
def test_torch_backend_sets_uv_and_pip_alike(tmp_path: Path, backend: str) -> None:
    """uv's index for torch (pyproject) and the README's pip command name one build."""
    root = render({**BY_ID["none"].answers, "torch_backend": backend}, tmp_path / "project")
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    readme = (root / "README.md").read_text()
    if backend == "none":
        assert "uv" not in pyproject.get("tool", {})
        assert "download.pytorch.org" not in readme and "3 GB" in readme
        return
    url = f"https://download.pytorch.org/whl/{backend}"
    uv = pyproject["tool"]["uv"]
    assert uv["index"] == [{"name": f"pytorch-{backend}", "url": url, "explicit": True}]
    assert [source["index"] for source in uv["sources"]["torch"]] == [f"pytorch-{backend}"]
    assert f"pip install torch --index-url {url}" in readme
    assert set(uv["sources"]) == {"torch"}  # every other package from PyPI


# In a render's process: an exit handler registered after the import, which must run all
# the same, and garbage left in a reference cycle, whose finalizer writes a file once a
# garbage collection reaches it. The collection just before it sets the collector's counts
# to zero, so that none but the one at exit could reach it in the few allocations left.
EXIT_WITHOUT_THE_LAST_COLLECTION = f"""
import atexit, gc
import {PACKAGE}

class Cycle:
    def __del__(self, open=open):
        open("finalized", "w").close()

atexit.register(lambda: open("handled", "w").close())
gc.collect()
cycle = Cycle()
cycle.me = cycle
del cycle
"""


def test_only_the_tests_skip_the_last_garbage_collection(rendered, tmp_path: Path) -> None:
    """Importing the package changes nothing at exit: the final collection runs. The
    processes the tests start (tests/ on their path) skip it through tests/sitecustomize.py
    (`atexit.register(gc.freeze)`: half a second of each exit, benchmarks/exit_cost.py), and
    the exit handlers registered after it still run."""
    root = rendered(ALL_OFF)
    command = [sys.executable, "-c", EXIT_WITHOUT_THE_LAST_COLLECTION]
    for paths, collected in [([root / "src"], True), ([root / "src", root / "tests"], False)]:
        env = {"PYTHONPATH": os.pathsep.join(map(str, paths)), "PATH": "/usr/bin:/bin"}
        cwd = tmp_path / str(len(paths))
        cwd.mkdir()
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        assert result.returncode == 0, describe(result)
        assert (cwd / "handled").exists(), "an exit handler did not run"
        assert (cwd / "finalized").exists() == collected, paths


def test_the_readme_leads_to_the_guide_to_your_own_data(rendered) -> None:
    """The guide to your data, model and task (the template's docs/own-data.md): a link
    where the template was copied from a GitHub or GitLab URL, else where it lies."""
    readme = (rendered(DEFAULT) / "README.md").read_text()
    assert '"Your data, your model, your task" (`docs/own-data.md` in\n  the template' in readme
    text = (TEMPLATE_DIR / "README.md.jinja").read_text()
    start = text.index("the template's guide, ")
    part = text[start : text.index("{% endif %}", start) + len("{% endif %}")]
    env = SandboxedEnvironment(extensions=[AnsibleCoreFiltersExtension])  # copier's filters
    for src, link in [
        ("https://github.com/me/tmpl.git", "https://github.com/me/tmpl/blob/HEAD/docs/own-data.md"),
        ("https://gitlab.com/we/tmpl", "https://gitlab.com/we/tmpl/-/blob/HEAD/docs/own-data.md"),
    ]:
        said = env.from_string(part).render(_copier_answers={"_src_path": src})
        assert f'["Your data, your model, your\n  task"]({link})' in said, said
