"""Shared fixtures: each toggle combination is rendered once per test process and reused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from combos import DEVICE, Combo, render  # noqa: E402


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory):
    """A function combo -> Path of that combination rendered; one render per process."""
    cache: dict[str, Path] = {}

    def get(combo: Combo) -> Path:
        if combo.id not in cache:
            cache[combo.id] = render(combo.answers, tmp_path_factory.mktemp(combo.id) / "project")
        return cache[combo.id]

    return get


@pytest.fixture(scope="session")
def torchrun_nproc() -> int:
    """Processes per ddp run: 2 on the CPU (gloo), one per GPU on CUDA (nccl)."""
    if DEVICE == "cuda":
        import torch

        return max(torch.cuda.device_count(), 1)
    return 2
