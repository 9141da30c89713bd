"""The model as every command runs it: yours (``model.build_model``) behind the data's
``preprocess``, with the model flags applied.

Machinery, not yours to edit. ``assemble`` is the one place that builds it, for training
and for the commands that restore a trained run alike.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

from . import data, model, seams
from .config import Config, ConfigError


def assemble(config: Config, train_set: Dataset, num_outputs: int) -> nn.Module:
    """``build_model``'s model for the data's inputs, with the model flags applied, behind
    the data's ``preprocess`` (fit on ``train_set``); not yet on the device."""
    in_channels = train_set[0][0].shape[0]  # the model takes the data's input channels
    built = seams.build_model(model.build_model, config, num_outputs, in_channels, train_set)
    net = apply_flags(built, config)
    return with_preprocess(net, data.preprocess(config, train_set))


def apply_flags(model: nn.Module, config: Config) -> nn.Module:
    """``model`` with --activation-checkpointing and --freeze-backbone applied, or a
    ConfigError naming what the model lacks for a flag that is set."""
    if config.activation_checkpointing:
        if not callable(getattr(model, "set_activation_checkpointing", None)):
            raise ConfigError(
                "activation_checkpointing",
                f"the model ({type(model).__name__}) has no set_activation_checkpointing"
                "(enabled) method; add one (see model.py) or leave the flag off",
            )
        model.set_activation_checkpointing(True)  # type: ignore[operator]
    if config.freeze_backbone:
        parts = [getattr(model, name, None) for name in ("backbone", "head")]
        if not all(isinstance(part, nn.Module) for part in parts):
            raise ConfigError(
                "freeze_backbone",
                f"the model ({type(model).__name__}) has no backbone and head submodules; "
                "name them so (see model.py) or leave the flag off",
            )
        freeze(parts[0])  # type: ignore[arg-type]
    return model


def freeze(backbone: nn.Module) -> None:
    """Stop training ``backbone``, BatchNorm statistics included."""
    backbone.requires_grad_(False)
    # requires_grad_(False) alone still lets BatchNorm update its running statistics in
    # train mode, so before every forward pass the frozen backbone goes back to eval mode,
    # whatever model.train() set.
    backbone.register_forward_pre_hook(_stay_in_eval)


def _stay_in_eval(module: nn.Module, _inputs: tuple) -> None:
    if module.training:
        module.eval()


class Preprocessed(nn.Module):
    """The model behind the data's ``preprocess``: what every command and an exported
    program run, so that they all take the raw inputs that ``make_datasets`` yields."""

    def __init__(self, preprocess: nn.Module, model: nn.Module) -> None:
        super().__init__()
        self.preprocess = preprocess
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.preprocess(x))


def with_preprocess(model: nn.Module, preprocess: nn.Module) -> nn.Module:
    """``model`` behind ``preprocess``; ``model`` itself when the data needs none."""
    return model if isinstance(preprocess, nn.Identity) else Preprocessed(preprocess, model)
