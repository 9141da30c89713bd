#!/usr/bin/env -S uv run --script
# /// script
# dependencies = ["nox>=2025.2.9"]
# ///
"""Tasks for working on the project: `nox` runs them all (or `./noxfile.py`, with uv).

nox -s lint        the pre-commit hooks on every file: ruff, formatting, file hygiene
nox -s typecheck   mypy on src/, with the settings in pyproject.toml
nox -s tests       pytest; arguments after -- go to pytest: nox -s tests -- -m "not slow"

Each session installs into its own environment under .nox/ (reused with -r). torch comes
from PyTorch's CPU index there: the checks run on the CPU, and that build is a fraction of
the CUDA build's download.
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"

PYPROJECT = nox.project.load_toml("pyproject.toml")
CPU_TORCH = ["torch", "--index-url", "https://download.pytorch.org/whl/cpu"]


def install(session: nox.Session, group: str) -> None:
    """CPU torch, then the project (editable) and one dependency group of pyproject.toml."""
    session.install(*CPU_TORCH)
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, group))


@nox.session
def lint(session: nox.Session) -> None:
    """Every pre-commit hook on every file, as a commit would run them."""
    session.install(*nox.project.dependency_groups(PYPROJECT, "lint"))
    session.run("pre-commit", "run", "--all-files", "--show-diff-on-failure", *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy, strict, on the package."""
    install(session, "typecheck")
    session.run("mypy", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite on the CPU."""
    install(session, "test")
    session.run("pytest", *session.posargs)


if __name__ == "__main__":
    nox.main()
