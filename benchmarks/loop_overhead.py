"""Per-step cost of the rendered training loop, against a bare loop and Lightning's Trainer.

    python benchmarks/loop_overhead.py            # about 2 minutes on 2 CPU cores
    python benchmarks/loop_overhead.py --quick    # fewer rounds, for a smoke test
    python benchmarks/loop_overhead.py --features # the per-step cost each toggle adds

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
first at most 1.03, the second well below 1. Lightning is optional: without the package
its column is left out.

``--features`` answers where the all-on loop's cost comes from. It renders the all-off
project, each toggle alone (sync_bn with ddp) and the all-on project, and times the tiny
model's ``rendered`` and ``raw`` loops in each, as above. Each project runs ``--repeats``
times (default 3), the projects interleaved (off, amp, ..., on, off, amp, ...), so that a
busy spell on a shared machine spreads over all of them. It prints per project the median
ratio rendered / raw, the spread of that ratio over the repeats (min-max of the per-repeat
medians: the noise), and the per-step cost the toggle adds over the all-off loop, in
microseconds and in points of the ratio. The costs of the toggles alone need not add up to
the all-on cost: toggles meet (ddp's no_sync exists only with grad_accum). ``--against
OTHER`` times the projects of another checkout of the template in the same repeats, right
after this one's, and prints its table too: a before and after under the same load.
``--rounds N`` shortens each run (the tiny model's default is 60 rounds).
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

from combos import ALONE, BY_ID, DEFAULT, PACKAGE, render  # noqa: E402

# The all-on project runs at fp32 (with no --micro-batch: no accumulation), so that it does
# the raw loop's work.
ALL_ON_EXTRA = ["--precision", "fp32"]
PROJECTS = {
    "all-off": (BY_ID["none"].answers, []),
    "all-on": (DEFAULT.answers, ALL_ON_EXTRA),
}
# name: (width, batch size, steps per round, rounds after the warm-up round)
SIZES = {"tiny": (4, 8, 20, 60), "compute": (16, 64, 6, 12)}
LOOPS = ["rendered", "raw", "lightning", "raw-min"]
# --features: the all-off project, each toggle alone (tests/combos.py's TABLE, with the
# answers it needs), and the all-on project.
FEATURES = list(dict.fromkeys(["none", *(combo.id for combo in ALONE.values()), DEFAULT.id]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few rounds only (smoke test)")
    parser.add_argument("--device", default="cpu", help="torch device to time on (default cpu)")
    parser.add_argument("--features", action="store_true", help="the per-step cost per toggle")
    parser.add_argument("--repeats", type=int, default=3, help="--features: runs per project")
    parser.add_argument("--rounds", type=int, help="rounds per run (default: per size)")
    parser.add_argument("--against", help="--features: another template checkout, timed alike")
    parser.add_argument(
        "--projects", default=",".join(FEATURES), help="--features: these combination ids only"
    )
    parser.add_argument(
        "--template", default=str(TEMPLATE), help="template to render (default: this checkout)"
    )
    parser.add_argument("--child", metavar="PROJECT", help=argparse.SUPPRESS)
    parser.add_argument("--extra", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=",".join(SIZES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sizes = args.sizes.split(",")
        rounds = 3 if args.quick else args.rounds
        results = measure(Path(args.child), args.extra.split(), args.device, rounds, sizes)
        print(json.dumps(results))
        return
    if args.features:
        features(args)
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


def features(args: argparse.Namespace) -> None:
    """Time the tiny model's rendered and raw loops in the all-off project, each toggle alone
    and the all-on project, interleaved over repeats; print the cost each toggle adds.

    With ``--against`` (another checkout of the template), both templates' projects run in
    the same repeats, one after the other, and both tables are printed: a before and after
    measured under the same load.
    """
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    templates = {"this": args.template} | ({"against": args.against} if args.against else {})
    names = args.projects.split(",")
    if "none" not in names:
        names.insert(0, "none")  # every cost is measured against the all-off loop
    runs = {label: {name: [] for name in names} for label in templates}
    with tempfile.TemporaryDirectory(prefix="loop-features-") as tmp:
        projects = {
            (label, name): render(BY_ID[name].answers, Path(tmp) / label / name, template=path)
            for label, path in templates.items()
            for name in names
        }
        for repeat in range(args.repeats):
            for (label, name), dest in projects.items():
                combo = BY_ID[name]
                extra = ["--precision", "fp32"] if combo.amp else []
                command = [sys.executable, __file__, "--child", str(dest), "--sizes", "tiny"]
                command += ["--extra", " ".join(extra), "--device", args.device]
                command += ["--rounds", str(args.rounds)] if args.rounds else []
                command += ["--quick"] if args.quick else []
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                runs[label][name].append(json.loads(out.stdout.splitlines()[-1])["tiny"])
                print(f"repeat {repeat + 1}/{args.repeats}: {label} {name}", file=sys.stderr)
    for label, path in templates.items():
        print(f"\n{label}: {path}")
        report_features(runs[label])


def report_features(runs: dict[str, list[dict]]) -> None:
    def pooled(name: str, key: str, loop: str) -> list[float]:
        return [value for run in runs[name] for value in run[key][loop]]

    off_ratio = statistics.median(pooled("none", "ratios", "raw"))
    raw_step = statistics.median(pooled("none", "times", "raw"))
    print("tiny model, torch on 1 thread; rendered and raw loops alternate within each process")
    print(f"raw loop: {raw_step * 1e6:.0f} us per step (median, all-off project's process)")
    header = f"{'project':<10} {'ratio':>6} {'spread':>13} {'added/step':>11} {'points':>7}"
    print(header)
    for name in runs:
        per_repeat = [statistics.median(run["ratios"]["raw"]) for run in runs[name]]
        spread = f"{min(per_repeat):.3f}-{max(per_repeat):.3f}"
        value = statistics.median(pooled(name, "ratios", "raw"))
        # The cost over the all-off loop, per step: the ratio's excess times the raw step.
        added = (value - off_ratio) * statistics.median(pooled(name, "times", "raw"))
        label = "all-off" if name == "none" else ("all-on" if name == DEFAULT.id else name)
        points = "" if name == "none" else f"{(value - off_ratio) * 100:+7.1f}"
        cost = "" if name == "none" else f"{added * 1e6:+8.1f} us"
        print(f"{label:<10} {value:6.3f} {spread:>13} {cost:>11} {points:>7}")
    print("ratio: median of rendered / raw within a round, over all rounds of all repeats;")
    print("spread: the lowest and highest of the repeats' medians; points: 100 x (ratio - all-off)")


def report(results: dict) -> None:
    loops = [loop for loop in LOOPS if loop in next(iter(results.values()))["tiny"]["median"]]
    print(f"median time per step (ms); torch on 1 thread; rounds alternate {' '.join(loops)}")
    print(f"{'project':<8} {'size':<8} " + " ".join(f"{loop:>10}" for loop in loops))
    for project, sizes in results.items():
        for size, result in sizes.items():
            cells = " ".join(f"{result['median'][loop] * 1e3:10.3f}" for loop in loops)
            print(f"{project:<8} {size:<8} {cells}")
    print("rendered / other: median over rounds of the ratio within a round [quartiles]")
    for project, sizes in results.items():
        for size, result in sizes.items():
            cells = []
            for loop in loops[1:]:
                low, _, high = statistics.quantiles(result["ratios"][loop], n=4)
                cells.append(f"vs {loop} {ratio(result, loop):.3f} [{low:.3f}-{high:.3f}]")
            print(f"{project:<8} {size:<8} " + "  ".join(cells))
    for project in ["all-on", "all-off"]:  # the all-off line last: it is the one tools read
        result = results[project]["tiny"]
        prefix = "all_on_" if project == "all-on" else ""
        line = f"{prefix}ratio_vs_raw={ratio(result, 'raw'):.3f}"
        if "lightning" in loops:  # optional: without the package its column is left out
            line += f" {prefix}ratio_vs_lightning={ratio(result, 'lightning'):.3f}"
        print(line)


def ratio(result: dict, loop: str) -> float:
    return statistics.median(result["ratios"][loop])


# ---------------------------------------------------------------- one project, one process
def measure(
    project: Path, extra: list[str], device_name: str, rounds: int | None, sizes: list
) -> dict:
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(project / "src"))
    train = __import__(f"{PACKAGE}.train", fromlist=["train"])
    config_module = __import__(f"{PACKAGE}.config", fromlist=["config"])
    try:
        device = __import__(f"{PACKAGE}.device", fromlist=["device"])
    except ImportError:  # a project rendered before issue 25 named it runtime.py
        device = __import__(f"{PACKAGE}.runtime", fromlist=["runtime"])
    if hasattr(device, "make_deterministic"):
        device.make_deterministic()  # as the all-on project's main() does, for every loop here
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    device = torch.device(device_name)
    results = {}
    for size in sizes:
        width, batch_size, steps, default_rounds = SIZES[size]
        size_rounds = rounds or default_rounds
        with tempfile.TemporaryDirectory() as out_dir:
            argv = [
                *["--width", str(width), "--batch-size", str(batch_size)],
                *["--train-size", str(steps * batch_size), "--epochs", str(size_rounds + 1)],
                *["--num-workers", "0", "--device", device_name, "--out-dir", out_dir],
                *extra,
            ]
            config = config_module.parse_args(argv)
            loops = make_loops(train, config, device, steps, size_rounds + 1)
            times = {name: [] for name in loops}
            gc.collect()
            gc.freeze()  # so that the collections between loops need not scan torch's objects
            for _ in range(size_rounds + 1):
                for name, loop in loops.items():
                    gc.collect()  # not in the next loop's timing: Lightning leaves garbage
                    times[name].append(loop() / steps)
            times = {name: t[1:] for name, t in times.items()}  # the first round warms up
            results[size] = {
                "median": {name: statistics.median(t) for name, t in times.items()},
                "times": times,
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
    """Four closures (three without Lightning), each training one pass over the same batches
    and returning its seconds."""
    import torch
    import torch.nn.functional as F

    try:
        import lightning
    except ImportError:
        lightning = None

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

    loops = {
        "rendered": rendered,
        "raw": bare(clip_and_schedule=True),
        "raw-min": bare(clip_and_schedule=False),
    }
    if lightning is None:
        return loops

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

    return {**loops, "lightning": lightning_loop}


if __name__ == "__main__":
    main()
