"""The model: the function to replace, then what the model flags ask of any model.

The contract with ``train.py`` is small: ``build_model(config, num_classes, in_channels)``
returns an ``nn.Module`` that maps a batch of inputs to logits. ``train.py`` reads
``in_channels`` from the first training input (its first dimension), so a dataset with
another number of channels needs no change here. Two flags need more of the model, and
refuse to run (exit 2) with a model that lacks it:

- ``--freeze-backbone``: submodules named ``backbone`` and ``head``. The backbone stops
  training (its BatchNorm statistics too); the head keeps training.
- ``--activation-checkpointing``: a method ``set_activation_checkpointing(enabled)`` that
  makes the model recompute activations in backward (``torch.utils.checkpoint``).

The example model, a small convolutional classifier, has both.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import Config, ConfigError


class ConvBlock(nn.Module):
    """Two convolutions, then BatchNorm, ReLU and 2x2 pooling.

    Only the convolutions are activation-checkpointed: BatchNorm inside a checkpointed
    region would run twice in training and update its running statistics twice.
    """

    def __init__(self, c_in: int, c_out: int, batch_norm: bool = True) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=not batch_norm),
            nn.ReLU(inplace=True),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=not batch_norm),
        )
        self.norm = nn.BatchNorm2d(c_out) if batch_norm else nn.Identity()
        self.pool = nn.Sequential(nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.activation_checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.activation_checkpointing and torch.is_grad_enabled():
            # use_reentrant=False: the supported variant; inputs need not require grad.
            x = checkpoint(self.convs, x, use_reentrant=False)
        else:
            x = self.convs(x)
        return self.pool(self.norm(x))


class Classifier(nn.Module):
    """Backbone of ConvBlocks, then a dropout + linear head."""

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        width: int = 16,
        dropout: float = 0.2,
        batch_norm: bool = True,
    ) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            ConvBlock(in_channels, width, batch_norm),
            ConvBlock(width, 2 * width, batch_norm),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def set_activation_checkpointing(self, enabled: bool) -> None:
        """Recompute the convolutions in backward instead of storing their activations."""
        for block in self.backbone.modules():
            if isinstance(block, ConvBlock):
                block.activation_checkpointing = enabled


def build_model(config: Config, num_classes: int, in_channels: int) -> nn.Module:
    """The model that ``config`` asks for, for inputs of ``in_channels`` channels."""
    return Classifier(num_classes, in_channels, width=config.width, dropout=config.dropout)


# ------------------------------------------- the machinery: keep it for any model


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
