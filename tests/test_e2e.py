"""Train every toggle combination for one short epoch in a subprocess, and check its outputs.

On the CPU by default; under `nox -s gpu` (TEMPLATE_TEST_DEVICE=cuda) on CUDA, with ddp
combinations on nccl, one process per GPU.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from combos import (
    ALL,
    BY_ID,
    COVERING,
    DEFAULT,
    DEVICE,
    PACKAGE,
    SHORT_RUN,
    Combo,
    describe,
    run,
)

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
TRAIN = [sys.executable, "-m", f"{PACKAGE}.train"]


def command(combo: Combo, nproc: int, module: str = "train") -> list[str]:
    """A command of the project: under torchrun for a ddp project, else a plain process."""
    if not combo.ddp:
        return [sys.executable, "-m", f"{PACKAGE}.{module}"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*torchrun, "--nproc-per-node", str(nproc), "-m", f"{PACKAGE}.{module}"]


def flags(combo: Combo, out_dir: Path, nproc: int) -> list[str]:
    args = [*SHORT_RUN, "--out-dir", str(out_dir)]
    if combo.grad_accum:
        args += ["--micro-batch", "8"]  # steps of 32: 4 micro-batches on 1 process, 2 on 2
    if combo.profiling:
        # The profiler's schedule needs 5 steps: steps of 8 samples make 32 or more.
        size = 128 * max(nproc, 2)
        args += ["--profile", "--batch-size", "8", "--train-size", str(size)]
    if DEVICE != "cpu":
        args += ["--device", DEVICE]
    return args


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("combo", ALL, ids=lambda combo: combo.id)
def test_short_training_run(rendered, torchrun_nproc: int, combo: Combo, tmp_path: Path) -> None:
    root = rendered(combo)
    out_dir = tmp_path / "run"
    nproc = torchrun_nproc if combo.ddp else 1
    args = command(combo, torchrun_nproc) + flags(combo, out_dir, nproc)
    result = run(args, cwd=root)
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
    check_start_and_end_lines(result.stdout, combo, nproc, out_dir)

    if combo.checkpointing:
        import torch

        for name in ["last.pt", "best.pt"]:
            path = out_dir / "checkpoints" / name
            assert path.is_file(), name
            assert isinstance(torch.load(path, map_location="cpu", weights_only=True), dict)
        again = run(args + ["--resume", "auto"], cwd=root)
        assert again.returncode == 0, describe(again)
        assert len(read_metrics(out_dir)) == 1, "a finished run resumed and trained again"
        if combo in COVERING:
            check_after_training(root, combo, torchrun_nproc, out_dir, tmp_path)

    if combo.profiling:
        for name in ["trace.json", "summary.txt"]:
            assert (out_dir / "profile" / name).is_file(), name


def check_start_and_end_lines(stdout: str, combo: Combo, nproc: int, out_dir: Path) -> None:
    """One start line (device, dtype, processes, batch, steps, out-dir) and an end summary
    (best epoch and metric, checkpoint, commands), with nothing of a feature that is off."""
    starts = [line for line in stdout.splitlines() if line.startswith("training on ")]
    assert len(starts) == 1, stdout[-3000:]
    start = starts[0]
    batch = int(flag_value(combo, "--batch-size"))  # the samples of a step, all processes'
    assert f"batch {batch}" in start, start
    assert ("processes" in start or " 1 process" in start) == combo.ddp, start
    micro_batches = -(-batch // nproc) > 8  # --micro-batch 8 then splits a process's share
    assert ("micro-batches" in start) == (combo.grad_accum and micro_batches), start
    assert f"steps per epoch, 1 epoch -> {out_dir}" in start, start
    lines = stdout.splitlines()
    best = [line for line in lines if line.startswith("best: epoch 1 of 1, val_acc ")]
    assert len(best) == 1, stdout[-3000:]
    assert ("checkpoints/best.pt" in best[0]) == combo.checkpointing, best[0]
    [next_line] = [line for line in lines if line.startswith("next: ")]
    assert f"{PACKAGE}.plot {out_dir}" in next_line
    assert (f"{PACKAGE}.evaluate --out-dir {out_dir}" in next_line) == combo.checkpointing


def flag_value(combo: Combo, flag: str) -> str:
    """The value a short run passes for ``flag``, as SHORT_RUN and flags() set it."""
    args = [*SHORT_RUN, *(["--batch-size", "8"] if combo.profiling else [])]
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag][-1]


def check_after_training(
    root: Path, combo: Combo, nproc: int, out_dir: Path, tmp_path: Path
) -> None:
    """evaluate, predict (both under torchrun for ddp) and export the run, as its user would."""
    result = run([*command(combo, nproc, "evaluate"), "--out-dir", str(out_dir)], cwd=root)
    assert result.returncode == 0, describe(result)
    evaluated = json.loads((out_dir / "eval.json").read_text())
    recorded = read_metrics(out_dir)[evaluated["epoch"] - 1]
    assert evaluated["val_acc"] == recorded["val_acc"]  # exactly: best.pt's own weights
    assert evaluated["val_samples"] == 101

    import numpy as np

    np.save(tmp_path / "inputs.npy", np.random.default_rng(0).random((7, 1, 16, 16), "float32"))
    output = tmp_path / "predictions.csv"
    args = ["--out-dir", str(out_dir), "--input", str(tmp_path / "inputs.npy"), "--top-k", "3"]
    result = run([*command(combo, nproc, "predict"), *args, "--output", str(output)], cwd=root)
    assert result.returncode == 0, describe(result)
    lines = output.read_text().splitlines()
    assert len(lines) == 1 + 7, lines  # a header, then each input once
    assert [line.split(",")[0] for line in lines[1:]] == [str(i) for i in range(7)]

    result = run([sys.executable, "-m", f"{PACKAGE}.export", "--out-dir", str(out_dir)], cwd=root)
    assert result.returncode == 0, describe(result)
    assert (out_dir / "export" / "model.pt2").is_file()


COVERING_IDS = pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)


@COVERING_IDS
def test_help_lists_exactly_the_enabled_flags(rendered, combo: Combo) -> None:
    result = run([*TRAIN, "--help"], cwd=rendered(combo))
    assert result.returncode == 0, describe(result)
    expected = {
        "--precision": combo.amp,
        "--micro-batch": combo.grad_accum,
        "--resume": combo.checkpointing,
        "--profile": combo.profiling,
        "--sync-bn": combo.sync_bn,
        "--no-sync-bn": combo.sync_bn,
    }
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
def test_bad_value_exits_with_one_line(rendered, combo: Combo, bad: list[str], tmp_path) -> None:
    result = run([*TRAIN, *bad, "--out-dir", str(tmp_path / "run")], cwd=rendered(combo))
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
        for key in a:
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
    trained alike (--precision fp32, no --micro-batch), refused naming amp otherwise."""
    torch = pytest.importorskip("torch")
    before, after = rendered(DEFAULT), rendered(BY_ID["ddp-syncbn-ckpt-det-prof"])
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

    differs = tmp_path / "differs"
    stopped = run([*stop, "--precision", "bf16", "--out-dir", str(differs)], cwd=before)
    assert stopped.returncode == 75, describe(stopped)
    refused = run([*TRAIN, *args, "--out-dir", str(differs), "--resume", "auto"], cwd=after)
    assert refused.returncode == 2, describe(refused)
    [line] = refused.stderr.strip().splitlines()
    assert "amp" in line and "--precision bf16" in line, line


@pytest.mark.gpu
def test_gpu_session_has_cuda() -> None:
    """Under `nox -s gpu` the runs above must really have used CUDA, not fallen back."""
    if DEVICE != "cuda":
        pytest.skip("TEMPLATE_TEST_DEVICE is not cuda (run `nox -s gpu` on a CUDA machine)")
    import torch

    assert torch.cuda.is_available()
