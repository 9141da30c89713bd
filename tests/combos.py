"""The toggle combinations of the template, their ids, and a helper that renders one.

Every test module imports from here, so the matrix is defined once. A combination's id lists
its enabled toggles in a fixed order ("amp-ddp-syncbn-accum-ckpt-det-prof"), or is "none".
The sharding answer (replicate or shard, asked with ddp) is the toggle "shard" here.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import copier
import jinja2
from copier.errors import DirtyLocalWarning

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = REPO_ROOT / "template"
PACKAGE = "image_classifier"  # package_name's default: every render here keeps it
# "cuda" under `nox -s gpu`: the end-to-end tests then train on the GPU (nccl for ddp).
DEVICE = os.environ.get("TEMPLATE_TEST_DEVICE", "cpu")


# Toggle name in copier.yml -> short name in combination ids. Order is the id order.
SHORT = {
    "amp": "amp",
    "ddp": "ddp",
    "shard": "shard",
    "sync_bn": "syncbn",
    "grad_accum": "accum",
    "checkpointing": "ckpt",
    "deterministic": "det",
    "profiling": "prof",
}
TOGGLES = list(SHORT)
INDEPENDENT = ["amp", "grad_accum", "checkpointing", "deterministic", "profiling"]
# sharding and sync_bn are asked only when ddp is on, and sync_bn only when sharding is
# replicate: (ddp, sync_bn, shard) has four states rather than eight.
DDP_STATES = [(False, False, False), (True, False, False), (True, True, False), (True, False, True)]


@dataclass(frozen=True)
class Combo:
    """One combination of toggles."""

    amp: bool
    ddp: bool
    shard: bool
    sync_bn: bool
    grad_accum: bool
    checkpointing: bool
    deterministic: bool
    profiling: bool

    @property
    def id(self) -> str:
        return "-".join(short for name, short in SHORT.items() if getattr(self, name)) or "none"

    @property
    def toggles(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in SHORT}

    @property
    def answers(self) -> dict[str, bool | str]:
        """The copier data for this combination; sharding and sync_bn only where copier asks."""
        answers: dict[str, bool | str] = dict(self.toggles)
        del answers["shard"]
        if self.ddp:
            answers["sharding"] = "shard" if self.shard else "replicate"
        if not self.ddp or self.shard:
            del answers["sync_bn"]
        return answers

    @property
    def context(self) -> dict[str, bool | str]:
        """The toggles as the template's Jinja sees them."""
        return {**self.toggles, "sharding": "shard" if self.shard else "replicate"}


def _combo(ddp_state: tuple[bool, bool, bool], **independent: bool) -> Combo:
    return Combo(ddp=ddp_state[0], sync_bn=ddp_state[1], shard=ddp_state[2], **independent)


ALL = [
    _combo(ddp_state, **dict(zip(INDEPENDENT, values, strict=True)))
    for ddp_state in DDP_STATES
    for values in itertools.product([False, True], repeat=len(INDEPENDENT))
]
BY_ID = {combo.id: combo for combo in ALL}
assert len(ALL) == len(BY_ID) == 128


def _covering() -> list[Combo]:
    """All on, all off, each toggle alone and each toggle left out (sync_bn and shard imply
    ddp; all on replicates, and all on sharded is one more)."""
    on = dict({name: True for name in SHORT}, shard=False)
    off = {name: False for name in SHORT}
    wanted = [on, off, dict(on, sync_bn=False, shard=True)]
    for name in SHORT:
        alone = dict(off, **{name: True})
        if name in ("sync_bn", "shard"):
            alone["ddp"] = True
        left_out = dict(on, **{name: False})
        if name == "ddp":
            left_out["sync_bn"] = False
        wanted += [alone, left_out]
    return list({Combo(**toggles).id: Combo(**toggles) for toggles in wanted}.values())


COVERING = _covering()
DEFAULT = BY_ID["amp-ddp-syncbn-accum-ckpt-det-prof"]  # every question at its default
SHARDED = BY_ID["amp-ddp-shard-accum-ckpt-det-prof"]  # all on, sharding shard


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
    with _quiet_copier():
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
        **combo.context,
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


# ---------------------------------------------------------------- running a rendered project
def run(args: list[str], cwd: Path, timeout: float = 600, **env: str):
    """Run a command of a rendered project: its src on the path, no bytecode written into it."""
    full_env = {
        **os.environ,
        "PYTHONPATH": "src",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        **env,
    }
    return subprocess.run(
        args, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def describe(result: subprocess.CompletedProcess) -> str:
    """The end of a failed command's output, for an assertion message."""
    return (
        f"command: {' '.join(map(str, result.args))}\nexit code: {result.returncode}\n"
        f"--- stdout (tail)\n{result.stdout[-3000:]}\n--- stderr (tail)\n{result.stderr[-5000:]}"
    )
