"""Train every toggle combination for one short epoch in a subprocess, and check its outputs.

Each run (torchrun and each rank under it) is a process forked from the test process's
fork server (tests/forkserver.py), which imported torch once: it runs the command as a fresh
interpreter would, for 0.6 CPU-seconds instead of 3.7, or 4.2 instead of 10.7 under torchrun
(benchmarks/fork_server.py). The rendered suites' tests start fresh interpreters. On the CPU
by default; under `nox -s gpu` (TEMPLATE_TEST_DEVICE=cuda) on CUDA, with ddp combinations on
nccl, one process per GPU.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from combos import ALL, COVERING, DEFAULT, DEVICE, PACKAGE, SHORT_RUN, TABLE, Combo, describe, run
from forkserver import PYTHON as FORKED
from forkserver import torchrun as forked_torchrun

pytestmark = pytest.mark.e2e

METRIC_KEYS = {
    "epoch",
    "step",
    "train_loss",
    "val_loss",
    "val_acc",
    "val_samples",
    "lr",
    "samples_per_sec",
}
# The train command in a fresh interpreter, as a user types it, and forked from the server.
TRAIN = [sys.executable, "-m", f"{PACKAGE}.train"]
FORKED_TRAIN = [*FORKED, "-m", f"{PACKAGE}.train"]


def command(combo: Combo, nproc: int, module: str = "train") -> list[str]:
    """A command of the project, run by the fork server (tests/forkserver.py): under torchrun
    for a ddp project, which starts each rank through it too, else a plain process."""
    if not combo.ddp:
        return [*FORKED, "-m", f"{PACKAGE}.{module}"]
    return forked_torchrun(nproc, f"{PACKAGE}.{module}")


def flags(combo: Combo, out_dir: Path, nproc: int) -> list[str]:
    """A short run that exercises every answer that is on (TABLE's run_on); more samples for
    more than 2 processes, so each has as many steps."""
    args = [*SHORT_RUN, "--out-dir", str(out_dir), *combo.run_flags()]
    if combo.min_steps:
        # Steps of 8 samples: 32 of them in the 256 samples, whatever the processes.
        assert combo.min_steps <= 32, "a short run in steps of 8 has 32"
        args += ["--batch-size", "8"]
    if nproc > 2:
        args += ["--train-size", str(128 * nproc)]
    if combo.ddp:
        # A collective that waits this long fails with a message naming it, before the
        # test's own timeout (600 s) would end the run without a word.
        args += ["--dist-timeout", "300"]
    if DEVICE != "cpu":
        args += ["--device", DEVICE]
    return args


def flag_value(args: list[str], flag: str, default: str) -> str:
    """The value the last ``flag`` in args gives, as argparse reads it."""
    values = [args[i + 1] for i, arg in enumerate(args) if arg == flag]
    return values[-1] if values else default


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("combo", ALL, ids=lambda combo: combo.id)
def test_short_training_run(
    rendered, fork_server, torchrun_nproc: int, combo: Combo, tmp_path: Path
) -> None:
    root = rendered(combo)
    out_dir = tmp_path / "run"
    nproc = torchrun_nproc if combo.ddp else 1
    args = command(combo, torchrun_nproc) + flags(combo, out_dir, nproc)
    result = run(args, cwd=root, **fork_server.env)
    assert result.returncode == 0, describe(result)

    metrics = read_metrics(out_dir)
    assert len(metrics) == 1, metrics
    record = metrics[0]
    assert record.keys() >= METRIC_KEYS, f"missing: {METRIC_KEYS - record.keys()}"
    assert record["epoch"] == 1
    assert record["val_samples"] == 101  # every validation sample counted exactly once
    assert 0.0 <= record["val_acc"] <= 1.0
    [first_start, *_] = json.loads((out_dir / "run.json").read_text())
    assert first_start["config"]["out_dir"] == str(out_dir)
    if combo.ddp:
        assert first_start["world_size"] == torchrun_nproc
    check_start_and_end_lines(result.stdout, combo, nproc, args, out_dir)

    # Every render keeps its weights, and its evaluate takes them, in one process whatever
    # trained them. The rendered suites (test_checkpoint.py, test_after_training.py) own
    # resuming, exact metrics, predict and export.
    import torch

    for name in ["last.pt", "best.pt"]:
        path = out_dir / "checkpoints" / name
        if combo.checkpointing and combo.sharding and combo.ddp:  # a folder of DCP shards
            assert (path / ".metadata").is_file(), name
            path = path / "run.pt"  # the run's state beside the shards
        assert path.is_file(), name
        assert isinstance(torch.load(path, map_location="cpu", weights_only=True), dict)
    device = [] if DEVICE == "cpu" else ["--device", DEVICE]
    evaluate = [*FORKED, "-m", f"{PACKAGE}.evaluate", "--out-dir", str(out_dir), *device]
    result = run(evaluate, cwd=root, **fork_server.env)
    assert result.returncode == 0, describe(result)
    evaluated = json.loads((out_dir / "eval.json").read_text())
    assert (evaluated["epoch"], evaluated["val_samples"]) == (1, 101), evaluated

    if combo.profiling:
        for name in ["trace.json", "summary.txt"]:
            assert (out_dir / "profile" / name).is_file(), name


def check_start_and_end_lines(
    stdout: str, combo: Combo, nproc: int, args: list[str], out_dir: Path
) -> None:
    """One start line (device, dtype, processes, batch, steps, out-dir) and an end summary
    (best epoch and metric, checkpoint, commands), with nothing of a feature that is off."""
    starts = [line for line in stdout.splitlines() if line.startswith("training on ")]
    assert len(starts) == 1, stdout[-3000:]
    start = starts[0]
    batch = int(flag_value(args, "--batch-size", "32"))  # a step's samples, all processes'
    assert f"batch {batch}" in start, start
    assert ("processes" in start or " 1 process" in start) == combo.ddp, start
    micro = int(flag_value(args, "--micro-batch", "0"))
    split = 0 < micro < -(-batch // nproc)  # --micro-batch splits a process's share
    assert ("micro-batches" in start) == (combo.grad_accum and split), start
    assert f"steps per epoch, 1 epoch -> {out_dir}" in start, start
    lines = stdout.splitlines()
    best = [line for line in lines if line.startswith("best: epoch 1 of 1, val_acc ")]
    assert len(best) == 1, stdout[-3000:]
    assert "checkpoints/best.pt" in best[0], best[0]
    [next_line] = [line for line in lines if line.startswith("next: ")]
    assert f"{PACKAGE}.plot {out_dir}" in next_line
    assert f"{PACKAGE}.evaluate --out-dir {out_dir}" in next_line


COVERING_IDS = pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)


@COVERING_IDS
def test_help_lists_exactly_the_enabled_flags(rendered, fork_server, combo: Combo) -> None:
    result = run([*FORKED_TRAIN, "--help"], cwd=rendered(combo), **fork_server.env)
    assert result.returncode == 0, describe(result)
    expected = {flag: getattr(combo, t.name) for t in TABLE for flag in t.flags}
    for flag in ["--epochs", "--batch-size", "--lr", "--seed", "--num-workers", "--out-dir"]:
        expected[flag] = True
    expected["--device"] = True
    for flag, present in expected.items():
        found = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", result.stdout) is not None
        assert found == present, f"{flag} {'missing from' if present else 'in'} --help"


@COVERING_IDS
@pytest.mark.parametrize(
    "bad", [["--epochs", "0"], ["--batch-size", "x"]], ids=["epochs-0", "batch-size-x"]
)
def test_bad_value_exits_with_one_line(
    rendered, fork_server, combo: Combo, bad: list[str], tmp_path
) -> None:
    args = [*FORKED_TRAIN, *bad, "--out-dir", str(tmp_path / "run")]
    result = run(args, cwd=rendered(combo), **fork_server.env)
    assert result.returncode != 0, describe(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, describe(result)
    assert bad[0] in lines[0], describe(result)
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


# Runs train.main on the command line's flags, with a real SIGTERM after optimizer step 2.
STOPPED_AT_STEP_2 = f"""
import os, signal, sys
from {PACKAGE} import train
step = train.optimizer_step
def stop_at(run):
    step(run)
    if run.state.step == 2:
        os.kill(os.getpid(), signal.SIGTERM)
train.optimizer_step = stop_at
sys.exit(train.main(sys.argv[1:]))
"""


def assert_identical(a, b, path: str = "state") -> None:
    """Two checkpoints' contents, bit for bit."""
    import torch

    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a.keys() - {"samples_per_sec"}:  # measured: it differs between any two runs
            assert_identical(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_checkpoint_resumes_after_answers_changed(rendered, tmp_path: Path) -> None:
    """A run preempted in a project with amp and grad_accum, resumed in the project that
    `copier update` turned them off in: bit-identical to an uninterrupted run there when it
    trained alike (--precision fp32; --micro-batch may differ). That a checkpoint which did
    not train alike is refused, naming the answer, is the rendered test_checkpoint.py's
    (test_checkpoint_of_a_project_rendered_with_other_answers)."""
    torch = pytest.importorskip("torch")
    before, after = rendered(DEFAULT), rendered(DEFAULT.without("amp", "grad_accum"))
    args = [*SHORT_RUN, "--width", "8", "--device", "cpu"]
    stop = [sys.executable, "-c", STOPPED_AT_STEP_2, *args]

    alike = tmp_path / "alike"
    fp32 = ["--precision", "fp32"]
    stopped = run([*stop, *fp32, "--out-dir", str(alike)], cwd=before)
    assert stopped.returncode == 75, describe(stopped)
    resumed = run([*TRAIN, *args, "--out-dir", str(alike), "--resume", "auto"], cwd=after)
    assert resumed.returncode == 0, describe(resumed)
    whole = run([*TRAIN, *args, "--out-dir", str(tmp_path / "whole")], cwd=after)
    assert whole.returncode == 0, describe(whole)
    a, b = (
        torch.load(d / "checkpoints" / "last.pt", weights_only=True)
        for d in (alike, tmp_path / "whole")
    )
    a.pop("config"), b.pop("config")  # differs in out_dir and resume only
    assert_identical(a, b)
    drop = {"samples_per_sec"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in read_metrics(alike)] == [
        {k: v for k, v in r.items() if k not in drop} for r in read_metrics(tmp_path / "whole")
    ]


@pytest.mark.gpu
def test_gpu_session_has_cuda() -> None:
    """Under `nox -s gpu` the runs above must really have used CUDA, not fallen back."""
    if DEVICE != "cuda":
        pytest.skip("TEMPLATE_TEST_DEVICE is not cuda (run `nox -s gpu` on a CUDA machine)")
    import torch

    assert torch.cuda.is_available()
