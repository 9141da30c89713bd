#!/usr/bin/env -S uv run --script
# /// script
# dependencies = ["nox>=2025.2.9"]
# ///
"""Tasks for working on the project: `nox` runs them all (or `./noxfile.py`, with uv).

nox -s lint        the pre-commit hooks on every file (ruff, formatting, file hygiene), then
                   deptry (declared against imported dependencies) and vulture (dead code)
nox -s typecheck   mypy on src/, with the settings in pyproject.toml
nox -s tests       every test, slow ones included, with coverage (training processes too);
                   arguments after -- go to pytest: nox -s tests -- -m "not slow"

Each session installs into its own environment under .nox/ (reused with -r). torch comes
from PyTorch's CPU index there: the checks run on the CPU, and that build is a fraction of
the CUDA build's download. The tests and mypy get every extra of pyproject.toml as well, so
no test of an optional feature skips for want of its package.
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"

PYPROJECT = nox.project.load_toml("pyproject.toml")
CPU_TORCH = ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"]
EXTRAS = ",".join(PYPROJECT["project"].get("optional-dependencies", {}))


def install(session: nox.Session, group: str) -> None:
    """CPU torch, then the project (editable, every extra) and one dependency group."""
    session.install(*CPU_TORCH)
    project = f".[{EXTRAS}]" if EXTRAS else "."
    session.install("-e", project, *nox.project.dependency_groups(PYPROJECT, group))


@nox.session
def lint(session: nox.Session) -> None:
    """Every pre-commit hook on every file, as a commit would run them; deptry; vulture."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("pre-commit", "run", "--all-files", "--show-diff-on-failure", *session.posargs)
    session.run("deptry", ".")
    session.run("vulture")  # paths and confidence from [tool.vulture]


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy, strict, on the package."""
    install(session, "typecheck")
    session.run("mypy", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite on the CPU, slow tests included, with a coverage report."""
    install(session, "test")
    # -m "" clears pyproject's -m "not slow"; a -m in the posargs comes later and wins.
    # -n auto: a test process per core (at most 4: each slow test starts training processes
    # of its own); worksteal: an idle process takes tests from a busy one's queue.
    parallel = ["-n", "auto", "--maxprocesses", "4", "--dist", "worksteal"]
    session.run("pytest", *parallel, "-m", "", "--cov", "--cov-report=term", *session.posargs)


if __name__ == "__main__":
    nox.main()
