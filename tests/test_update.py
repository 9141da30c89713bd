"""`copier update`: projects take template improvements without losing their edits (issue 6).

The tests build a temporary git repository of this template (a clone of the checkout they run
from, plus its uncommitted changes), tag it v0.1.0, commit a realistic template change on top and
tag that v0.2.0 (and a checkpoint format bump as v0.3.0). Tags exist only in that temporary clone.
A project is rendered at the old version, committed, edited the way users edit, committed, and
updated; the result must equal a fresh render at the new version with the same edits applied.
That one byte-for-byte comparison says that the user's edits are kept, that the template's change
arrived, that no conflict markers appeared, and that nothing else changed.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import combos
import pytest
import release_checkpoints
from combos import ALL_OFF, PACKAGE, SHORT_RUN, copier_cli, describe, render
from copier import run_update
from forkserver import PYTHON as FORKED
from test_e2e import STOPPED_AT_STEP_2, assert_identical

pytestmark = pytest.mark.update

ROOT = Path(__file__).resolve().parents[1]  # the template checkout under test
SRC = "template/src/{{package_name}}"
TRAIN = f"{SRC}/train.py.jinja"
CONFIG = f"{SRC}/config.py.jinja"
CHECKPOINT = f"{SRC}/checkpoint.py.jinja"
NEW_FILE = f"{SRC}/summary.py"  # the file that v0.2.0 adds
PRE_COMMIT = "template/.pre-commit-config.yaml.jinja"  # v0.2.0 appends a comment to it
PRE_COMMIT_CHANGE = "# v0.2.0: a template change to a file the user may delete\n"

# The files a user replaces whole (the seams, whose contract is seams.py), and the line v0.4.0
# adds to every other module of the package.
SEAMS = ("data.py", "model.py", "loss.py", "task.py")
# The test files of the user's own code, theirs as the seams are; every other one is machinery.
SEAM_TESTS = ("test_data.py", "test_model.py", "test_task.py")
MACHINERY_CHANGE = "# v0.4.0: a change to the machinery\n"
# The seams of the layout before this one: data.py and model.py also held machinery.
OLD_DATA = f"{SRC}/data.py.jinja"

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
GIT += ["-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false"]

# v0.2.0 corrects one line of train.py. The first candidate found exactly once is used, so the
# test survives edits to train.py elsewhere; if none is left, add a line that every combination
# renders. `foreach=True` is a real option of clip_grad_norm_: a plausible small fix.
TRAIN_FIXES = [
    (
        "clip_grad_norm_(run.model.parameters(), config.grad_clip)",
        "clip_grad_norm_(run.model.parameters(), config.grad_clip, foreach=True)",
    ),
    (
        "clip_grad_norm_(run.model.parameters(), run.config.grad_clip)",
        "clip_grad_norm_(run.model.parameters(), run.config.grad_clip, foreach=True)",
    ),
    (
        "torch.manual_seed(seed)  # seeds every CUDA device too",
        "torch.manual_seed(seed)  # seeds the CPU and every CUDA device",
    ),
    ('if __name__ == "__main__":', 'if __name__ == "__main__":  # python -m <package>.train'),
]
SUMMARY = '''\
"""Print the model's parameter counts: ``python -m <package>.summary [flags of train]``."""

from .config import parse_args
from .data import make_datasets
from .model import build_model


def main() -> None:
    config = parse_args()
    train_set, _, num_classes = make_datasets(config)
    model = build_model(config, num_classes, in_channels=train_set[0][0].shape[0])
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{total} parameters, {trainable} trainable")


if __name__ == "__main__":
    main()
'''


# ------------------------------------------------------------------------------------ helpers


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"git {' '.join(args)} failed in {cwd}:\n{done.stderr}"
    return done.stdout


def commit_all(folder: Path, message: str) -> None:
    """Commit everything in ``folder``, making it a git repository first if needed."""
    if not (folder / ".git").exists():
        git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "--allow-empty", "-m", message)


def sub(text: str, pattern: str, replace, what: str) -> str:
    """``re.sub`` that must match exactly once; ``what`` explains a miss."""
    new, n = re.subn(pattern, replace, text, flags=re.MULTILINE)
    assert n == 1, f"{what}: /{pattern}/ matched {n} times; update the test's edit"
    return new


def edit(path: Path, pattern: str, replace, what: str) -> None:
    path.write_text(sub(path.read_text(), pattern, replace, what))


def working_tree_files(root: Path) -> list[Path]:
    """The checkout's files as git sees them: tracked and untracked, never ignored ones."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        names = [Path(n) for n in sorted(set(out.decode().split("\0"))) if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: take the template
        names = [p.relative_to(root) for p in root.rglob("*") if "__pycache__" not in p.parts]
        names = [n for n in names if n.parts[0] in ("copier.yml", "includes", "template")]
    return [n for n in names if (root / n).is_file() or (root / n).is_symlink()]


def tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Every file under ``root`` but .git: contents and executable bit, by relative path."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git" or path.is_dir():
            continue
        files[rel.as_posix()] = (path.read_bytes(), bool(path.stat().st_mode & stat.S_IXUSR))
    return files


def assert_same_tree(actual: Path, expected: Path) -> None:
    got, want = tree(actual), tree(expected)
    assert sorted(got) == sorted(want), "the two projects have different files"
    differ = [name for name in want if got[name] != want[name]]
    assert not differ, f"files differ: {differ}\n" + "\n".join(
        f"--- {name}:\n{got[name][0].decode(errors='replace')}" for name in differ[:2]
    )


CONFLICT = re.compile(rb"^(<<<<<<< |=======$|>>>>>>> )", re.MULTILINE)


def assert_no_conflicts(project: Path) -> None:
    for name, (data, _) in tree(project).items():
        assert not name.endswith((".rej", ".orig")), f"update left {name}"
        # Markers as copier writes them, at the start of a line (the rendered README quotes
        # them inside a sentence to explain conflicts).
        assert not CONFLICT.search(data), f"{name} holds a conflict marker"


def answers(project: Path) -> dict[str, str]:
    """The answers file as key -> raw value (it is flat YAML of scalars)."""
    text = (project / ".copier-answers.yml").read_text()
    pairs = (line.split(":", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value.strip() for key, value in pairs}


# ----------------------------------------------------------------------- the template versions


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary git repository of this template, tagged v0.1.0, v0.2.0 and v0.3.0."""
    repo = tmp_path_factory.mktemp("template") / "repo"
    cloned = subprocess.run(
        ["git", "clone", "-q", "--no-tags", str(ROOT), str(repo)], capture_output=True
    )
    if cloned.returncode != 0:  # not a git checkout (or one git cannot clone): start afresh
        shutil.rmtree(repo, ignore_errors=True)
        repo.mkdir()
        git(repo, "init", "-q")
    # Make the clone's files exactly the checkout's, uncommitted changes and deletions too.
    for name in git(repo, "ls-files", "-z").split("\0"):
        if name:
            (repo / name).unlink(missing_ok=True)
    for name in working_tree_files(ROOT):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name, follow_symlinks=False)
    git(repo, "add", "-A")
    if git(repo, "status", "--porcelain").strip() or cloned.returncode != 0:
        git(repo, "commit", "-q", "--allow-empty", "-m", "HEAD")
    git(repo, "tag", "v0.1.0")

    # v0.2.0: a corrected line in train.py, a changed default in config.py, a new file.
    train = (repo / TRAIN).read_text()
    fix = next(((old, new) for old, new in TRAIN_FIXES if train.count(old) == 1), None)
    assert fix, f"none of the test's v0.2.0 fixes applies to {TRAIN} any more: add one"
    (repo / TRAIN).write_text(train.replace(*fix))
    edit(
        repo / CONFIG,
        r"(weight_decay: float = option\()([^,]+)",
        lambda m: m[1] + ("0.1" if m[2] != "0.1" else "0.2"),
        "v0.2.0 changes the weight_decay default",
    )
    precommit = repo / PRE_COMMIT
    precommit.write_text(precommit.read_text() + PRE_COMMIT_CHANGE)
    assert not (repo / NEW_FILE).exists(), f"{NEW_FILE} exists: give the test's new file a new name"
    (repo / NEW_FILE).write_text(SUMMARY)
    commit_all(repo, "Fix a line, change a default, add summary.py")
    git(repo, "tag", "v0.2.0")

    # v0.3.0: a new checkpoint format, which cannot resume the old one.
    edit(
        repo / CHECKPOINT,
        r"^(FORMAT_VERSION = )(\d+)",
        lambda m: f"{m[1]}{int(m[2]) + 1}",
        "v0.3.0 bumps the checkpoint format",
    )
    commit_all(repo, "Checkpoint format bumped")
    git(repo, "tag", "v0.3.0")

    # v0.4.0: a change to every machinery module of the package, none to the seams.
    for path in sorted((repo / SRC).iterdir()):
        if path.suffix in (".py", ".jinja") and path.name not in SEAMS:
            path.write_text(path.read_text() + MACHINERY_CHANGE)
    for path in sorted((repo / "template" / "tests").iterdir()):
        if path.name.removesuffix(".jinja") not in SEAM_TESTS:
            path.write_text(path.read_text() + MACHINERY_CHANGE)
    commit_all(repo, "A change to every machinery module and machinery test")
    git(repo, "tag", "v0.4.0")
    return repo


@pytest.fixture(scope="module")
def render_at(template: Path, tmp_path_factory: pytest.TempPathFactory):
    """render(ref, dst=None, **answers): a fresh render, cached; copied to ``dst`` if given."""
    cache: dict[tuple, Path] = {}

    def render(ref: str, dst: Path | None = None, **data) -> Path:
        key = (ref, tuple(sorted(data.items())))
        if key not in cache:
            out = tmp_path_factory.mktemp("render") / "project"
            combos.render(data, out, template=template, vcs_ref=ref)
            cache[key] = out
        if dst is None:
            return cache[key]
        shutil.copytree(cache[key], dst)
        return dst

    return render


def user_edits(project: Path) -> None:
    """What a user does to a fresh project: a bigger model, another default, a new file."""
    pkg = project / "src" / PACKAGE
    edit(
        pkg / "model.py",
        r"^( +)self\.head = nn\.Sequential\(nn\.Dropout\(dropout\), "
        r"nn\.Linear\(2 \* width, num_classes\)\)$",
        lambda m: (
            f"{m[1]}self.head = nn.Sequential(\n"
            f"{m[1]}    nn.Dropout(dropout),\n"
            f"{m[1]}    nn.Linear(2 * width, 4 * width),  # a hidden layer: my edit\n"
            f"{m[1]}    nn.ReLU(inplace=True),\n"
            f"{m[1]}    nn.Linear(4 * width, num_classes),\n"
            f"{m[1]})"
        ),
        "the user adds a layer to the model's head",
    )
    edit(
        pkg / "config.py",
        r"^( +epochs: int = option\()(\d+)",
        lambda m: m[1] + str(int(m[2]) + 7),
        "the user changes the epochs default",
    )
    (pkg / "my_data.py").write_text('"""My own dataset: my edit."""\n\nROOT = "/data/mine"\n')


def edited_project(render_at, ref: str, dst: Path, **data) -> Path:
    """A committed project at ``ref`` with the user's edits committed on top."""
    project = render_at(ref, dst, **data)
    commit_all(project, "Render the template")
    user_edits(project)
    commit_all(project, "My edits")
    return project


def expected(render_at, ref: str, dst: Path, **data) -> Path:
    """What an edited project must be after an update: a fresh render with the same edits."""
    project = render_at(ref, dst, **data)
    user_edits(project)
    return project


def update(project: Path, ref: str, **data) -> None:
    # defaults=True: every question keeps its recorded answer unless ``data`` changes it.
    # unsafe=False: copier refuses a template with tasks, migrations or extensions.
    run_update(
        project, data=data, vcs_ref=ref, defaults=True, overwrite=True, unsafe=False, quiet=True
    )


# -------------------------------------------------------------------------------------- tests


def test_template_needs_no_trust(template: Path):
    """No tasks, migrations or Jinja extensions: `copier update` runs without --trust."""
    for path in [template / "copier.yml", *sorted((template / "includes").glob("*.y*ml"))]:
        keys = re.findall(r"^(_\w+)\s*:", path.read_text(), flags=re.MULTILINE)
        unsafe = {"_tasks", "_migrations", "_jinja_extensions", "_external_data"} & set(keys)
        assert not unsafe, f"{path.name} has {unsafe}: updates would need --trust"


def test_update_keeps_user_edits_and_brings_template_fixes(render_at, tmp_path: Path):
    project = edited_project(render_at, "v0.1.0", tmp_path / "project")
    before = answers(project)
    update(project, "v0.2.0")

    assert_no_conflicts(project)
    pkg = project / "src" / PACKAGE
    assert "a hidden layer: my edit" in (pkg / "model.py").read_text()
    assert (pkg / "my_data.py").read_text().startswith('"""My own dataset: my edit.')
    old = render_at("v0.1.0") / "src" / PACKAGE
    assert (pkg / "train.py").read_text() != (old / "train.py").read_text(), "fix did not arrive"
    assert (pkg / "summary.py").read_text() == SUMMARY
    assert answers(project) == {**before, "_commit": "v0.2.0"}
    assert_same_tree(project, expected(render_at, "v0.2.0", tmp_path / "expected"))
    # The update leaves its changes for the user to review: not committed, nothing conflicted.
    status = git(project, "status", "--porcelain")
    assert status and not re.search(r"^(UU|AA|DU|UD) ", status, flags=re.MULTILINE), status


def test_unmodified_project_updates_to_a_fresh_render(render_at, tmp_path: Path):
    project = render_at("v0.1.0", tmp_path / "project")
    commit_all(project, "Render the template")
    update(project, "v0.2.0")
    assert_same_tree(project, render_at("v0.2.0"))


def test_update_with_other_answers_equals_fresh_render(render_at, tmp_path: Path):
    """A project rendered with non-default answers keeps them through an update."""
    off = dict(ALL_OFF.answers, project_name="Shape Net", author="A. Person")
    off.update(python_min="3.12")
    project = render_at("v0.1.0", tmp_path / "project", **off)
    commit_all(project, "Render the template")
    update(project, "v0.2.0")
    assert_same_tree(project, render_at("v0.2.0", **off))


def test_same_line_changed_by_both_is_marked_as_a_conflict(render_at, tmp_path: Path):
    """Where user and template change one line, update marks it inline for the user to resolve."""
    project = render_at("v0.1.0", tmp_path / "project")
    commit_all(project, "Render the template")
    config = project / "src" / PACKAGE / "config.py"
    edit(config, r"(weight_decay: float = option\()([^,]+)", r"\g<1>0.01", "user's weight decay")
    commit_all(project, "My weight decay")
    update(project, "v0.2.0")

    text = config.read_text()
    assert "<<<<<<< before updating" in text and ">>>>>>> after updating" in text
    conflict = re.search(r"<<<<<<< before updating\n(.*?)\n=======\n(.*?)>>>>>>> after", text, re.S)
    mine, theirs = conflict.groups()  # the project's line, then the new template's
    assert "option(0.01," in mine and "option(0.1," in theirs
    assert "config.py" in git(project, "diff", "--name-only", "--diff-filter=U")
    others = {k: v for k, v in tree(project).items() if not k.endswith("config.py")}
    assert not any(CONFLICT.search(data) for data, _ in others.values())


def test_turning_amp_off_removes_exactly_its_code(render_at, tmp_path: Path):
    """Equal to a fresh render without amp, the user's edits kept: whose files hold no word
    of amp (tests/test_render.py checks every render for TABLE's traces)."""
    project = edited_project(render_at, "v0.2.0", tmp_path / "project")
    # The command docs/versioning.md gives, through the command line: no version change.
    done = copier_cli(
        "update",
        "--defaults",
        "--vcs-ref",
        ":current:",
        "--data",
        "amp=false",
        "--quiet",
        cwd=project,
    )
    assert done.returncode == 0, done.stderr

    assert_no_conflicts(project)
    assert_same_tree(project, expected(render_at, "v0.2.0", tmp_path / "expected", amp=False))
    recorded = answers(project)
    assert recorded["amp"] == "false" and "default_precision" not in recorded
    assert recorded["_commit"] == "v0.2.0"


def test_turning_checkpointing_off_and_on(render_at, tmp_path: Path):
    project = edited_project(render_at, "v0.2.0", tmp_path / "project")
    pkg = project / "src" / PACKAGE

    update(project, "v0.2.0", checkpointing=False)
    assert_no_conflicts(project)
    assert "def save_run" not in (pkg / "checkpoint.py").read_text()  # weights alone
    assert not (project / "tests" / "test_checkpoint.py").exists()
    off = expected(render_at, "v0.2.0", tmp_path / "expected-off", checkpointing=False)
    assert_same_tree(project, off)
    commit_all(project, "Checkpointing off")

    update(project, "v0.2.0", checkpointing=True)
    assert_no_conflicts(project)
    assert "def save_run" in (pkg / "checkpoint.py").read_text()
    assert_same_tree(project, expected(render_at, "v0.2.0", tmp_path / "expected-on"))


@pytest.mark.parametrize("combo", ["defaults", "all-off"])
def test_rendering_is_deterministic(template: Path, tmp_path: Path, combo: str):
    """Two renders are byte-identical, wherever they go, and hold no date: no spurious diffs."""
    data = {}
    if combo == "all-off":
        data = ALL_OFF.answers
    a, b = tmp_path / "a" / "project", tmp_path / "b" / "elsewhere"
    for dst in (a, b):
        combos.render(data, dst, template=template, vcs_ref="v0.2.0")
    assert_same_tree(a, b)

    today = datetime.date.today()
    stamps = [today.isoformat(), today.strftime("%d.%m.%Y"), today.strftime("%m/%d/%Y")]
    year = re.compile(rf"(?<![\w.-]){today.year}(?![\w.-])")
    for name, (data_, _) in tree(a).items():
        text = data_.decode()
        if name == ".copier-answers.yml":  # _src_path is the temporary template's path
            text = "\n".join(line for line in text.splitlines() if "_src_path" not in line)
        for stamp in stamps:
            assert stamp not in text, f"{name} holds today's date"
        assert not year.search(text), f"{name} holds the year {today.year}"


def test_old_checkpoint_format_is_refused_by_name(render_at, tmp_path: Path):
    """After an update to a new checkpoint format, resuming an old checkpoint fails clearly."""
    torch = pytest.importorskip("torch")
    project = render_at("v0.2.0", tmp_path / "project")
    commit_all(project, "Render the template")
    text = (project / "src" / PACKAGE / "checkpoint.py").read_text()
    old_format = int(re.search(r"^FORMAT_VERSION = (\d+)", text, re.M)[1])
    # The outside of an old checkpoint is enough: load() checks the format before the rest.
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    torch.save({"format_version": old_format, "config": {}}, folder / "last.pt")

    update(project, "v0.3.0")
    argv = [*SHORT_RUN, "--resume", "auto", "--out-dir", str(tmp_path / "run"), "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.train", *argv],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"format {old_format}" in lines[0] and f"format {old_format + 1}" in lines[0], lines[0]
    assert "last.pt" in lines[0] and "--out-dir" in lines[0], lines[0]


# ------------------------------------------------------ what an update does without a conflict
# Three cases in which `copier update` changes or skips a user's files without a conflict to
# show it (issue 24): each test checks what happens, that `git status` shows it, and that the
# message after the update (copier.yml's _message_after_update) says where to look.


def update_cli(project: Path, ref: str, *data: str) -> str:
    """`copier update` as a user runs it (not quiet: its messages are shown); stderr."""
    data_args = [arg for item in data for arg in ("--data", item)]
    done = copier_cli("update", "--defaults", "--vcs-ref", ref, *data_args, cwd=project)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_turning_a_feature_off_deletes_edited_files_and_says_so(render_at, tmp_path: Path):
    project = edited_project(render_at, "v0.2.0", tmp_path / "project")
    module = f"src/{PACKAGE}/profiling.py"
    (project / module).write_text((project / module).read_text() + "# my profiling edit\n")
    commit_all(project, "My profiling edit")

    said = update_cli(project, ":current:", "profiling=false")
    assert not (project / module).exists()  # edited or not: no conflict, no .rej
    assert_no_conflicts(project)
    assert f" D {module}" in git(project, "status", "--porcelain").splitlines()
    assert f"profiling=false: the update deleted {module}" in said, said
    assert "git checkout HEAD -- FILE" in said
    # What the message offers brings the edited file back.
    git(project, "checkout", "HEAD", "--", module)
    assert (project / module).read_text().endswith("# my profiling edit\n")


def test_renamed_package_does_not_get_the_template_changes(render_at, tmp_path: Path):
    project = render_at("v0.1.0", tmp_path / "project")
    commit_all(project, "Render the template")
    git(project, "mv", f"src/{PACKAGE}", "src/my_net")
    commit_all(project, "Rename the package")

    said = update_cli(project, "v0.2.0")
    renamed = project / "src" / "my_net"
    old = render_at("v0.1.0") / "src" / PACKAGE
    assert (renamed / "train.py").read_text() == (old / "train.py").read_text(), "fix applied?"
    # The template's new file lands at the template's path, beside the renamed package.
    stray = f"src/{PACKAGE}/summary.py"
    assert (project / stray).read_text() == SUMMARY
    assert not (renamed / "summary.py").exists()
    assert f"?? src/{PACKAGE}/" in git(project, "status", "--porcelain").splitlines()
    assert "a renamed package folder" in said, said


def test_deleted_file_stays_deleted_and_misses_the_template_change(render_at, tmp_path: Path):
    project = render_at("v0.1.0", tmp_path / "project")
    commit_all(project, "Render the template")
    (project / ".pre-commit-config.yaml").unlink()
    commit_all(project, "No pre-commit here")

    said = update_cli(project, "v0.2.0")
    assert not (project / ".pre-commit-config.yaml").exists()
    assert PRE_COMMIT_CHANGE in (render_at("v0.2.0") / ".pre-commit-config.yaml").read_text()
    status = git(project, "status", "--porcelain")
    assert ".pre-commit-config.yaml" not in status, status  # nothing to see: hence the message
    assert "Files you deleted or moved" in said, said


# ------------------------------------------------------------ the seams: yours, replaced whole
# A user's own task through the seams only: a table of 6 features, 3 classes, an MLP, and a
# task of their own, judged by its error rate (lower is better, no accuracy). Nothing here
# comes from the example.
MY_DATA = '''"""My data: a table of six features whose sum decides the class."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from .config import Config


def make_datasets(config: Config) -> tuple[Dataset, Dataset, int]:
    g = torch.Generator().manual_seed(7)
    features = torch.randn(config.train_size + config.val_size, 6, generator=g) * 3 + 1
    labels = (features.sum(dim=1) > 6).long() + (features.sum(dim=1) > 9).long()
    train = TensorDataset(features[: config.train_size], labels[: config.train_size])
    val = TensorDataset(features[config.train_size :], labels[config.train_size :])
    return train, val, 3


def augment(row: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    return row + 0.01 * torch.from_numpy(rng.standard_normal(row.shape)).to(row.dtype)


class Standardize(nn.Module):
    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def preprocess(config: Config, train_set: Dataset) -> nn.Module:
    rows = torch.stack([train_set[i][0] for i in range(len(train_set))])  # type: ignore[arg-type]
    return Standardize(rows.mean(dim=0), rows.std(dim=0, correction=0).clamp(min=1e-3))
'''
MY_MODEL = '''"""My model: an MLP."""

from __future__ import annotations

from torch import nn

from .config import Config


def build_model(config: Config, num_classes: int, in_channels: int) -> nn.Module:
    hidden = 4 * config.width
    return nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))
'''
MY_LOSS = '''"""My loss: cross-entropy."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def summed_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs.float(), targets, reduction="sum")
'''
MY_TASK = '''"""My task: three classes, judged by the error rate."""

from __future__ import annotations

import torch

BEST_METRIC = "error"
GOALS = {"error": "min"}


def check_target(target: object, num_outputs: int) -> None:
    if not (isinstance(target, torch.Tensor) and target.dim() == 0):
        raise ValueError(f"must be a 0-d tensor, got {target!r}")
    if not 0 <= int(target) < num_outputs:
        raise ValueError(f"{int(target)} is not a class in range({num_outputs})")


def metric_sums(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"error": (outputs.argmax(dim=1) != targets).sum()}


def metrics(sums: dict[str, float], count: int) -> dict[str, float]:
    return {"error": sums["error"] / count}


def predictions(outputs: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"class": outputs.argmax(dim=1)}
'''
MINE = {"data.py": MY_DATA, "model.py": MY_MODEL, "loss.py": MY_LOSS, "task.py": MY_TASK}
# A check of the user's own, added to the test file of their data.
MY_TEST = """

def test_my_table_has_six_features():
    train_set, _, _ = samples.project_data()
    assert train_set[0][0].shape == (6,)
"""


def replace_seams(project: Path) -> None:
    for name, text in MINE.items():
        (project / "src" / PACKAGE / name).write_text(text)
    with (project / "tests" / "test_data.py").open("a") as tests:
        tests.write(MY_TEST)


def project_suite(project: Path) -> subprocess.CompletedProcess:
    """The project's fast tests and a short training run, as its user runs them."""
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p"]
    command += ["no:xdist", "tests"]
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=900
    )


def assert_suite_passes(project: Path) -> None:
    done = project_suite(project)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert_trains(project)


def assert_trains(project: Path) -> None:
    run = [sys.executable, "-m", f"{PACKAGE}.train", *SHORT_RUN, "--out-dir", "runs/mine"]
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "OMP_NUM_THREADS": "1"}
    trained = subprocess.run(run, cwd=project, env=env, capture_output=True, text=True)
    assert trained.returncode == 0, trained.stderr[-3000:]


def test_an_update_leaves_replaced_seams_alone(render_at, tmp_path: Path):
    """Seams replaced whole by code of the user's own; the template then changes every
    machinery module: the update has no conflict, leaves the seams byte for byte, brings
    every machinery change, and the project's suite passes on the user's task."""
    project = render_at("v0.3.0", tmp_path / "project")
    commit_all(project, "Render the template")
    replace_seams(project)
    commit_all(project, "My data, model and loss")

    yours = {p: p.read_bytes() for name in SEAM_TESTS for p in [project / "tests" / name]}
    update(project, "v0.4.0")
    assert_no_conflicts(project)
    pkg = project / "src" / PACKAGE
    for name, text in MINE.items():
        assert (pkg / name).read_text() == text, f"the update changed {name}"
    for path, before in yours.items():
        assert path.read_bytes() == before, f"the update changed tests/{path.name}"
    machinery = [p for p in pkg.glob("*.py") if p.name not in SEAMS]
    machinery += [p for p in (project / "tests").glob("*.py") if p.name not in SEAM_TESTS]
    assert len(machinery) > 20
    missed = [p.name for p in machinery if not p.read_text().endswith(MACHINERY_CHANGE)]
    assert not missed, f"the machinery change did not arrive in {missed}"
    status = git(project, "status", "--porcelain")
    touched = [line for line in status.splitlines() if line[3:].endswith(SEAMS + SEAM_TESTS)]
    assert not touched, status
    change_defaults(pkg / "config.py")  # defaults are the user's too: the tests follow them
    assert_suite_passes(project)


def change_defaults(config: Path) -> None:
    """Other defaults for the settings a user changes first: lr, epochs, batch and width."""
    for field, new in [("epochs", "3"), ("lr", "2e-3"), ("width", "12")]:
        edit(config, rf"^( +{field}: \w+ = option\()([^,]+)", lambda m, new=new: m[1] + new, field)
    edit(config, r"^( +batch_size: int = option\(\n +)(\d+)", lambda m: m[1] + "48", "batch")


@pytest.fixture(scope="module")
def old_layout(template: Path) -> str:
    """The tag of the last template commit of the layout before the seams: v0.0.1."""
    last = git(template, "rev-list", "-1", "v0.1.0", "--", OLD_DATA).strip()
    if not last:
        pytest.skip("this clone has no history of the layout before the seams")
    exists = subprocess.run(["git", "cat-file", "-e", f"{last}:{OLD_DATA}"], cwd=template)
    git(template, "tag", "v0.0.1", last if exists.returncode == 0 else f"{last}^")
    return "v0.0.1"


def test_update_from_the_layout_before_the_seams(render_at, old_layout: str, tmp_path: Path):
    """A project of the layout before this one, whose user replaced the example in data.py
    and model.py: the one-time move may conflict there, and nowhere else; resolved as
    docs/versioning.md says (keep your functions, delete the rest), the project passes."""
    project = render_at(old_layout, tmp_path / "project")
    commit_all(project, "Render the template")
    pkg = project / "src" / PACKAGE
    # As the old docs said: define the functions again at the end of the file.
    for name in ("data.py", "model.py"):
        own = "from torch.utils.data import TensorDataset\n"
        own += MINE[name].split("from .config import Config\n", 1)[1]
        (pkg / name).write_text((pkg / name).read_text() + "\n# my own:\n" + own)
    commit_all(project, "My data and model")

    run_update(project, vcs_ref="v0.4.0", defaults=True, overwrite=True, unsafe=False, quiet=True)
    conflicted = [
        name
        for name, (data, _) in tree(project).items()
        if CONFLICT.search(data) or name.endswith((".rej", ".orig"))
    ]
    assert set(conflicted) <= {f"src/{PACKAGE}/{name}" for name in SEAMS}, conflicted
    # The move, as docs/versioning.md says: keep your functions, delete everything else.
    for name in ("data.py", "model.py"):
        (pkg / name).write_text(MINE[name])
    assert (pkg / "loading.py").exists() and (pkg / "seams.py").exists()
    assert_suite_passes(project)


# ------------------------------------------------- the last release: its seams need no change
# The loss of a user of the last release, whose contract passed label_smoothing.
MY_RELEASED_LOSS = '''"""My loss: cross-entropy, smoothed in training."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def summed_loss(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    return F.cross_entropy(
        logits.float(), targets, reduction="sum", label_smoothing=label_smoothing
    )
'''


@pytest.fixture(scope="module")
def last_release(template: Path) -> str:
    """The newest version CHANGELOG.md names, tagged at the template commit it names."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    heading = r"^## \[(\d+\.\d+\.\d+)\] - .*, template commit ([0-9a-f]{7,40})$"
    found = re.search(heading, changelog, flags=re.MULTILINE)
    assert found, "CHANGELOG.md names no released version and its commit"
    version, commit = found.groups()
    there = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=template)
    if there.returncode != 0:
        pytest.skip(f"this clone lacks the commit of {version}, {commit}")
    git(template, "tag", f"release-{version}", commit)
    return f"release-{version}"


def metrics(out_dir: Path) -> list[dict]:
    """A run's metrics.jsonl records, without the wall-clock throughput."""
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "samples_per_sec"} for line in lines]


def test_an_update_from_the_last_release_leaves_its_seams_alone(
    render_at, last_release: str, fork_server, tmp_path: Path
):
    """A project of the last release whose user replaced every seam of that release with
    code of their own: the update to this checkout has no conflict, leaves those files byte
    for byte, brings any new seam with its example, and a run that the release started and
    SIGTERM stopped resumes with `--resume auto` and no other flag, bit for bit. (Where a
    change breaks the released contract on purpose, its "What you must do" says what to
    change, and so must this test's seams.)"""
    torch = pytest.importorskip("torch")
    project = render_at(last_release, tmp_path / "project")
    commit_all(project, "Render the template")
    pkg = project / "src" / PACKAGE
    released = {"data.py": MY_DATA, "model.py": MY_MODEL, "loss.py": MY_RELEASED_LOSS}
    for name, text in released.items():
        assert (pkg / name).exists(), f"{name} is no seam of {last_release}"
        (pkg / name).write_text(text)
    commit_all(project, "My data, model and loss")

    # A run of the release stopped by SIGTERM after step 2 (exit 75, as a preempted job),
    # and the same run uninterrupted.
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "stopped_at_step_2.py").write_text(STOPPED_AT_STEP_2)
    forked = {**fork_server.env, "PYTHONPATH": f"src{os.pathsep}{hooks}"}
    split, whole = project / "runs" / "split", tmp_path / "whole"
    args = [*SHORT_RUN, "--device", "cpu"]
    train = [*FORKED, "-m", f"{PACKAGE}.train", *args]
    stop = [*FORKED, "-m", "stopped_at_step_2", *args, "--out-dir", str(split)]
    stopped = combos.run(stop, cwd=project, **forked)
    assert stopped.returncode == 75, describe(stopped)
    done = combos.run([*train, "--out-dir", str(whole)], cwd=project, **fork_server.env)
    assert done.returncode == 0, describe(done)

    recorded = "template_version" in answers(project)
    said = update_cli(project, "v0.1.0")  # this checkout
    assert_no_conflicts(project)
    for name, text in released.items():
        assert (pkg / name).read_text() == text, f"the update changed {name}"
    # The notes of the versions after the release's, and how to install again.
    version = last_release.removeprefix("release-")
    if recorded:
        assert f"  {version}: " not in said, said
    else:  # 0.2.0 and before recorded no version: each note names its commit
        assert "Skip the notes of the\nversion whose commit that is" in said, said
        assert f"  {version} (template commit " in said, said
    assert "`pip install -e . --group dev`" in said, said
    assert all((pkg / name).exists() for name in SEAMS), sorted(p.name for p in pkg.iterdir())
    # The stopped run resumes with --resume auto and no other flag, and ends bit for bit as
    # the release's uninterrupted run did: the step's code computes alike.
    resumed = combos.run(
        [*train, "--out-dir", str(split), "--resume", "auto"], cwd=project, **fork_server.env
    )
    assert resumed.returncode == 0, describe(resumed)
    assert "written before --best-metric: resuming with --best-metric acc" in resumed.stdout
    a, b = (torch.load(d / "checkpoints" / "last.pt", weights_only=True) for d in (split, whole))
    a.pop("config"), b.pop("config")  # out_dir, resume and the settings added since
    # best.pt's score under its name since: the val_acc that the release's run recorded.
    assert a.pop("best_score") == b.pop("best_val_acc")
    # The last epoch's metrics record, which checkpoints keep since: compared below, as metrics.
    a.pop("record", None)
    # The running settings: the release's, and those added since (--max-time, ...).
    assert set(b.pop("may_change")) <= set(a.pop("may_change"))
    assert_identical(a, b)
    assert metrics(split) == metrics(whole)
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "OMP_NUM_THREADS": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    mine = [f"tests/{name}" for name in SEAM_TESTS]
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", *mine]
    command += ["-p", "no:cacheprovider", "-p", "no:xdist"]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


# A checkpoint of each release, as its run was stopped (tests/release_checkpoints.py wrote them).
def test_the_archive_holds_a_checkpoint_of_each_release():
    released = {version for version, _ in release_checkpoints.releases()}
    kept = {(path.parent.name, path.name) for path in release_checkpoints.archived()}
    expected = {(version, combo) for version in released for combo in release_checkpoints.RUNS}
    assert kept == expected, "run `python tests/release_checkpoints.py` to write the archive"


@pytest.mark.parametrize(
    "archived", release_checkpoints.archived(), ids=lambda path: f"{path.parent.name}-{path.name}"
)
def test_a_checkpoint_of_each_release_resumes(rendered, fork_server, archived, tmp_path: Path):
    """A checkpoint that a release wrote as SIGTERM stopped its run under torchrun resumes
    in this checkout's render of the same answers with `--resume auto` and no other flag,
    and the run finishes. In one process, the cheapest run: the two processes' random
    streams and loss sums are read, and folded, and a sharded folder is read whole."""
    torch = pytest.importorskip("torch")
    out_dir = tmp_path / "run"
    shutil.copytree(archived, out_dir, symlinks=True)
    args = [*release_checkpoints.ARGV, "--out-dir", str(out_dir), "--resume", "auto"]
    root = rendered(release_checkpoints.RUNS[archived.name])
    done = combos.run([*FORKED, "-m", f"{PACKAGE}.train", *args], cwd=root, **fork_server.env)
    assert done.returncode == 0, describe(done)
    assert f"at epoch 1, step {release_checkpoints.STOP}\n" in done.stdout, done.stdout
    last = torch.load(out_dir / "checkpoints" / "last.pt", weights_only=True)
    assert last["epoch"] == 2, "the run did not finish"


# ------------------------------------------------------ versions: what you must do, after update
NEW_VERSIONS = """## [9.2.0] - 2026-12-06, template commit 2222222

**What you must do:** move the second thing.

## [9.1.0] - 2026-12-05, template commit 1111111

**What you must do:** rename the first thing,
as the first new version asks.

### Changed

- The first thing.

"""


def test_an_update_lists_what_you_must_do_for_each_newer_version(template: Path, tmp_path: Path):
    """A project records the newest CHANGELOG version it was rendered with; updated across
    two newer versions, copier's message after the update lists their "What you must do"
    notes (and the [Unreleased] one), and not those of the versions it had."""
    repo = tmp_path / "template"
    git(tmp_path, "clone", "-q", str(template), str(repo))
    changelog = (repo / "CHANGELOG.md").read_text()
    assert not re.search(r"\{[{%#]", changelog), "CHANGELOG.md is read as a Jinja template"
    had = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, flags=re.MULTILINE)
    assert had, "CHANGELOG.md has no version heading"
    git(repo, "tag", "before")
    project = render(ALL_OFF.answers, tmp_path / "project", template=repo, vcs_ref="before")
    assert f"\ntemplate_version: {had[0]}\n" in (project / ".copier-answers.yml").read_text()
    commit_all(project, "Render the template")

    first = changelog.index(f"## [{had[0]}]")
    (repo / "CHANGELOG.md").write_text(changelog[:first] + NEW_VERSIONS + changelog[first:])
    commit_all(repo, "Two versions")
    git(repo, "tag", "after")
    said = update_cli(project, "after")
    assert "9.2.0: move the second thing." in said, said
    assert "9.1.0: rename the first thing, as the first new version asks." in said, said
    assert said.index("9.2.0: ") < said.index("9.1.0: "), "newest first, as the CHANGELOG"
    if "## [Unreleased]\n\n**What you must do:**" in changelog:
        assert "Unreleased: " in said, said
    for old in had:
        assert f"{old}: " not in said, f"{old} was the project's already:\n{said}"
    assert "\ntemplate_version: 9.2.0\n" in (project / ".copier-answers.yml").read_text()
