"""Your task, beside its loss (``loss.py``): the targets it takes, the validation metrics,
the metric that picks the best checkpoint, and what predict writes, for the example's
classification.

This file is yours, as ``loss.py`` is: replace both whole with your own for a regression, a
multi-label or a sequence task (docs/own-data.md has one of each). Their contract is written
in ``seams.py`` and checked at start; the rest of the project only sums, reduces and records
what these functions return, so no other file assumes a classification.

``outputs`` is what the model returns: a tensor here, a tuple or a dict where the model
returns one (take it apart here and in ``loss.py``; an auxiliary loss the model returns is
added in ``summed_loss``). ``targets`` is a batch of the datasets' targets.
"""

from __future__ import annotations

import numbers

import torch

# The metric that picks best.pt and that early stopping watches, unless --best-metric or
# --early-stop-metric names another: "loss" or a name that metric_sums returns.
BEST_METRIC = "acc"
# Whether each metric is better higher ("max") or lower ("min"); the loss is lower.
GOALS = {"acc": "max", "top5_acc": "max"}


def check_target(target: object, num_outputs: int) -> None:
    """Raise ValueError, saying what is wrong, for a sample's target that the loss cannot
    take: here an integer class in ``range(num_outputs)`` (an int or a 0-d integer tensor)."""
    if isinstance(target, torch.Tensor) and target.dim() == 0 and not target.is_floating_point():
        target = target.item()
    if isinstance(target, bool) or not isinstance(target, numbers.Integral):
        raise ValueError(f"must be an int or a 0-d integer tensor, got {target!r}")
    if not 0 <= int(target) < num_outputs:
        raise ValueError(f"{target} is not in range({num_outputs}), the classes")


def metric_sums(outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The batch's metrics, each a sum over its samples, left on the device: validation adds
    them up over its batches (and processes) and hands the totals to ``metrics``. Here the
    correct top-1 classes, and the top-5 too with over 5 classes."""
    sums = {"acc": (outputs.argmax(dim=1) == targets).sum()}
    if outputs.shape[1] > 5:
        sums["top5_acc"] = (outputs.topk(5, dim=1).indices == targets[:, None]).sum()
    return sums


def metrics(sums: dict[str, float], count: int) -> dict[str, float]:
    """The validation metrics from the totals of ``metric_sums`` over ``count`` samples:
    here each total's mean. (A metric that is not a mean, such as R², is computed here from
    sums, e.g. of squared errors and of the targets and their squares.)"""
    return {name: total / count for name, total in sums.items()}


def predictions(outputs: torch.Tensor, top_k: int = 1) -> dict[str, torch.Tensor]:
    """Predict's CSV columns for a batch: a name and a tensor of one value per sample, or of
    k values (columns name_1 ... name_k). Here the ``top_k`` likeliest classes and their
    probabilities, likeliest first. A task without ``top_k`` has no --top-k."""
    # A stable sort puts the first of equal outputs first, as argmax (and evaluate) does.
    classes = outputs.float().sort(dim=1, descending=True, stable=True).indices[:, :top_k]
    return {"class": classes, "probability": outputs.float().softmax(dim=1).gather(1, classes)}
