"""The loss: training and validation both compute it here, so a new loss is one change.

It returns the batch's sum, not its mean: the caller divides by the samples it averages
over (an optimizer step's, an epoch's, the validation set's), so that every sample weighs
alike, a short last batch included.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def summed_loss(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """The batch's summed cross-entropy, in fp32 whatever the logits' dtype.

    ``label_smoothing`` is for training only: validation's loss stays the plain
    cross-entropy, comparable between runs.
    """
    return F.cross_entropy(
        logits.float(), targets, reduction="sum", label_smoothing=label_smoothing
    )
