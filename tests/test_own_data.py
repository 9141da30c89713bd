"""The recipes of docs/own-data.md work as written.

Each recipe is taken from the page, appended to the end of a rendered project's data.py
(a model recipe to the end of its model.py), given a small dataset in the layout it
expects, and then the project's own tests pass and one epoch of training runs. The image
recipes run the fast part of the project's suite; the recipes whose model or data is not
the example's kind (a model without backbone and head, a table of 2 classes, 1-D signals)
run all of it, training processes included.
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


def write_table(data: Path, rng: np.random.Generator) -> int:
    """data/table.csv: 120 rows of 30 features of scales 0.01 to 1000, 2 classes."""
    y = labels(120, 2)
    scales = 10.0 ** np.arange(-2, 4).repeat(5)  # the scales differ, as raw features' do
    x = (rng.standard_normal((120, 30)) + 0.8 * y[:, None]) * scales + 5 * scales
    header = ",".join([*(f"feature_{i}" for i in range(30)), "label"])
    np.savetxt(data / "table.csv", np.column_stack([x, y]), delimiter=",", header=header)
    return 24


def write_signals(data: Path, rng: np.random.Generator) -> int:
    """data/signals.npz: 100 signals of 2 channels and 50 steps, 3 classes."""
    y = labels(100, 3)
    time = np.linspace(0, 1, 50)
    waves = np.sin(2 * np.pi * (y[:, None, None] + 1) * time)  # a frequency per class
    x = waves + 0.3 * rng.standard_normal((100, 2, 50))
    np.savez(data / "signals.npz", X=x.astype(np.float32), y=y)
    return 20


def write_nothing(data: Path, rng: np.random.Generator) -> int:
    """The example data: the model recipe alone changes."""
    return 64  # --val-size in FLAGS


WRITERS = {
    "arrays": write_arrays,
    "image-folder": write_image_folder,
    "memory-mapped": write_memory_mapped,
    "resnet-like": write_nothing,
    "table": write_table,
    "signals": write_signals,
}
# The recipes that are appended to model.py, by the case that uses them.
MODELS = {"resnet-like": "resnet-like", "table": "table-model", "signals": "signals-model"}
# The project's whole suite, slow tests included, runs for the model without the example's
# structure; the table and the signals run the fast tier, which holds every test of the data
# and model contract (the slow tier's process trees add ~3 min of CI each, not a new contract).
WHOLE_SUITE = {"resnet-like"}
# Training flags of a case: the example data, smaller, for the epoch that trains.
FLAGS = {"resnet-like": ["--train-size", "256", "--val-size", "64"]}

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
    data_recipes = set(WRITERS) - {"resnet-like"}
    assert set(recipes()) == data_recipes | set(MODELS.values())


@pytest.fixture(scope="module")
def project(rendered) -> Path:
    return rendered(DEFAULT)


@pytest.mark.parametrize("name", list(WRITERS))
def test_recipe_passes_the_project_tests_and_trains(project, tmp_path, name: str) -> None:
    root = tmp_path / "project"
    shutil.copytree(project, root)
    data_py = root / "src" / PACKAGE / "data.py"
    if name in recipes():
        data_py.write_text(data_py.read_text() + "\n\n" + recipes()[name])
    model_py = root / "src" / PACKAGE / "model.py"
    if name in MODELS:
        model_py.write_text(model_py.read_text() + "\n\n" + recipes()[MODELS[name]])
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
    lint = [sys.executable, "-m", "ruff", "check", "--ignore", "F811,E402"]
    result = run([*lint, str(data_py), str(model_py)], cwd=root)
    assert result.returncode == 0, describe(result)

    pytest_args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rs"]
    if name in WHOLE_SUITE:
        result = run([*pytest_args, "-n", "2"], cwd=root, timeout=1500, **env)
    else:  # the fast part of the suite (the slow part starts training processes)
        result = run([*pytest_args, "-m", "not slow"], cwd=root, **env)
    assert result.returncode == 0, describe(result)
    if name == "resnet-like":  # the flags' tests skip, saying what the model lacks
        assert "has no backbone and head: --freeze-backbone is off" in result.stdout
        assert "has no set_activation_checkpointing" in result.stdout

    train = [sys.executable, "-m", f"{PACKAGE}.train", "--epochs", "1", "--device", "cpu"]
    train += [*FLAGS.get(name, []), "--batch-size", "8", "--out-dir", "runs/one"]
    result = run(train, cwd=root, **env)
    assert result.returncode == 0, describe(result)
    record = json.loads((root / "runs" / "one" / "metrics.jsonl").read_text())
    assert record["val_samples"] == val_samples

    if name == "memory-mapped":
        result = run([sys.executable, "-c", PICKLES_WITHOUT_THE_ARRAY], cwd=root)
        assert result.returncode == 0, describe(result)
