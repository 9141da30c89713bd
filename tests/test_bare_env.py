"""The rendered project's own nox sessions pass in an environment built from nothing but what
the render declares (issue 24, item 1).

The template's environment has everything installed (requirements-dev.txt), so a dependency a
render forgets to declare (safetensors for mypy, say) would pass unseen there. Here a fresh
venv gets torch (the CPU wheel this machine keeps, as .ci/run installs it) and nox, then, for
each render, exactly what the rendered noxfile's sessions install: the noxfile is loaded and
its sessions are called with a stand-in session that records `install` and `run`. The recorded
installs go into the venv with `uv pip install`, as nox installs them where uv is (the rendered
noxfile's backend is "uv|virtualenv"), and the recorded commands run there, as CI runs them.

Three differences from CI, all said here: pre-commit's hooks are clones from GitHub (no network
for them here), so the lint session's ruff hooks run as `ruff check` and `ruff format --check`
from the lint group instead; uv installs with --no-sources, since the render's [tool.uv.sources]
name PyTorch's index, which this machine cannot reach (torch is there already, the CPU build
.ci/run installs); and the tests session runs its fast tier (`-m "not slow"`), since the slow
tier's training processes are covered by tests/test_project_suites.py.

One venv serves both renders, all off first: its needs are a subset of all on's, so nothing the
first render installs can hide a declaration the second one lacks, and the order cannot hide a
gap in the first. Cost on 2 busy cores: about 60 s for the venv and its torch, 10-20 s of uv
installs (pip took 150 s for the same packages, the trackers' extras most of it), then 1-2
minutes per render.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from combos import BY_ID, DEFAULT, describe, render

pytestmark = pytest.mark.bare

RENDERS = {
    "none-gitlab": {**BY_ID["none"].answers, "ci": "gitlab"},
    "default-github": DEFAULT.answers,
}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The uv of the template's own environment (requirements-dev.txt), which nox would use.
UV = str(Path(sys.executable).with_name("uv"))

# Loaded in the venv, in the rendered project: calls each session of its noxfile with a session
# that records what it would install and run, and prints that as JSON.
PLAN = """
import importlib.util, json, sys

class Recorder:
    def __init__(self, posargs):
        self.posargs, self.installs, self.runs = posargs, [], []
    def install(self, *args):
        self.installs.append(list(args))
    def run(self, *args, **kwargs):
        self.runs.append(list(args))

spec = importlib.util.spec_from_file_location("noxfile", "noxfile.py")
noxfile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(noxfile)
posargs = json.loads(sys.argv[1])
plan = {}
for name in ("lint", "typecheck", "tests"):
    recorder = Recorder(posargs.get(name, []))
    getattr(noxfile, name)(recorder)
    plan[name] = {"installs": recorder.installs, "runs": recorder.runs}
print(json.dumps(plan))
"""
POSARGS = {"tests": ["-m", "not slow", "-p", "no:cacheprovider", "-q"]}


def call(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900):
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def make_venv(root: Path) -> dict[str, str]:
    """A fresh venv with the CPU torch wheel and nox; returns the environment to run it in."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{root / 'bin'}{os.pathsep}{env['PATH']}", "OMP_NUM_THREADS": "1"}
    env |= {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUAL_ENV": str(root)}
    # As .ci/run does: the CPU build kept on disk (torch 2.13.0+cpu), not PyPI's CUDA build.
    result = call([str(root / "bin" / "pip"), "install", "-q", "torch==2.13.0", "nox"], root, env)
    assert result.returncode == 0, describe(result)
    return env


def test_sessions_pass_in_a_bare_environment(tmp_path: Path) -> None:
    """One test, not one per render, so that pytest-xdist cannot split the shared venv."""
    root = tmp_path / "venv"
    env = make_venv(root)
    # One mypy cache for both renders: the second reuses the first's analysis of torch (about
    # a minute); mypy checks again whatever differs, so the cache changes no result.
    env["MYPY_CACHE_DIR"] = str(tmp_path / "mypy-cache")
    python = str(root / "bin" / "python")
    for name, answers in RENDERS.items():  # in this order: all off first (see above)
        project = render(answers, tmp_path / name)
        planned = call([python, "-c", PLAN, json.dumps(POSARGS)], project, env)
        assert planned.returncode == 0, f"{name}: " + describe(planned)
        plan = json.loads(planned.stdout)

        for session in ("lint", "typecheck", "tests"):
            for args in plan[session]["installs"]:
                if args[0] == "torch":  # the CPU index, which this machine has on disk instead
                    assert args == ["torch", "--index-url", CPU_TORCH_INDEX], args
                    continue
                uv = [UV, "pip", "install", "--quiet", "--no-sources", "--python", python]
                result = call([*uv, *args], project, env)
                assert result.returncode == 0, f"{name}, {session}: install {args}\n" + describe(
                    result
                )

        for session in ("lint", "typecheck", "tests"):
            for args in plan[session]["runs"]:
                commands = [args]
                if args[0] == "pre-commit":  # hooks are clones from GitHub: the same tools here
                    commands = [["ruff", "check", "."], ["ruff", "format", "--check", "."]]
                for command in commands:
                    result = call(command, project, env)
                    where = f"{name}: nox -s {session}: {' '.join(command)}\n"
                    assert result.returncode == 0, where + describe(result)
                    if command[0] == "pytest":
                        # Every optional feature's test ran: the extras were there to run them.
                        # Skips for a GPU are expected, and so is the one test of what
                        # mlflow-skinny refuses: the `mlflow` extra is the full package; and
                        # so is the test of a mask moved with its input (the example's target
                        # is a class: tests/test_own_data.py runs it on a segmentation task).
                        lines = result.stdout.splitlines()
                        skipped = [line for line in lines if "SKIPPED" in line]
                        expected = (
                            "CUDA",
                            "GPU",
                            "full MLflow opens sqlite stores",
                            "no target is shaped like its input",
                        )
                        unexpected = [s for s in skipped if not any(e in s for e in expected)]
                        assert not unexpected, unexpected
                        assert "TOTAL" in result.stdout, f"{name}: no coverage report"
