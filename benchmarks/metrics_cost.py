"""Validation metrics two ways: the task seam's sums over samples against torchmetrics.

    python benchmarks/metrics_cost.py          # about a minute on 2 CPU cores
    python benchmarks/metrics_cost.py --quick  # fewer rounds, for a smoke test

Issue 43 asked whether a well-kept metrics library should compute the validation metrics.
This measures the two on the example's metrics (top-1 and top-5 accuracy of a
classification) over the same batches of logits and labels, in one process:

- ``sums``: what the rendered ``validation.validate`` does with ``task.metric_sums``: per
  batch, each metric's sum over the batch's samples, added to a float64 total on the device;
  at the end, one tensor of the totals, read once (``tolist``), divided by the samples.
- ``torchmetrics``: ``MulticlassAccuracy(top_k=1)`` and ``(top_k=5)`` with
  ``average="micro"``, ``update`` per batch and ``compute`` at the end.

Both must give the same numbers (checked), and the rounds alternate (A B A B ...) so that a
busy spell on a shared machine hits both alike; the first round is warm-up. Printed: the
median microseconds per batch of each and their ratio. Then, with two gloo processes, the
collectives each issues at the end of validation (counted by wrapping the
``torch.distributed`` functions in this benchmark's processes only): the sums need one
all-reduce; torchmetrics gathers each metric's states (``sync_dist`` at ``compute``).

torchmetrics is installed by ``nox -s bench`` (Lightning depends on it); the rendered
project does not depend on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CLASSES, BATCH, BATCHES = 10, 256, 64


def batches(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(BATCH, CLASSES, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g))
        for _ in range(BATCHES)
    ]


def with_sums(data, all_reduce=None) -> dict[str, float]:
    """The task seam's way: sums over samples, float64 totals on the device, one read."""
    sums: dict[str, torch.Tensor] = {}
    count = 0
    for outputs, targets in data:
        batch = {
            "acc": (outputs.argmax(dim=1) == targets).sum(),
            "top5_acc": (outputs.topk(5, dim=1).indices == targets[:, None]).sum(),
        }
        for name, value in batch.items():
            value = torch.as_tensor(value, dtype=torch.float64)
            sums[name] = sums[name] + value if name in sums else value
        count += len(targets)
    names = sorted(sums)
    totals = torch.cat([*(sums[name].reshape(1) for name in names), torch.tensor([count * 1.0])])
    if all_reduce is not None:
        all_reduce(totals)
    *values, total = totals.tolist()
    return {name: value / total for name, value in zip(names, values, strict=True)}


def with_torchmetrics(data) -> dict[str, float]:
    from torchmetrics.classification import MulticlassAccuracy

    top1 = MulticlassAccuracy(num_classes=CLASSES, top_k=1, average="micro")
    top5 = MulticlassAccuracy(num_classes=CLASSES, top_k=5, average="micro")
    for outputs, targets in data:
        top1.update(outputs, targets)
        top5.update(outputs, targets)
    return {"acc": top1.compute().item(), "top5_acc": top5.compute().item()}


def timed(function, data, rounds: int) -> float:
    """Median microseconds per batch of ``function(data)``."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        function(data)
        times.append((time.perf_counter() - start) / len(data) * 1e6)
    return statistics.median(times[1:])


def count_collectives(rank: int, world: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    counted: dict[str, int] = {}
    for name in ("all_reduce", "all_gather", "all_gather_object", "broadcast"):
        real = getattr(dist, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            counted[_name] = counted.get(_name, 0) + 1
            return _real(*args, **kwargs)

        setattr(dist, name, counting)
    data = batches(seed=rank)
    with_sums(data, all_reduce=dist.all_reduce)
    sums_calls = dict(counted)
    counted.clear()
    with_torchmetrics(data)
    if rank == 0:
        results.put((sums_calls, dict(counted)))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds: a smoke test")
    rounds = 5 if parser.parse_args().quick else 41
    torch.set_num_threads(1)
    data = batches()
    ours, theirs = with_sums(data), with_torchmetrics(data)
    for name in ours:
        assert abs(ours[name] - theirs[name]) < 1e-6, (name, ours[name], theirs[name])

    sums_us, metrics_us = [], []
    for _ in range(3):  # interleaved: A B A B A B
        sums_us.append(timed(with_sums, data, rounds))
        metrics_us.append(timed(with_torchmetrics, data, rounds))
    sums, metrics = statistics.median(sums_us), statistics.median(metrics_us)
    print(f"per batch of {BATCH} x {CLASSES} logits, top-1 and top-5 accuracy:")
    print(f"  sums          {sums:8.1f} us")
    print(f"  torchmetrics  {metrics:8.1f} us")

    context = mp.get_context("spawn")
    results = context.Queue()
    port = 29500 + os.getpid() % 1000
    mp.start_processes(count_collectives, args=(2, port, results), nprocs=2, start_method="spawn")
    sums_calls, metrics_calls = results.get()
    print(f"collectives at the end of validation, 2 processes: sums {sums_calls},")
    print(f"  torchmetrics {metrics_calls}")
    print(f"ratio_torchmetrics_vs_sums={metrics / sums:.2f}")


if __name__ == "__main__":
    main()
