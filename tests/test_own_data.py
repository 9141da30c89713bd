"""The recipes of docs/own-data.md work as written.

Each recipe is taken from the page, appended to the end of a rendered project's data.py
(a model recipe to the end of its model.py, a loss and a task recipe to the ends of its
loss.py and task.py), given
a small dataset in the layout it expects, and then the project's own tests pass and one
epoch of training runs. Every recipe runs the fast part of the project's suite; the
regression and next-token tasks also the slow tests that see the task (SLOW_TOO). The
regression must beat least squares on the same split.
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
from combos import DEFAULT, PACKAGE, REPO_ROOT, describe, run, slow_tests
from forkserver import PYTHON as FORKED

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


def write_regression(data: Path, rng: np.random.Generator) -> int:
    """data/regression.csv: 600 rows of 8 features of scales 0.01 to 1e5 and a target that
    depends on them nonlinearly (a sine, a square, a product), in units of ~100."""
    x = rng.standard_normal((600, 8))
    y = 3 * np.sin(2 * x[:, 0]) + x[:, 1] ** 2 + 1.5 * x[:, 2] * x[:, 3] + 0.5 * x[:, 4]
    y = 100 + 20 * (y + 0.3 * rng.standard_normal(600))
    scales = 10.0 ** np.arange(-2, 6)
    header = ",".join([*(f"feature_{i}" for i in range(8)), "target"])
    table = np.column_stack([x * scales + 5 * scales, y])
    np.savetxt(data / "regression.csv", table, delimiter=",", header=header)
    return 120


def write_multi_label(data: Path, rng: np.random.Generator) -> int:
    """data/multi_label.npz: 400 rows of 10 features, 4 labels each on or off."""
    x = rng.standard_normal((400, 10)).astype(np.float32)
    y = (x @ rng.standard_normal((10, 4)) > 0.3).astype(np.float32)
    np.savez(data / "multi_label.npz", X=x, Y=y)
    return 80


def write_tokens(data: Path, rng: np.random.Generator) -> int:
    """data/tokens.npz: 300 sequences of 17 tokens of a vocabulary of 12, from a Markov chain."""
    vocab = 12
    transitions = rng.dirichlet(np.full(vocab, 0.3), size=vocab)
    ids = np.zeros((300, 17), dtype=np.int64)
    ids[:, 0] = rng.integers(0, vocab, 300)
    for t in range(1, 17):
        ids[:, t] = [rng.choice(vocab, p=transitions[token]) for token in ids[:, t - 1]]
    np.savez(data / "tokens.npz", ids=ids, vocab=vocab)
    return 30


def write_segmentation(data: Path, rng: np.random.Generator) -> int:
    """data/segmentation.npz: 60 noisy 16x16 images of one channel and their masks of 3
    classes: the background, a bright upright rectangle (1) and a dark flat one (2)."""
    images = 0.3 * rng.standard_normal((60, 1, 16, 16))
    masks = np.zeros((60, 16, 16), dtype=np.int64)
    for image, mask in zip(images, masks, strict=True):
        for label, (tall, wide), value in ((1, (6, 3), 1.0), (2, (3, 6), -1.0)):
            y, x = rng.integers(0, 16 - tall), rng.integers(0, 16 - wide)
            image[0, y : y + tall, x : x + wide] += value
            mask[y : y + tall, x : x + wide] = label
    np.savez(data / "segmentation.npz", images=images.astype(np.float32), masks=masks, classes=3)
    return 12


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
    "regression": write_regression,
    "multi-label": write_multi_label,
    "tokens": write_tokens,
    "dict-outputs": write_nothing,
    "segmentation": write_segmentation,
}
# The recipes that are appended to model.py, by the case that uses them.
MODELS = {"resnet-like": "resnet-like", "table": "table-model", "signals": "signals-model"}
MODELS |= {"regression": "regression-model", "multi-label": "table-model", "tokens": "tokens-model"}
MODELS |= {"dict-outputs": "dict-outputs-model", "segmentation": "segmentation-model"}
# The recipes that are appended to loss.py and task.py, by the case that uses them.
NOT_THE_EXAMPLES = ("regression", "multi-label", "tokens", "dict-outputs", "segmentation")
LOSSES = {name: f"{name}-loss" for name in NOT_THE_EXAMPLES}
TASKS = {name: f"{name}-task" for name in NOT_THE_EXAMPLES}
# The project's slow tests that see the task run for the two tasks whose targets the
# machinery's slow paths see differently from a classification's: float targets, a metric
# that falls (loss) beside one that rises (R²) in regression, and int64 inputs, tied weights
# and outputs per position in next-token prediction. They train the recipe's own task in new
# processes, and under torchrun, then evaluate, predict and export it (test_after_training)
# and send its metrics to the trackers across a stop (test_loggers). The other recipes run
# the fast tier, which holds every test of the data, model and task contract.
SLOW_TOO = {"regression", "tokens"}
TASK_SLOW_FILES = {"test_after_training.py", "test_loggers.py"}
# The other slow tests prove the process tree (signals, kill -9, a full disk, restarts, a node
# that leaves, N processes against one): the same code whatever the seams hold, which
# tests/test_project_suites.py proves in the rendered suites (about 85% of the slow tier).


def process_tree_tests(root: Path) -> list[str]:
    """--deselect flags for the slow tests of ``root``'s test files but TASK_SLOW_FILES."""
    files = sorted(path for path in (root / "tests").glob("test_*.py"))
    others = [path for path in files if path.name not in TASK_SLOW_FILES]
    return [f"--deselect={node_id}" for path in others for node_id in slow_tests(path)]


# Training flags of a case: the example data, smaller, for the epoch that trains.
FLAGS = {"resnet-like": ["--train-size", "256", "--val-size", "64"]}
FLAGS["dict-outputs"] = FLAGS["resnet-like"]

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
    data_recipes = {name for name, writer in WRITERS.items() if writer is not write_nothing}
    parts = set(MODELS.values()) | set(LOSSES.values()) | set(TASKS.values())
    assert set(recipes()) == data_recipes | parts


@pytest.fixture(scope="module")
def project(rendered) -> Path:
    return rendered(DEFAULT)


@pytest.mark.parametrize("name", list(WRITERS))
def test_recipe_passes_the_project_tests_and_trains(
    project, fork_server, tmp_path, name: str
) -> None:
    root = tmp_path / "project"
    shutil.copytree(project, root)
    files = {"data": {name: name}, "model": MODELS, "loss": LOSSES, "task": TASKS}
    seams = [root / "src" / PACKAGE / f"{file}.py" for file in files]
    for path, parts in zip(seams, files.values(), strict=True):
        if parts.get(name) in recipes():
            path.write_text(path.read_text() + "\n\n" + recipes()[parts[name]])
    (root / "data").mkdir()
    val_samples = WRITERS[name](root / "data", np.random.default_rng(0))
    # pytest and the commands forked from the fork server (tests/forkserver.py), torch
    # imported; the processes the suite's tests start are fresh interpreters.
    env = dict(fork_server.env)
    if name == "image-folder":
        fake = tmp_path / "fake"
        for path, text in FAKE_TORCHVISION.items():
            (fake / "torchvision" / path).parent.mkdir(parents=True, exist_ok=True)
            (fake / "torchvision" / path).write_text(text)
        env["PYTHONPATH"] = os.pathsep.join(["src", str(fake)])

    # The recipe as appended is clean but for the redefinitions and late imports.
    lint = [sys.executable, "-m", "ruff", "check", "--ignore", "F811,E402"]
    result = run([*lint, *map(str, seams)], cwd=root)
    assert result.returncode == 0, describe(result)

    pytest_args = [*FORKED, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rs"]
    if name in SLOW_TOO:  # -m "": the slow tests too, which the rendered pyproject leaves out
        select = ["-m", "", *process_tree_tests(root)]
        result = run([*pytest_args, *select, "-n", "2"], cwd=root, timeout=1500, **env)
    else:  # the fast part of the suite (the slow part starts training processes)
        result = run([*pytest_args, "-m", "not slow"], cwd=root, **env)
    assert result.returncode == 0, describe(result)
    if name == "resnet-like":  # the flags' tests skip, saying what the model lacks
        assert "has no backbone and head: --freeze-backbone is off" in result.stdout
        assert "has no set_activation_checkpointing" in result.stdout

    train = [*FORKED, "-m", f"{PACKAGE}.train", "--epochs", "1", "--device", "cpu"]
    train += [*FLAGS.get(name, []), "--batch-size", "8", "--out-dir", "runs/one"]
    result = run(train, cwd=root, **env)
    assert result.returncode == 0, describe(result)
    record = json.loads((root / "runs" / "one" / "metrics.jsonl").read_text())
    assert record["val_samples"] == val_samples

    if name == "memory-mapped":
        result = run([sys.executable, "-c", PICKLES_WITHOUT_THE_ARRAY], cwd=root)
        assert result.returncode == 0, describe(result)
    if name in TASKS:  # predict and export take the task's outputs, whatever they are
        command = [*FORKED, "-m", f"{PACKAGE}.predict", "--out-dir", "runs/one"]
        predicted = run([*command, "--input", "val", "--output", "p.csv"], cwd=root, **env)
        assert predicted.returncode == 0, describe(predicted)
        exported = run(
            [sys.executable, "-m", f"{PACKAGE}.export", "--out-dir", "runs/one"], cwd=root
        )
        assert exported.returncode == 0, describe(exported)
    if name == "segmentation":
        assert_masks_move_with_their_images(root, env, val_samples)
    if name in TASKS and name != "dict-outputs":  # no accuracy anywhere: line or record
        said = result.stdout.lower()
        assert "val_acc" not in said and "accuracy" not in said, result.stdout
        assert "val_acc" not in record and "val_top5_acc" not in record, record
        assert "class_1" not in (root / "p.csv").read_text()


# The flip of the segmentation recipe as a user might first write it: the image alone.
FLIP_THE_IMAGE_ALONE = """

def augment(image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    return image.flip(-1) if rng.random() < 0.5 else image
"""


def assert_masks_move_with_their_images(root: Path, env: dict, val_samples: int) -> None:
    """predict wrote a mask per image to an array beside the CSV; and a flip of the image
    alone fails a generated test, with the line that says what to change."""
    masks = np.load(root / "p.mask.npy")
    assert masks.shape == (val_samples, 16, 16) and masks.dtype == np.int64, masks.shape
    assert (root / "p.csv").read_text().splitlines()[0] == "index,confidence"
    with (root / "src" / PACKAGE / "data.py").open("a") as data:
        data.write(FLIP_THE_IMAGE_ALONE)
    test = "tests/test_loading.py::test_a_target_shaped_like_its_input_moves_with_it"
    result = run([*FORKED, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=root, **env)
    assert result.returncode == 1, describe(result)
    assert "take the target too, augment(input, rng, target)" in result.stdout, describe(result)


def least_squares_r2(table: np.ndarray) -> float:
    """R² on the validation rows of the recipe's split, of least squares on the training rows."""
    import torch

    order = torch.randperm(len(table), generator=torch.Generator().manual_seed(0)).numpy()
    train, val = order[: int(0.8 * len(order))], order[int(0.8 * len(order)) :]
    features = np.column_stack([table[:, :-1], np.ones(len(table))])
    weights = np.linalg.lstsq(features[train], table[train, -1], rcond=None)[0]
    errors = features[val] @ weights - table[val, -1]
    return 1 - (errors**2).sum() / ((table[val, -1] - table[val, -1].mean()) ** 2).sum()


def test_the_regression_recipe_beats_least_squares(project, fork_server, tmp_path) -> None:
    """Through the seams alone: 20 epochs reach a validation R² above that of a linear model;
    best.pt follows R² (the highest) and predict writes the values, not classes."""
    root = tmp_path / "project"
    shutil.copytree(project, root)
    for file, recipe in [
        ("data", "regression"),
        ("model", "regression-model"),
        ("loss", "regression-loss"),
        ("task", "regression-task"),
    ]:
        path = root / "src" / PACKAGE / f"{file}.py"
        path.write_text(path.read_text() + "\n\n" + recipes()[recipe])
    (root / "data").mkdir()
    write_regression(root / "data", np.random.default_rng(0))
    table = np.loadtxt(root / "data" / "regression.csv", delimiter=",", skiprows=1, ndmin=2)
    linear = least_squares_r2(table.astype(np.float32).astype(np.float64))
    train = [*FORKED, "-m", f"{PACKAGE}.train", "--epochs", "20", "--device", "cpu"]
    result = run([*train, "--batch-size", "32", "--out-dir", "runs/r"], cwd=root, **fork_server.env)
    assert result.returncode == 0, describe(result)
    lines = (root / "runs/r/metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    r2 = [record["val_r2"] for record in records]
    assert max(r2) > linear + 0.3, (r2, linear)
    best = f"best: epoch {1 + r2.index(max(r2))} of 20, val_r2 {max(r2):.4f}"
    assert best in result.stdout, result.stdout
    predict = [*FORKED, "-m", f"{PACKAGE}.predict", "--out-dir", "runs/r"]
    result = run([*predict, "--input", "val", "--output", "p.csv"], cwd=root, **fork_server.env)
    assert result.returncode == 0, describe(result)
    assert (root / "p.csv").read_text().splitlines()[0] == "index,prediction"
