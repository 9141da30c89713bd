"""Your model: ``build_model``, and the example it builds.

This file is yours: replace it whole with your own. Its contract, written in ``seams.py``
and checked at start, is small: ``build_model(config, num_classes, in_channels)``
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

from .config import Config


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
