"""The contract between the files you edit and the rest of the project, and its check.

Three files are yours: ``data.py``, ``model.py`` and ``loss.py``. Replace any of them whole
with your own; the rest of the project calls only what is written here, and every command
checks it as it starts (``make_datasets`` below), so that a file that no longer keeps it
gets one line saying what to change.

data.py
    ``make_datasets(config) -> (train_set, val_set, num_classes)``: two map-style datasets
    (``len()`` and ``[index]``, neither empty) of ``(input, label)`` pairs. ``input`` is a
    tensor of shape (channels, ...), float (images, tables) or integer (token ids);
    ``label`` an integer in ``range(num_classes)``, an ``int`` or a 0-d integer tensor.
    ``augment(input, rng) -> input``: one training sample's augmentation, of the same shape
    and dtype; ``rng`` (a ``numpy.random.Generator`` seeded by seed, epoch and index) is its
    only source of randomness.
    ``preprocess(config, train_set) -> nn.Module``: what every batch of inputs goes through
    on the device, before the model; fit on ``train_set``; ``nn.Identity()`` for none.
model.py
    ``build_model(config, num_classes, in_channels) -> nn.Module``: maps a batch of
    preprocessed inputs, shape (N, in_channels, ...), to logits of shape (N, num_classes).
    ``in_channels`` is the first dimension of the first training input. Optional, for two
    flags that refuse to run without them: submodules ``backbone`` and ``head``
    (``--freeze-backbone``) and a method ``set_activation_checkpointing(enabled)``
    (``--activation-checkpointing``).
loss.py
    ``summed_loss(logits, targets, label_smoothing=0.0) -> tensor``: the batch's loss summed
    over its samples (not their mean), a 0-d float32 tensor whatever the logits' dtype.

A change of this contract is a change you must make: the CHANGELOG's "What you must do"
says which, and this check names it.
"""

from __future__ import annotations

import inspect
import operator
from typing import SupportsIndex

import torch
from torch.utils.data import Dataset

from . import data, loss, model
from .config import Config, ConfigError

# Each function of the contract: its file, and the arguments the project passes it.
CALLS: dict[str, tuple[object, tuple[str, ...]]] = {
    "make_datasets": (data, ("config",)),
    "augment": (data, ("input", "rng")),
    "preprocess": (data, ("config", "train_set")),
    "build_model": (model, ("config", "num_classes", "in_channels")),
    "summed_loss": (loss, ("logits", "targets", "label_smoothing")),
}


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
        try:
            inspect.signature(function).bind(*arguments)
        except TypeError as error:
            raise SeamError(
                file, f"{name} must take ({', '.join(arguments)}) positionally: {error}"
            ) from None
        except ValueError:  # a builtin or C function without a signature: called as it is
            pass


def make_datasets(config: Config) -> tuple[Dataset, Dataset, int]:
    """``data.make_datasets(config)``, held to the contract: every command's data."""
    check_functions()
    made: object = data.make_datasets(config)
    if not (isinstance(made, tuple) and len(made) == 3):
        raise SeamError("data.py", "make_datasets must return (train_set, val_set, num_classes)")
    train_set, val_set, count = made
    num_classes = integer(count)
    if num_classes is None or num_classes < 1:
        raise SeamError("data.py", f"num_classes must be an int of at least 1, got {count!r}")
    for split, dataset in (("train_set", train_set), ("val_set", val_set)):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise SeamError("data.py", f"{split} must be a map-style dataset (len() and [index])")
        if len(dataset) == 0:
            raise SeamError("data.py", f"{split} is empty: give it samples")
        check_sample(dataset[0], split, num_classes)
    return train_set, val_set, num_classes


def check_sample(sample: object, split: str, num_classes: int) -> None:
    """A sample is ``(input tensor of shape (channels, ...), integer label in range)``."""
    where = f"{split}[0]"
    if not (isinstance(sample, tuple | list) and len(sample) == 2):
        raise SeamError("data.py", f"{where} must be an (input, label) pair, got {type(sample)}")
    inputs, label = sample
    if not isinstance(inputs, torch.Tensor) or inputs.dim() == 0:
        raise SeamError(
            "data.py", f"{where}'s input must be a tensor of shape (channels, ...), got {inputs!r}"
        )
    if inputs.is_complex() or inputs.dtype == torch.bool:
        raise SeamError("data.py", f"{where}'s input must be float or integer, not {inputs.dtype}")
    index = integer(label)
    if index is None:
        raise SeamError(
            "data.py", f"{where}'s label must be an int or a 0-d integer tensor, got {label!r}"
        )
    if not 0 <= index < num_classes:
        raise SeamError("data.py", f"{where}'s label {index} is not in range({num_classes})")


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
