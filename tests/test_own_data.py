"""The recipes of docs/own-data.md work as written.

Each recipe is taken from the page, appended to the end of a rendered project's data.py,
given a small dataset in the layout it expects, and then the project's own fast tests pass
and one epoch of training runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from combos import DEFAULT, PACKAGE, REPO_ROOT, describe, run

pytestmark = pytest.mark.suite

PAGE = REPO_ROOT / "docs" / "own-data.md"
RECIPE = re.compile(r"<!-- recipe: ([a-z-]+) -->\n```python\n(.*?)```", re.DOTALL)

# torchvision is not installed here: this stand-in has the part of its API that the
# image-folder recipe uses. Images are class folders of .npy files (H, W, 3) of uint8.
FAKE_TORCHVISION = {
    "__init__.py": "",
    "datasets.py": """
from pathlib import Path

import numpy as np


class ImageFolder:
    def __init__(self, root, transform=None):
        root = Path(root)
        self.classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        self.samples = [
            (path, label)
            for label, name in enumerate(self.classes)
            for path in sorted((root / name).glob("*.npy"))
        ]
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        image = np.load(path)
        return (self.transform(image) if self.transform else image), label
""",
    "transforms/__init__.py": "",
    "transforms/v2.py": """
import torch
import torch.nn.functional as F


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image


class ToImage:
    def __call__(self, image):
        return torch.from_numpy(image).permute(2, 0, 1).contiguous()


class ToDtype:
    def __init__(self, dtype, scale=False):
        self.dtype, self.scale = dtype, scale

    def __call__(self, image):
        return image.to(self.dtype) / (255 if self.scale else 1)


class Resize:
    def __init__(self, size):
        self.size = size

    def __call__(self, image):
        return F.interpolate(image[None], size=self.size, mode="bilinear")[0]
""",
}


def recipes() -> dict[str, str]:
    return dict(RECIPE.findall(PAGE.read_text()))


def labels(n: int, classes: int) -> np.ndarray:
    """Every class, in turn: whatever the split, each class has samples."""
    return np.arange(n) % classes


def write_arrays(data: Path, rng: np.random.Generator) -> int:
    """data/digits.npz: 8x8 images with values 0..16; returns the validation samples."""
    y = labels(100, 10)
    x = rng.integers(0, 17, size=(100, 8, 8)).astype(np.float64)
    np.savez(data / "digits.npz", X=x, y=y)
    return 20


def write_image_folder(data: Path, rng: np.random.Generator) -> int:
    """data/{train,val}/<class>/*.npy of assorted sizes, for the stand-in ImageFolder."""
    for split, n in (("train", 30), ("val", 9)):
        for i in range(n):
            folder = data / split / f"class_{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            shape = (int(rng.integers(40, 80)), int(rng.integers(40, 80)), 3)
            np.save(folder / f"{i}.npy", rng.integers(0, 256, size=shape, dtype=np.uint8))
    return 9


def write_memory_mapped(data: Path, rng: np.random.Generator) -> int:
    """data/{train,val}_{images,labels}.npy, images (N, 3, 12, 12) of uint8."""
    for split, n in (("train", 50), ("val", 13)):
        images = np.lib.format.open_memmap(
            data / f"{split}_images.npy", mode="w+", dtype=np.uint8, shape=(n, 3, 12, 12)
        )
        images[:] = rng.integers(0, 256, size=images.shape, dtype=np.uint8)
        images.flush()
        np.save(data / f"{split}_labels.npy", labels(n, 10))
    return 13


WRITERS = {
    "arrays": write_arrays,
    "image-folder": write_image_folder,
    "memory-mapped": write_memory_mapped,
}

# After a sample was read, the dataset pickles (for a spawned worker) without its array.
PICKLES_WITHOUT_THE_ARRAY = f"""
import pickle
from {PACKAGE} import data
from {PACKAGE}.config import Config
train_set, _, _ = data.make_datasets(Config())
train_set[0]
assert train_set.images is not None
assert len(pickle.dumps(train_set)) < train_set.images.nbytes // 2, "the array is pickled"
"""


def test_the_page_has_the_tested_recipes() -> None:
    assert set(recipes()) == set(WRITERS)


@pytest.fixture(scope="module")
def project(rendered) -> Path:
    return rendered(DEFAULT)


@pytest.mark.parametrize("name", list(WRITERS))
def test_recipe_passes_the_project_tests_and_trains(project, tmp_path, name: str) -> None:
    root = tmp_path / "project"
    shutil.copytree(project, root)
    data_py = root / "src" / PACKAGE / "data.py"
    data_py.write_text(data_py.read_text() + "\n\n" + recipes()[name])
    (root / "data").mkdir()
    val_samples = WRITERS[name](root / "data", np.random.default_rng(0))
    env = {}
    if name == "image-folder":
        fake = tmp_path / "fake"
        for path, text in FAKE_TORCHVISION.items():
            (fake / "torchvision" / path).parent.mkdir(parents=True, exist_ok=True)
            (fake / "torchvision" / path).write_text(text)
        env["PYTHONPATH"] = os.pathsep.join(["src", str(fake)])

    # The recipe as appended is clean but for the redefinitions and late imports.
    lint = [sys.executable, "-m", "ruff", "check", "--ignore", "F811,E402", str(data_py)]
    result = run(lint, cwd=root)
    assert result.returncode == 0, describe(result)

    # The fast part of the project's suite (the slow part starts training processes).
    pytest_args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    result = run([*pytest_args, "-m", "not slow"], cwd=root, **env)
    assert result.returncode == 0, describe(result)

    train = [sys.executable, "-m", f"{PACKAGE}.train", "--epochs", "1", "--device", "cpu"]
    result = run([*train, "--batch-size", "8", "--out-dir", "runs/one"], cwd=root, **env)
    assert result.returncode == 0, describe(result)
    record = json.loads((root / "runs" / "one" / "metrics.jsonl").read_text())
    assert record["val_samples"] == val_samples

    if name == "memory-mapped":
        result = run([sys.executable, "-c", PICKLES_WITHOUT_THE_ARRAY], cwd=root)
        assert result.returncode == 0, describe(result)
