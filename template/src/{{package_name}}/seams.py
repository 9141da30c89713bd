"""The contract between the files you edit and the rest of the project, and its check.

Four files are yours, and the tests of them: ``data.py``, ``model.py``, ``loss.py`` and
``task.py``. Replace any of them whole with your own; the rest of the project calls only
what is written here, and every command checks it as it starts (``make_datasets`` below),
so that a file that no longer keeps it gets one line saying what to change.

data.py
    ``make_datasets(config) -> (train_set, val_set, num_outputs[, test_set])``: map-style
    datasets (``len()`` and ``[index]``, none empty) of ``(input, target)`` pairs, and the
    width of the model's output (the classes of a classification, the values of a regression).
    The test set is optional: a finished run evaluates best.pt on it once, as ``test_<name>``.
    ``input`` is a tensor of shape (channels, ...), float (images, tables) or integer
    (token ids); ``target`` is what ``task.check_target`` accepts.
    ``augment(input, rng) -> input``: one training sample's augmentation, of the same shape
    and dtype; ``rng`` (a ``numpy.random.Generator`` seeded by seed, epoch and index) is its
    only source of randomness. It may take ``target`` as a keyword too, for a target that
    must move with the input (a mask, boxes, keypoints): it then returns ``(input, target)``.
    ``preprocess(config, train_set) -> nn.Module``: what every batch of inputs goes through
    on the device, before the model; fit on ``train_set``; ``nn.Identity()`` for none.
model.py
    ``build_model(config, num_outputs, in_channels) -> nn.Module``: maps a batch of
    preprocessed inputs, shape (N, in_channels, ...), to the outputs the task takes.
    ``in_channels`` is the first dimension of the first training input. It may take
    ``train_set`` as a keyword too, for what else the model needs of the data (a
    vocabulary, the targets' scale). Optional, for two flags that refuse to run without
    them: submodules ``backbone`` and ``head`` (``--freeze-backbone``) and a method
    ``set_activation_checkpointing(enabled)`` (``--activation-checkpointing``).
loss.py
    ``summed_loss(outputs, targets) -> tensor``: the batch's loss summed over its samples
    (not their mean), a 0-d float32 tensor whatever the outputs' dtype; it may take
    ``label_smoothing`` as a keyword too, and use it: only then is --label-smoothing allowed.
task.py
    ``metric_sums(outputs, targets) -> {name: 0-d tensor}``: each metric summed over the
    batch's samples; ``metrics(sums, count) -> {name: float}``: the validation metrics from
    their totals over the validation set, recorded as ``val_<name>``.
    ``predictions(outputs) -> {column: tensor}``: predict's CSV columns, one value or k
    values per sample (more, such as a mask: an array file beside the CSV); it may take
    ``top_k`` as a keyword too, and only then is --top-k allowed.
    ``check_target(target, num_outputs)``: raises ValueError for a target the loss cannot
    take. ``BEST_METRIC``: the metric that picks best.pt (``"loss"`` or one of
    ``metrics``' names); ``GOALS``: ``"max"`` or ``"min"`` for each of ``metrics``' names.

A change of this contract is a change you must make: the CHANGELOG's "What you must do"
says which, and this check names it.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable
from typing import Any, SupportsIndex, cast

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from . import data, loss, model, task
from .config import Config, ConfigError

# Each function of the contract: its file, and the arguments the project passes it.
CALLS: dict[str, tuple[object, tuple[str, ...]]] = {
    "make_datasets": (data, ("config",)),
    "augment": (data, ("input", "rng")),
    "preprocess": (data, ("config", "train_set")),
    "build_model": (model, ("config", "num_outputs", "in_channels")),
    "summed_loss": (loss, ("outputs", "targets")),
    "metric_sums": (task, ("outputs", "targets")),
    "metrics": (task, ("sums", "count")),
    "predictions": (task, ("outputs",)),
    "check_target": (task, ("target", "num_outputs")),
}
# The keywords the project passes to a function of the contract whenever it takes them.
KEYWORDS = {"build_model": ("train_set",), "augment": ("target",)}
# The validation metric that is always there, whatever the task: lower is better.
LOSS = "loss"


class SeamError(ConfigError):
    """A file you edit no longer keeps the contract (see seams.py): one line, exit 2."""

    def __init__(self, file: str, message: str) -> None:
        self.flag = ""
        ValueError.__init__(self, f"{file}: {message} (the contract: seams.py)")


def check_functions() -> None:
    """Each function of the contract is there and takes the arguments it is called with."""
    for name, (module, arguments) in CALLS.items():
        file = f"{module.__name__.rsplit('.', 1)[-1]}.py"  # type: ignore[attr-defined]
        function = getattr(module, name, None)
        if not callable(function):
            raise SeamError(file, f"defines no function {name}({', '.join(arguments)})")
        keywords = [word for word in KEYWORDS.get(name, ()) if takes(function, word)]
        try:
            inspect.signature(function).bind(*arguments, **dict.fromkeys(keywords))
        except TypeError as error:
            wanted = ", ".join([*arguments, *keywords])
            raise SeamError(file, f"{name} must take ({wanted}) positionally: {error}") from None
        except ValueError:  # a builtin or C function without a signature: called as it is
            pass


def make_datasets(config: Config) -> tuple[Dataset, Dataset, int]:
    """``data.make_datasets(config)``, held to the contract, but for its test set."""
    return make_splits(config)[:3]


def make_splits(config: Config) -> tuple[Dataset, Dataset, int, Dataset | None]:
    """``data.make_datasets(config)``, held to the contract: every command's data, the test
    set None where there is none."""
    check_functions()
    check_flags(config)
    made: object = data.make_datasets(config)
    if not (isinstance(made, tuple) and len(made) in (3, 4)):
        message = "make_datasets must return (train_set, val_set, num_outputs[, test_set])"
        raise SeamError("data.py", message)
    train_set, val_set, count, test_set = made if len(made) == 4 else (*made, None)
    num_outputs = integer(count)
    if num_outputs is None or num_outputs < 1:
        raise SeamError("data.py", f"num_outputs must be an int of at least 1, got {count!r}")
    for split, dataset in (("train_set", train_set), ("val_set", val_set), ("test_set", test_set)):
        if dataset is None and split == "test_set":  # optional
            continue
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise SeamError("data.py", f"{split} must be a map-style dataset (len() and [index])")
        if len(dataset) == 0:
            raise SeamError("data.py", f"{split} is empty: give it samples")
        check_sample(dataset[0], f"{split}[0]", num_outputs)
    check_augment(train_set[0], num_outputs)
    return train_set, val_set, num_outputs, test_set


def check_sample(sample: object, where: str, num_outputs: int) -> None:
    """A sample is ``(input tensor of shape (channels, ...), target the task takes)``."""
    if not (isinstance(sample, tuple | list) and len(sample) == 2):
        raise SeamError("data.py", f"{where} must be an (input, target) pair, got {type(sample)}")
    inputs, target = sample
    if not isinstance(inputs, torch.Tensor) or inputs.dim() == 0:
        raise SeamError(
            "data.py", f"{where}'s input must be a tensor of shape (channels, ...), got {inputs!r}"
        )
    if inputs.is_complex() or inputs.dtype == torch.bool:
        raise SeamError("data.py", f"{where}'s input must be float or integer, not {inputs.dtype}")
    check_target(target, where, num_outputs)


def check_target(target: object, where: str, num_outputs: int) -> None:
    """``task.check_target`` of the target of ``where``; its refusal one line naming both files."""
    try:
        task.check_target(target, num_outputs)
    except ValueError as error:  # which file is wrong, only you know: the line names both
        message = f"{where}'s target {error}: task.check_target refuses it; change the target "
        message += "(data.py) or what check_target and the loss take (task.py, loss.py)"
        raise SeamError("data.py or task.py", message) from None


def check_augment(sample: tuple, num_outputs: int) -> None:
    """``augment`` of the first training sample gives a sample of the same shape and dtype,
    and an ``(input, target)`` pair where it takes the target."""
    inputs, target = sample
    made = augmented(inputs.clone(), target, np.random.default_rng(0))
    if not (isinstance(made, tuple | list) and len(made) == 2):
        raise SeamError("data.py", "augment takes target: it must return (input, target)")
    check_sample(made, "augment(train_set[0])", num_outputs)
    if (made[0].shape, made[0].dtype) != (inputs.shape, inputs.dtype):
        got, want = (f"{tuple(x.shape)} {x.dtype}" for x in (made[0], inputs))
        raise SeamError("data.py", f"augment(train_set[0]) is {got}; its input was {want}")


def augmented(inputs: torch.Tensor, target: object, rng: np.random.Generator) -> Any:
    """``data.augment`` of one sample, as the training loader calls it: ``(input, target)``,
    the target moved with the input where augment takes it (a mask), else left as it is."""
    augment: Callable[..., Any] = data.augment  # of either form
    if takes(augment, "target"):
        return augment(inputs, rng, target=target)
    return augment(inputs, rng), target


def takes(function: object, keyword: str) -> bool:
    """Whether a function of yours takes the optional ``keyword`` (``label_smoothing``,
    ``top_k``, ``train_set``, ``target``): the project then passes it, and allows the flag
    it serves."""
    try:
        parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    except ValueError:  # a builtin without a signature
        return False
    named = parameters.get(keyword)
    return named is not None and named.kind != inspect.Parameter.POSITIONAL_ONLY


def build_model(
    build: Callable[..., nn.Module],
    config: Config,
    num_outputs: int,
    in_channels: int,
    train_set: Dataset,
) -> nn.Module:
    """``build(config, num_outputs, in_channels)``, given ``train_set=`` where it takes it:
    how the project calls ``model.build_model`` (and the tests their variants of it)."""
    extra = {"train_set": train_set} if takes(build, "train_set") else {}
    return build(config, num_outputs, in_channels, **extra)


def check_flags(config: Config) -> None:
    """The flags that name the task's metrics, and those only some tasks have, fit the task."""
    if config.label_smoothing and not takes(loss.summed_loss, "label_smoothing"):
        message = "the task's summed_loss takes no label_smoothing (loss.py); leave it at 0"
        raise ConfigError("label_smoothing", message)
    names = [LOSS, *task.GOALS]
    if config.best_metric and config.best_metric not in names:
        message = f"{config.best_metric!r} is not a metric of the task; choose from {names}"
        raise ConfigError("best_metric", message)
    if best_metric(config) not in names:
        message = f"BEST_METRIC {task.BEST_METRIC!r} is not in GOALS; add it, or make it {LOSS!r}"
        raise SeamError("task.py", message)
    watched = [f"{prefix}val_{name}" for prefix in ("", "ema_") for name in names]
    if config.early_stop_metric and config.early_stop_metric not in watched:
        message = f"{config.early_stop_metric!r} is not a metric of the task; choose from {watched}"
        raise ConfigError("early_stop_metric", message)


def check_metrics(computed: object) -> dict[str, float]:
    """``task.metrics``' result, held to the contract: a dict of numbers by name."""
    numbers = isinstance(computed, dict) and all(
        isinstance(value, int | float) and not isinstance(value, bool)
        for value in computed.values()
    )
    if not numbers:
        raise SeamError("task.py", f"metrics must return a dict of numbers, got {computed!r}")
    return cast(dict[str, float], computed)


def check_watched(metrics: dict[str, float], config: Config) -> dict[str, float]:
    """A validation's ``metrics``, holding the metrics that best.pt and early stopping read."""
    watched = [f"val_{best_metric(config)}"]
    if config.early_stop_patience and config.early_stop_metric:
        watched.append(config.early_stop_metric.removeprefix("ema_"))
    for name in watched:
        if name not in metrics:
            found = ", ".join(key for key in metrics if key != "val_samples")
            message = f"validation gave no {name} (it gave {found}); return it from metrics"
            raise SeamError("task.py", message)
    return metrics


def best_metric(config: Config) -> str:
    """The metric that picks best.pt: --best-metric, else the task's BEST_METRIC."""
    return config.best_metric or task.BEST_METRIC


def goal(name: str) -> str:
    """``"min"`` or ``"max"``: which way a recorded metric (``val_acc``, ``ema_val_loss``, or
    the task's name ``acc``) improves."""
    name = name.removeprefix("ema_").removeprefix("val_")
    return "min" if name == LOSS else task.GOALS[name]


def better(value: float, best: float | None, name: str, delta: float = 0.0) -> bool:
    """Whether ``value`` of metric ``name`` improves on ``best`` by more than ``delta``."""
    if best is None:
        return True
    return value < best - delta if goal(name) == "min" else value > best + delta


def best_weights(record: dict, name: str) -> tuple[str, float]:
    """Which weights of an epoch's ``record`` did better on the metric ``name`` (``val_acc``):
    ``("model", value)``, or ``("ema", value)`` where the EMA's beat the model's."""
    ema = record.get(f"ema_{name}")
    if ema is not None and better(ema, record[name], name):
        return "ema", ema
    return "model", record[name]


def integer(value: object) -> int | None:
    """``value`` as an int where it is one (an int, a numpy integer, a 0-d integer tensor)."""
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        return None
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        return None
    try:
        return operator.index(value)
    except TypeError:  # a float tensor
        return None
