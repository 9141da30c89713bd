"""Sessions for the template repository: `nox -s tests` is what CI runs.

nox -s tests   render every toggle combination, check it, and train each one on the CPU
nox -s quick   the contributor's loop: all on and all off, fast suites, lint, one mypy, docs
nox -s gpu     the end-to-end and project-suite tests again on CUDA (skips without a GPU)
nox -s demo    render the default project into build/demo and train it
nox -s gpu-bundle  render the covering combinations and run.py into build/gpu-bundle
nox -s lint    ruff on the template repository's own Python
nox -s bench   loop overhead against a bare loop and Lightning, and the suite's cost
nox -s docs    the mkdocs site, built with --strict
nox -s tables  rewrite the derived tables of README.md and docs/reference/ (cog)
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from pathlib import Path

import nox

# Run in the environment nox itself runs in (requirements-dev.txt installed there), instead
# of a fresh virtualenv per session: torch is a large download and install, done once.
nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]

# The interpreter nox runs under, by path: with no session venv, a bare "python" would be
# whatever PATH finds first, which need not be the environment that has torch.
PYTHON = sys.executable
ROOT = Path(__file__).parent
DEMO = ROOT / "build" / "demo"
DURATIONS = ROOT / "build" / "test-durations.xml"
# The pages whose tables tests/docs_tables.py makes (README.md too).
DERIVED = ["docs/reference/questions.md", "docs/reference/flags.md"]


# pytest on every core, as tests and quick run it. worksteal: an idle test process takes tests
# from a busy one's queue (tests/conftest.py puts the longest first); with the default
# scheduler one process sat idle for the last 11 of a run's 46 minutes while the other worked
# through its queue.
PYTEST = [PYTHON, "-m", "pytest", "-n", "auto", "--dist", "worksteal", "-p", "no:cacheprovider"]


@nox.session
def tests(session: nox.Session) -> None:
    """Every combination: rendered and checked, trained for one short epoch on the CPU."""
    session.run(
        *PYTEST,
        # Each test's seconds, for `python benchmarks/suite_cost.py --report` (.ci/run prints it).
        f"--junitxml={DURATIONS}",
        *session.posargs,
        env={"OMP_NUM_THREADS": "1"},
    )


@nox.session
def quick(session: nox.Session) -> None:
    """The contributor's loop, before a push: the all-on and all-off renders (rendered and
    checked, trained end to end, their fast suites), one mypy run, the docs and tables checks,
    and lint. `nox -s tests` (CI) runs everything."""
    lint(session)
    session.run(*PYTEST, "--quick", *session.posargs, env={"OMP_NUM_THREADS": "1"})


@nox.session
def gpu(session: nox.Session) -> None:
    """The end-to-end and project-suite tests on CUDA (ddp on nccl, one process per GPU)."""
    import torch

    if not torch.cuda.is_available():
        session.skip(
            "no CUDA GPU here: torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda})"
        )
    session.run(
        PYTHON,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        "e2e or suite or gpu",
        *session.posargs,
        # One test at a time: every ddp run takes all the GPUs.
        env={"OMP_NUM_THREADS": "1", "TEMPLATE_TEST_DEVICE": "cuda"},
    )


@nox.session
def demo(session: nox.Session) -> None:
    """Render the default project into build/demo (replacing it), train it, and print the
    commands that look at the run: they work as printed, from any folder (arguments after --
    go to train, e.g. nox -s demo -- --epochs 2)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from combos import DEFAULT, PACKAGE, render

    if DEMO.exists():
        shutil.rmtree(DEMO)
    render(DEFAULT.answers, DEMO)
    session.log(f"rendered the default project into {DEMO}")
    out = DEMO / "runs" / "demo"
    env = {"PYTHONPATH": str(DEMO / "src")}
    session.run(PYTHON, "-m", f"{PACKAGE}.train", "--out-dir", str(out), *session.posargs, env=env)
    for line in demo_commands(PACKAGE, out):
        print(line)


def demo_commands(package: str, out: Path) -> list[str]:
    """The demo's last words: the rendered project is not installed in this environment, so
    each command names its interpreter and its source folder; plot needs matplotlib, which
    the command installs first where it is missing."""
    run = f"PYTHONPATH={shlex.quote(str(DEMO / 'src'))} {shlex.quote(PYTHON)} -m {package}"
    plot = f"{run}.plot {shlex.quote(str(out))}"
    if importlib.util.find_spec("matplotlib") is None:
        plot = f"{shlex.quote(PYTHON)} -m pip install --quiet matplotlib && {plot}"
    return [
        "the run's next commands, from any folder:",
        f"  {run}.evaluate --out-dir {shlex.quote(str(out))}",
        f"  {plot}  # writes {out / 'metrics.png'}",
    ]


@nox.session(name="gpu-bundle")
def gpu_bundle(session: nox.Session) -> None:
    """Build build/gpu-bundle: run it where a GPU is, with Python, torch, numpy and pytest only."""
    sys.path.insert(0, str(ROOT / "gpu_bundle"))
    from build import build

    dest = build(ROOT / "build" / "gpu-bundle")
    session.log(f"built {dest}; on the GPU machine: python {dest.name}/run.py --out results")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check on noxfile.py, tests/, benchmarks/ and gpu_bundle/."""
    paths = ["noxfile.py", "tests", "benchmarks", "gpu_bundle"]
    paths = [p for p in paths if (ROOT / p).exists()]
    session.run(PYTHON, "-m", "ruff", "check", *paths)
    session.run(PYTHON, "-m", "ruff", "format", "--check", *paths)


@nox.session
def bench(session: nox.Session) -> None:
    """Loop overhead against a bare loop and Lightning's Trainer, validation's metrics against
    torchmetrics, a command's exit with and without the last garbage collection, a short run
    in fresh interpreters and forked from the end-to-end tests' fork server, then the test
    suite's cost and the all-on project's whole suite's Python processes."""
    # Lightning is only the yardstick, so it is installed here rather than in the dev list.
    session.run(PYTHON, "-m", "pip", "install", "--quiet", "lightning")
    session.run(PYTHON, "benchmarks/loop_overhead.py", *session.posargs)
    session.run(PYTHON, "benchmarks/metrics_cost.py")  # torchmetrics comes with Lightning
    session.run(PYTHON, "benchmarks/exit_cost.py")
    session.run(PYTHON, "benchmarks/fork_server.py")
    session.run(PYTHON, "benchmarks/suite_cost.py")
    session.run(PYTHON, "benchmarks/process_cost.py")
    session.run(PYTHON, "benchmarks/control_lines.py")


@nox.session
def tables(session: nox.Session) -> None:
    """Rewrite the derived tables (README's modules, the questions and the flags) from renders."""
    session.run(PYTHON, "-m", "cogapp", "-r", "-I", "tests", "README.md", *DERIVED)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site into build/site, failing on any warning."""
    session.run(PYTHON, "-m", "pip", "install", "--quiet", "mkdocs-material")
    session.run(PYTHON, "-m", "mkdocs", "build", "--strict", "--site-dir", "build/site")
