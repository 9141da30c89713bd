"""Per-step cost of the rendered training loop, against a bare loop and Lightning's Trainer.

    python benchmarks/loop_overhead.py            # about 2 minutes on 2 CPU cores
    python benchmarks/loop_overhead.py --quick    # fewer rounds, for a smoke test

Renders two projects from this template (every toggle off; every toggle on, run with
``--precision fp32``) and, for each, times in one process three loops that
train the same model on the same batches with the same batch size and number of steps:

- ``rendered``: the project's own code. ``train.setup(config, device)`` builds the Run (ddp
  projects get a single-process ``distributed.Dist()``) and ``train.train_epoch(run, batches)``
  runs its real per-step path: forward, loss, backward, loss and non-finite bookkeeping on the
  device, then ``optimizer_step(run)`` (clipping, AdamW, OneCycleLR; GradScaler, autocast and
  ``no_sync`` where the toggles put them, all disabled at fp32 in a single process).
- ``raw``: the loop a careful engineer writes by hand: zero_grad, forward, loss, backward,
  step, with the same AdamW, gradient clipping and OneCycleLR. Clipping and the schedule are
  part of the training the project does, not overhead, so they are in both; the ratio
  ``rendered / raw`` is then the cost of the project's bookkeeping alone.
- ``lightning``: ``lightning.Trainer`` fitting a LightningModule around the same model, with
  the same optimizer, per-step schedule and clipping; progress bar, logger, checkpointing,
  model summary and validation off. Its time runs from the start of the first batch to the
  end of the epoch (a Callback reads the clock), so ``fit``'s fixed start-up cost is left out.
- ``raw-min`` (for information): the bare loop without clipping and schedule.

Data: the batches are drawn once from the project's own training DataLoader and kept as
tensors on the device, and all loops iterate over that one list. Data loading is then out of
the comparison (it is measured by ``python -m <package>.tune_loader``); what remains is the
loop and the model.

The loops run in rounds, A B C D A B C D ..., so that drift on a shared machine (other load,
clock changes, allocator state) hits every loop alike; the first round is warm-up and
dropped. Each round times one pass over the batches; the median over rounds is reported per
step. Two sizes: ``tiny`` (width 4, batch 8: the loop's overhead weighs most) and
``compute`` (width 16, batch 64: the convolutions dominate). PyTorch runs on one thread
(OMP_NUM_THREADS=1 and torch.set_num_threads(1)), which makes the timings much steadier on a
small shared machine; the ratios are what matters, not the absolute times.

The last line is ``ratio_vs_raw=<x> ratio_vs_lightning=<y>`` for the tiny model of the
all-off project; the line before it gives the same for the all-on project. Targets: the
first at most 1.03, the second well below 1.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import inspect
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE / "tests"))

from combos import BY_ID, DEFAULT, PACKAGE, render  # noqa: E402

PROJECTS = {
    "all-off": (BY_ID["none"].answers, []),
    "all-on": (DEFAULT.answers, ["--precision", "fp32"]),
}
# name: (width, batch size, steps per round, rounds after the warm-up round)
SIZES = {"tiny": (4, 8, 20, 60), "compute": (16, 64, 6, 12)}
LOOPS = ["rendered", "raw", "lightning", "raw-min"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds only (smoke test)")
    parser.add_argument("--device", default="cpu", help="torch device to time on (default cpu)")
    parser.add_argument(
        "--template", default=str(TEMPLATE), help="template to render (default: this checkout)"
    )
    parser.add_argument("--child", metavar="PROJECT", help=argparse.SUPPRESS)
    parser.add_argument("--extra", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        results = measure(Path(args.child), args.extra.split(), args.device, args.quick)
        print(json.dumps(results))
        return

    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    results = {}
    with tempfile.TemporaryDirectory(prefix="loop-overhead-") as tmp:
        for name, (answers, extra) in PROJECTS.items():
            # The working tree (HEAD and uncommitted changes), never a release tag.
            dest = render(answers, Path(tmp) / name, template=args.template)
            # One process per project: the two render the same package name, and the all-on
            # project switches on deterministic algorithms for the whole process.
            command = [sys.executable, __file__, "--child", str(dest), "--extra", " ".join(extra)]
            command += ["--device", args.device] + (["--quick"] if args.quick else [])
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            results[name] = json.loads(out.stdout.splitlines()[-1])
    report(results)


def report(results: dict) -> None:
    print(f"median time per step (ms); torch on 1 thread; rounds alternate {' '.join(LOOPS)}")
    print(f"{'project':<8} {'size':<8} " + " ".join(f"{loop:>10}" for loop in LOOPS))
    for project, sizes in results.items():
        for size, result in sizes.items():
            cells = " ".join(f"{result['median'][loop] * 1e3:10.3f}" for loop in LOOPS)
            print(f"{project:<8} {size:<8} {cells}")
    print("rendered / other: median over rounds of the ratio within a round [quartiles]")
    for project, sizes in results.items():
        for size, result in sizes.items():
            cells = []
            for loop in LOOPS[1:]:
                low, _, high = statistics.quantiles(result["ratios"][loop], n=4)
                cells.append(f"vs {loop} {ratio(result, loop):.3f} [{low:.3f}-{high:.3f}]")
            print(f"{project:<8} {size:<8} " + "  ".join(cells))
    for project in ["all-on", "all-off"]:  # the all-off line last: it is the one tools read
        result = results[project]["tiny"]
        prefix = "all_on_" if project == "all-on" else ""
        print(
            f"{prefix}ratio_vs_raw={ratio(result, 'raw'):.3f} "
            f"{prefix}ratio_vs_lightning={ratio(result, 'lightning'):.3f}"
        )


def ratio(result: dict, loop: str) -> float:
    return statistics.median(result["ratios"][loop])


# ---------------------------------------------------------------- one project, one process
def measure(project: Path, extra: list[str], device_name: str, quick: bool) -> dict:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(project / "src"))
    train = __import__(f"{PACKAGE}.train", fromlist=["train"])
    config_module = __import__(f"{PACKAGE}.config", fromlist=["config"])
    device = __import__(f"{PACKAGE}.device", fromlist=["device"])
    if hasattr(device, "make_deterministic"):
        device.make_deterministic()  # as the all-on project's main() does, for every loop here
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    device = torch.device(device_name)
    results = {}
    for size, (width, batch_size, steps, rounds) in SIZES.items():
        rounds = 3 if quick else rounds
        with tempfile.TemporaryDirectory() as out_dir:
            argv = [
                *["--width", str(width), "--batch-size", str(batch_size)],
                *["--train-size", str(steps * batch_size), "--epochs", str(rounds + 1)],
                *["--num-workers", "0", "--device", device_name, "--out-dir", out_dir],
                *extra,
            ]
            config = config_module.parse_args(argv)
            loops = make_loops(train, config, device, steps, rounds + 1)
            times = {name: [] for name in loops}
            gc.collect()
            gc.freeze()  # so that the collections between loops need not scan torch's objects
            for _ in range(rounds + 1):
                for name, loop in loops.items():
                    gc.collect()  # not in the next loop's timing: Lightning leaves garbage
                    times[name].append(loop() / steps)
            times = {name: t[1:] for name, t in times.items()}  # the first round warms up
            results[size] = {
                "median": {name: statistics.median(t) for name, t in times.items()},
                # Ratios of the same round: neighbours in time share the machine's drift.
                "ratios": {
                    name: [a / b for a, b in zip(times["rendered"], t, strict=True)]
                    for name, t in times.items()
                },
            }
    return results


class Batches:
    """Pre-made batches, with the ``batch_sampler`` of the loader they came from
    (``train_epoch`` reads its batch plan). Not a list: Lightning would take a list for a
    collection of loaders.
    """

    def __init__(self, batches: list, batch_sampler) -> None:
        self.batches = batches
        self.batch_sampler = batch_sampler

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def make_loops(train, config, device, steps: int, rounds: int) -> dict:
    """Four closures, each training one pass over the same batches and returning its seconds."""
    import lightning
    import torch
    import torch.nn.functional as F

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # On the CPU, the CPU time of this process: with one thread it is the time a step takes,
    # and other processes on a shared machine do not count. On CUDA, wall time after a sync.
    clock = time.perf_counter if device.type == "cuda" else time.process_time

    setup_args = [config, device]
    if "env" in inspect.signature(train.setup).parameters:
        setup_args.append(train.Dist())  # single process: no process group, no DDP wrapper
    run, train_loader, _ = train.setup(*setup_args)
    made = [(x.to(device), y.to(device)) for x, y in train_loader]
    batches = Batches(made, train_loader.batch_sampler)
    assert len(batches) == steps
    initial = copy.deepcopy(run.model.state_dict())

    def rendered() -> float:
        sync()
        start = clock()
        with contextlib.redirect_stdout(io.StringIO()):  # its log line every log_every steps
            train.train_epoch(run, batches)
        sync()
        seconds = clock() - start
        # What train() does between epochs, outside the timing.
        train.check_finite(run)
        run.state.end_epoch()
        return seconds

    def fresh_model() -> torch.nn.Module:
        net = copy.deepcopy(run.model)
        net.load_state_dict(initial)
        return net

    def optimizer_and_schedule(net):
        optimizer = torch.optim.AdamW(
            net.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.lr, total_steps=rounds * steps
        )
        return optimizer, scheduler

    def bare(clip_and_schedule: bool):
        net = fresh_model()
        optimizer, scheduler = optimizer_and_schedule(net)

        def loop() -> float:
            sync()
            start = clock()
            net.train()
            for x, y in batches:
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                if clip_and_schedule:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
                optimizer.step()
                if clip_and_schedule:
                    scheduler.step()
            sync()
            return clock() - start

        return loop

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = fresh_model()
            # Made once, so that optimizer state and schedule carry on from fit to fit.
            self.optimizer, self.scheduler = optimizer_and_schedule(self.net)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            schedule = {"scheduler": self.scheduler, "interval": "step"}
            return {"optimizer": self.optimizer, "lr_scheduler": schedule}

    class Clock(lightning.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            if batch_idx == 0:
                sync()
                self.start = clock()

        def on_train_epoch_end(self, trainer, module) -> None:
            sync()
            self.seconds = clock() - self.start

    module = Module()

    def lightning_loop() -> float:
        clock = Clock()
        trainer = lightning.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=1,
            max_epochs=1,
            max_steps=steps,
            gradient_clip_val=config.grad_clip,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            logger=False,
            callbacks=[clock],
        )
        trainer.fit(module, train_dataloaders=batches)
        return clock.seconds

    return {
        "rendered": rendered,
        "raw": bare(clip_and_schedule=True),
        "lightning": lightning_loop,
        "raw-min": bare(clip_and_schedule=False),
    }


if __name__ == "__main__":
    main()
