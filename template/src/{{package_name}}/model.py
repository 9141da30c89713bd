"""The example model: a small convolutional classifier. Replace it with your own.

The contract with ``train.py`` is small: ``build_model(config, num_classes, in_channels)``
returns an ``nn.Module`` that maps a batch of inputs to logits, and it has a ``backbone``
(frozen by ``--freeze-backbone``) and a ``head`` (always trained). ``train.py`` reads
``in_channels`` from the first training input (its first dimension), so a dataset with
another number of channels needs no change here.
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
        self.backbone_frozen = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def freeze_backbone(self) -> None:
        """Stop training the backbone, BatchNorm statistics included."""
        self.backbone.requires_grad_(False)
        self.backbone_frozen = True
        self.train(self.training)

    def train(self, mode: bool = True) -> Classifier:
        # requires_grad_(False) alone still lets BatchNorm update its running statistics
        # in train mode, so a frozen backbone stays in eval mode whatever the caller asks.
        super().train(mode)
        if self.backbone_frozen:
            self.backbone.eval()
        return self

    def set_activation_checkpointing(self, enabled: bool) -> None:
        """Recompute the convolutions in backward instead of storing their activations."""
        for block in self.backbone.modules():
            if isinstance(block, ConvBlock):
                block.activation_checkpointing = enabled


def build_model(config: Config, num_classes: int, in_channels: int) -> Classifier:
    """Build the model that ``config`` asks for, for inputs of ``in_channels`` channels."""
    model = Classifier(num_classes, in_channels, width=config.width, dropout=config.dropout)
    model.set_activation_checkpointing(config.activation_checkpointing)
    if config.freeze_backbone:
        model.freeze_backbone()
    return model
