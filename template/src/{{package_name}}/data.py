"""Your data: ``make_datasets``, ``augment`` and ``preprocess``, and the example they serve.

This file is yours: replace it whole, or any function in it, with your own. The contract
each function keeps is written in ``seams.py``, which every command checks at start; the
loaders, the sampler and the workers that serve any data live in ``loading.py``.

``make_datasets(config)`` returns ``(train, validation, number of classes)``: two datasets
of ``(input tensor, integer label)`` pairs. ``augment(image, rng)`` is the train-time
augmentation of one sample, ``preprocess(config, train_set)`` what every input goes
through, in training and after. The example makes noisy images of shapes in memory, so
nothing is downloaded. Keep large dataset state in tensors or numpy arrays, not Python
lists or dicts: every worker process would copy those on access.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .config import Config

# ----------------------------------------------------------------- the example data

IMAGE_SIZE = 16
# The data itself is fixed, whatever the run's --seed: only order and augmentation vary.
DATA_SEED = 1234


def make_datasets(config: Config) -> tuple[Dataset, Dataset, int]:
    """The training set, the validation set and the number of classes.

    Each dataset yields ``(input, label)``: a float tensor of shape (channels, ...) and an
    integer label in ``range(number of classes)``. The model is built for the channels of
    the first training input. Here: the example shapes, sized by --train-size and --val-size.
    """
    train_set = Shapes(config.train_size, seed=DATA_SEED)
    val_set = Shapes(config.val_size, seed=DATA_SEED + 1)
    return train_set, val_set, Shapes.num_classes


def augment(image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """The training augmentation of one image: a shift of up to one pixel, and mild noise.

    ``image`` is a float tensor (channels, height, width); validation inputs are never
    augmented. All randomness comes from ``rng``, which is seeded by (seed, epoch, index):
    never use ``torch.rand``, ``random`` or ``np.random`` here, or runs stop repeating.
    Returning the image unchanged is valid. What to tune for your data: the shift (up to
    ``pad`` pixels, filled with zeros; images that fill the frame tolerate less) and the
    noise (a fraction of each image's standard deviation). Flips and larger crops suit
    natural photos, not digits or text.
    """
    pad = 1
    height, width = image.shape[-2:]
    dy, dx = rng.integers(0, 2 * pad + 1, size=2).tolist()
    image = F.pad(image, (pad, pad, pad, pad))[..., dy : dy + height, dx : dx + width]
    noise = torch.from_numpy(rng.standard_normal(image.shape)).to(image.dtype)
    return image + 0.05 * image.std() * noise


def preprocess(config: Config, train_set: Dataset) -> nn.Module:
    """What every input goes through on its way to the model, e.g. standardisation.

    It runs on batches, on the device, as the first layer of the model: in training and
    validation, in evaluate and predict, and in the exported program, and its state (a
    mean and scale fit on ``train_set``) is saved with the model's. So ``make_datasets``
    yields raw inputs, and raw inputs are what predict and an exported program take. Do
    here, not in ``make_datasets``, any step that new inputs need too. ``nn.Identity()``:
    none; the example's images need none.
    """
    return nn.Identity()


def _templates() -> torch.Tensor:
    """Eight 8x8 patterns, one per class."""
    t = torch.zeros(8, 8, 8)
    eye = torch.eye(8)
    t[0, 3:5, :] = 1  # horizontal bar
    t[1, :, 3:5] = 1  # vertical bar
    t[2] = eye  # diagonal
    t[3] = eye.flip(1)  # anti-diagonal
    t[4, [0, -1], :] = 1  # square outline
    t[4, :, [0, -1]] = 1
    t[5, 2:6, 2:6] = 1  # filled square
    t[6, 3:5, :] = 1  # plus
    t[6, :, 3:5] = 1
    t[7] = (eye + eye.flip(1)).clamp(max=1)  # cross
    return t


class Shapes(Dataset):
    """Noisy 16x16 images of eight patterns at random positions; the label is the pattern."""

    num_classes = 8

    def __init__(self, size: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        templates = _templates()
        self.labels = torch.randint(0, self.num_classes, (size,), generator=g)
        offsets = torch.randint(0, IMAGE_SIZE - 8 + 1, (size, 2), generator=g).tolist()
        self.images = 0.3 * torch.randn(size, 1, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        for image, label, (y, x) in zip(self.images, self.labels.tolist(), offsets, strict=True):
            image[0, y : y + 8, x : x + 8] += templates[label]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]
