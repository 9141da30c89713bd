"""The template's answers that switch features on and off (TABLE), their combinations, their
ids, and a helper that renders one.

TABLE is the one place that says what each such answer is: its short name in combination ids,
the words a project without it may not hold, the flags it adds, how a run switches it on and
off, and which answer it needs. The tests, the noxfile, the benchmarks, the GPU bundle and the
docs' checks all derive their lists from it, and the files each answer owns are found from
the template's own file names; so adding an answer outside template/ and its docs page is one
entry here. A combination's id lists its answers that are on, in TABLE's order
("amp-ddp-syncbn-accum-ckpt-det-prof"), or is "none".
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import copier
import jinja2
import yaml
from copier.errors import DirtyLocalWarning

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = REPO_ROOT / "template"
PACKAGE = "image_classifier"  # package_name's default: every render here keeps it
# "cuda" under `nox -s gpu`: the end-to-end tests then train on the GPU (nccl for ddp).
DEVICE = os.environ.get("TEMPLATE_TEST_DEVICE", "cpu")


@dataclass(frozen=True)
class Toggle:
    """One answer of copier.yml that switches a feature on or off."""

    name: str  # the question in copier.yml
    short: str  # its part of a combination's id, when on
    # Words that no file of a project without it may hold (any case): "off leaves no trace".
    traces: tuple[str, ...]
    # The options `train --help` lists exactly when it is on.
    flags: tuple[str, ...] = ()
    # What a short run adds to exercise it (end-to-end tests, GPU bundle); ddp's is torchrun.
    run_on: tuple[str, ...] = ()
    # What switches it off at run time; empty: it is off unless run_on asks for it.
    run_off: tuple[str, ...] = ()
    # On a CPU, switched on at run time, it changes no number of a run (bit for bit).
    neutral: bool = False
    # The optimizer steps per process a run needs to show it; a short run has about 2.
    min_steps: int = 0
    # Asked only when that answer is on, and never with these on (its `when:` in copier.yml).
    needs: str | None = None
    conflicts: tuple[str, ...] = ()
    # The answer's values: off, then on. A choice of two ("replicate", "shard") fits too.
    values: tuple[Any, Any] = (False, True)


TABLE = [
    Toggle(
        "amp",
        "amp",
        traces=("autocast", "GradScaler", "scaler", "precision"),
        flags=("--precision",),
        run_off=("--precision", "fp32"),
    ),
    Toggle(
        "ddp",
        "ddp",
        traces=("torch.distributed", "DistributedDataParallel", "no_sync", "world_size")
        # The words a single-process project has no use for ("process" alone is no trace:
        # DataLoader workers are processes too).
        + ("torchrun", "rank", "each process", "every process", "per process", "other process")
        + ("another process", "all processes", "across processes", "over processes"),
        flags=("--dist-timeout",),
        neutral=True,
    ),
    Toggle(
        "sync_bn",
        "syncbn",
        traces=("SyncBatchNorm", "sync_bn"),
        flags=("--sync-bn", "--no-sync-bn"),
        run_on=("--sync-bn",),
        run_off=("--no-sync-bn",),
        neutral=True,
        needs="ddp",
        # SyncBatchNorm runs on CUDA alone: the CPU tests could not prove it under fully_shard.
        conflicts=("sharding",),
    ),
    Toggle(
        "sharding",
        "shard",
        # "shard" alone is no trace: the samplers shard the data.
        traces=("fully_shard", "FSDP", "DTensor", "MixedPrecisionPolicy", "reduce-scatter")
        + ("torch.distributed.checkpoint", "set_requires_gradient_sync", "unsharded"),
        needs="ddp",
        values=("replicate", "shard"),
    ),
    Toggle(
        "grad_accum",
        "accum",
        traces=("accum_steps", "accum-steps", "micro-batch", "micro_batch", "window_samples"),
        flags=("--micro-batch",),
        # Steps of 32 (SHORT_RUN) in micro-batches of 8: 4 on one process, 2 on each of two.
        run_on=("--micro-batch", "8"),
        run_off=("--micro-batch", "0"),
    ),
    Toggle(
        "checkpointing",
        "ckpt",
        # The bare word "checkpoint" is no trace: model.py always uses
        # torch.utils.checkpoint (activations).
        # Nor are best.pt, last.pt and CheckpointError: every render keeps its weights.
        traces=("resume", "save_run", "SIGTERM", "max_time", "save_every", "keep_last")
        + ("step-<", "step-{", "step_files"),
        flags=("--resume", "--save-every", "--keep-last", "--max-time"),
    ),
    Toggle(
        "deterministic",
        "det",
        traces=("use_deterministic_algorithms", "CUBLAS"),
        flags=("--deterministic",),
        run_on=("--deterministic", "on"),
        run_off=("--deterministic", "off"),
        neutral=True,
    ),
    Toggle(
        "profiling",
        "prof",
        traces=("torch.profiler", "--profile"),
        flags=("--profile", "--no-profile"),
        run_on=("--profile",),
        min_steps=5,  # the profiler's schedule: wait, warmup, active steps
        neutral=True,
    ),
]
BY_NAME = {toggle.name: toggle for toggle in TABLE}


def chain(toggle: Toggle) -> list[str]:
    """The answers a toggle needs, outermost first, then the toggle."""
    return [*chain(BY_NAME[toggle.needs]), toggle.name] if toggle.needs else [toggle.name]


assert len({t.short for t in TABLE}) == len(TABLE), "two answers share a short name"
assert all(t.needs in BY_NAME for t in TABLE if t.needs), "an answer needs an unknown one"
assert all(set(t.conflicts) <= BY_NAME.keys() for t in TABLE), "a conflict with an unknown one"


@dataclass(frozen=True)
class Combo:
    """One combination of TABLE's answers: ``combo.amp`` says whether amp is on."""

    on: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        unknown = set(self.on) - BY_NAME.keys()
        assert not unknown, f"not in TABLE: {sorted(unknown)}"
        for name in self.on:
            assert asked(BY_NAME[name], self.on), f"copier does not ask {name} with {self.on}"

    def __getattr__(self, name: str) -> bool:
        if name in BY_NAME:
            return name in self.on
        raise AttributeError(name)

    @property
    def id(self) -> str:
        return "-".join(t.short for t in TABLE if t.name in self.on) or "none"

    @property
    def toggles(self) -> dict[str, bool]:
        """Every answer of TABLE: on or off."""
        return {t.name: t.name in self.on for t in TABLE}

    @property
    def answers(self) -> dict[str, Any]:
        """The copier data for this combination: only the questions copier asks."""
        return {t.name: t.values[t.name in self.on] for t in TABLE if asked(t, self.on)}

    def with_(self, *names: str) -> Combo:
        """This combination with more answers on (and the answers they need), and the
        answers they conflict with off."""
        on = _needed(names)
        conflicting = {c for n in on for c in BY_NAME[n].conflicts}
        conflicting |= {t.name for t in TABLE if on & set(t.conflicts)}
        return Combo(_switched_off(self.on, conflicting) | on)

    def without(self, *names: str) -> Combo:
        """This combination with answers off (and the answers that need them)."""
        return Combo(_switched_off(self.on, names))

    def run_flags(self) -> list[str]:
        """A short run's flags that exercise every answer that is on."""
        return [flag for t in TABLE if t.name in self.on for flag in t.run_on]

    @property
    def min_steps(self) -> int:
        """The optimizer steps per process a run needs to show every answer that is on."""
        return max([t.min_steps for t in TABLE if t.name in self.on], default=0)

    def run_off(self) -> list[str]:
        """The flags that switch off at run time every answer that is on and can be."""
        return [flag for t in TABLE if t.name in self.on for flag in t.run_off]


def asked(toggle: Toggle, on: Iterable[str]) -> bool:
    """Whether copier asks ``toggle`` when the answers ``on`` are on (and the rest off)."""
    on = set(on)
    return (toggle.needs is None or toggle.needs in on) and not on & set(toggle.conflicts)


def _needed(names: Iterable[str]) -> frozenset[str]:
    """names, and the answers they need, and theirs."""
    found = set(names)
    while more := {BY_NAME[n].needs for n in found if BY_NAME[n].needs} - found:
        found |= more
    return frozenset(found)


def _switched_off(on: frozenset[str], names: Iterable[str]) -> frozenset[str]:
    """on without names and the answers that need them, and theirs."""
    off = set(names)
    while more := {t.name for t in TABLE if t.needs in off} - off:
        off |= more
    return on - off


def _all() -> list[Combo]:
    """Every combination copier can render, in a fixed order."""
    combos = []
    for values in itertools.product([False, True], repeat=len(TABLE)):
        on = {t.name for t, value in zip(TABLE, values, strict=True) if value}
        if _valid(on):
            combos.append(Combo(frozenset(on)))
    return combos


def _valid(on: Iterable[str]) -> bool:
    """Whether copier asks every answer that is on."""
    on = set(on)
    return all(asked(BY_NAME[name], on) for name in on)


def _all_on() -> Combo:
    """Every answer on, in TABLE's order, but those that conflict with one already on."""
    on: set[str] = set()
    for toggle in TABLE:
        if _valid(on | {toggle.name}):
            on.add(toggle.name)
    return Combo(frozenset(on))


ALL = _all()
BY_ID = {combo.id: combo for combo in ALL}
assert len(ALL) == len(BY_ID), "two combinations share an id"
ALL_OFF = BY_ID["none"]
ALL_ON = _all_on()


def questions() -> dict[str, dict]:
    """copier.yml's questions (and settings), by name."""
    return yaml.safe_load((REPO_ROOT / "copier.yml").read_text().split("---\n", 2)[-1])


def defaults() -> dict[str, Any]:
    """TABLE's answers at their defaults, as copier.yml gives them: a default may be a Jinja
    expression of the answers before it (sync_bn's is off with sharding)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    found: dict[str, Any] = {}
    for name, question in questions().items():
        if name in BY_NAME:
            value = question["default"]
            if isinstance(value, str) and "{{" in value:
                value = yaml.safe_load(env.from_string(value).render(found))
            found[name] = value
    return found


def _default() -> Combo:
    """Every question at its default."""
    found = defaults()
    return Combo(frozenset(t.name for t in TABLE if found[t.name] == t.values[1]))


DEFAULT = _default()
# Each answer alone (with what it needs), each left out (with what needs it), and each with
# every other answer that can be on with it (all on, but for an answer that conflicts).
ALONE = {t.name: ALL_OFF.with_(t.name) for t in TABLE}
LEFT_OUT = {t.name: ALL_ON.without(t.name) for t in TABLE}
MOST = {t.name: ALL_ON.with_(t.name) for t in TABLE}
# The covering combinations: all on, all off, each answer alone, left out and with the most.
COVERING = list(
    {
        c.id: c for c in [ALL_ON, ALL_OFF, *ALONE.values(), *LEFT_OUT.values(), *MOST.values()]
    }.values()
)


def render(
    answers: dict, dest: Path | str, *, template: Path | str = REPO_ROOT, vcs_ref: str = "HEAD"
) -> Path:
    """Render the template as committed at HEAD, plus any uncommitted changes, into dest.

    The questions answers leaves out take their defaults. vcs_ref="HEAD" matters once the
    repository has release tags: without it copier would render the latest tag instead of the
    code under test. For a local HEAD copier also includes uncommitted and untracked (not
    ignored) changes; the DirtyLocalWarning that says so is expected here and not shown.
    tests/test_update.py passes another template (a clone with tags) and a tag as vcs_ref.
    """
    with _quiet_copier(), mock.patch.object(jinja2.Environment, "compile", _compile_once):
        copier.run_copy(
            str(template),
            str(dest),
            data=answers,
            defaults=True,
            quiet=True,
            unsafe=False,
            vcs_ref=vcs_ref,
        )
    return Path(dest)


# Jinja's compiled code, by its source and the settings of the Environment that shape it.
# copier builds an Environment for each render, which compiles every question's strings and
# every file of the template anew: about a third of a render's time (measured: 4.5 -> 3.2 s).
# The same source under the same settings compiles to the same code, which each render runs
# with its own environment and answers; the renders are byte for byte the same.
_COMPILED: dict[tuple, Any] = {}
_COMPILE = jinja2.Environment.compile


def _compile_once(
    env: jinja2.Environment,
    source: Any,
    name: str | None = None,
    filename: str | None = None,
    raw: bool = False,
    defer_init: bool = False,
) -> Any:
    if raw or not isinstance(source, str):
        return _COMPILE(env, source, name, filename, raw, defer_init)
    settings = (
        type(env),
        tuple(sorted(env.extensions)),
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.optimized,
        env.is_async,
        env.autoescape,
        env.finalize,
        tuple(sorted(env.filters)),
        tuple(sorted(env.tests)),
    )
    key = (source, name, filename, defer_init, settings)
    if key not in _COMPILED:
        _COMPILED[key] = _COMPILE(env, source, name, filename, raw, defer_init)
    return _COMPILED[key]


@contextlib.contextmanager
def _quiet_copier():
    """Copier runs git through plumbum, which logs every command at DEBUG: under nox, whose
    root logger shows DEBUG, that was dozens of "Running git" lines per render."""
    plumbum = logging.getLogger("plumbum")
    level = plumbum.level
    plumbum.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DirtyLocalWarning)
            yield
    finally:
        plumbum.setLevel(level)


# A short training run: one epoch of a few batches. The end-to-end tests, the benchmarks and
# the GPU bundle's CPU runs all train this long.
SHORT_RUN = ["--epochs", "1", "--train-size", "256", "--val-size", "101", "--batch-size", "32"]
SHORT_RUN += ["--num-workers", "0"]


# Answers the toggle matrix leaves at their defaults; test_render renders the others.
QUESTION_DEFAULTS = {
    "license": "MIT",
    "copyright_year": "",
    "ci": "github",
    "python_min": "3.11",
    "torch_backend": "cpu",
}

CONDITION = re.compile(r"{%-?\s*(?:if\s+.+?|endif)\s*-?%}")


def expected_files(combo: Combo) -> tuple[set[str], set[str]]:
    """Rendered paths of the template's conditional files: (present, absent) for combo.

    Derived from the file names under template/ that hold a `{% if ... %}`, so a new
    conditional file (a per-feature test, say) is checked without editing a list here.
    """
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    context = {
        **{t.name: t.values[t.name in combo.on] for t in TABLE},
        # The questions outside the toggle matrix, at their defaults.
        **QUESTION_DEFAULTS,
        "package_name": PACKAGE,
        "_copier_conf": {"answers_file": ".copier-answers.yml"},
    }
    present, absent = set(), set()
    for path in sorted(TEMPLATE_DIR.rglob("*")):
        relative = path.relative_to(TEMPLATE_DIR).as_posix()
        if not path.is_file() or "__pycache__" in relative or not CONDITION.search(relative):
            continue
        parts = [env.from_string(part).render(context) for part in relative.split("/")]
        parts[-1] = parts[-1].removesuffix(".jinja")
        # The file's name when it exists: its conditions removed.
        name = env.from_string(CONDITION.sub("", relative)).render(context)
        name = name.removesuffix(".jinja")
        (present if all(parts) else absent).add(name)
    return present, absent


def owned_files(name: str) -> set[str]:
    """The rendered paths a project gains with the answer ``name`` alone (and the answers it
    needs), found from the template's file names as expected_files finds them. A file that
    more answers share (``{% if amp or ddp %}``, say) is each one's."""
    alone, without = expected_files(ALONE[name]), expected_files(ALONE[name].without(name))
    return alone[0] - without[0]


def slow_tests(path: Path) -> list[str]:
    """What ``pytest --deselect`` takes to leave out the tests of a rendered test file that
    are marked slow (by a decorator, or all of them by the module's pytestmark), as node ids
    from the project's root. A slow test whose name begins another test's is refused: the
    ids are prefixes, and would leave that one out too."""
    tree = ast.parse(path.read_text())
    node_id = f"tests/{path.name}"
    for node in tree.body:
        targets = map(ast.unparse, node.targets) if isinstance(node, ast.Assign) else []
        if "pytestmark" in targets and ast.unparse(node.value) == "pytest.mark.slow":
            return [node_id]
    tests = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    slow = [
        test.name
        for test in tests
        if any(ast.unparse(mark).startswith("pytest.mark.slow") for mark in test.decorator_list)
    ]
    for name in slow:
        begun = [test.name for test in tests if test.name != name and test.name.startswith(name)]
        assert not begun, f"{path.name}: {name} begins {begun}: --deselect would leave them out"
    return [f"{node_id}::{name}" for name in slow]


def copier_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The copier command line as a user runs it, with no terminal to prompt on."""
    return subprocess.run(
        [sys.executable, "-m", "copier", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# ---------------------------------------------------------------- running a rendered project
def run(args: list[str], cwd: Path, timeout: float = 600, **env: str):
    """Run a command of a rendered project: its src on the path, no bytecode written into it.

    If it outlives ``timeout``, each of its processes gets SIGABRT, on which Python's
    faulthandler (PYTHONFAULTHANDLER=1, set here) prints each thread's stack, then SIGKILL;
    the test fails with those stacks, which say where a hung run was stuck (torchrun and
    each rank alike: torchrun starts its ranks in sessions of their own, so they are found
    as the command's descendants, not as its process group).
    """
    full_env = {
        **os.environ,
        "PYTHONPATH": "src",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",
        **env,
    }
    with subprocess.Popen(
        args, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
            for sig in (signal.SIGABRT, signal.SIGKILL):
                for pid in [*_descendants(process.pid), process.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    stdout, stderr = process.communicate(timeout=10)
                    break
            result = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
            raise AssertionError(f"timed out after {timeout} s\n" + describe(result)) from None
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _descendants(pid: int) -> list[int]:
    """The processes that ``pid`` started, and theirs (from Linux's /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        started = children.get(todo.pop(), [])
        found += started
        todo += started
    return found


def describe(result: subprocess.CompletedProcess) -> str:
    """The end of a failed command's output, for an assertion message."""
    return (
        f"command: {' '.join(map(str, result.args))}\nexit code: {result.returncode}\n"
        f"--- stdout (tail)\n{result.stdout[-3000:]}\n--- stderr (tail)\n{result.stderr[-5000:]}"
    )
