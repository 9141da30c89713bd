"""Shared fixtures: each toggle combination is rendered once per test session and reused."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from combos import DEVICE, Combo, render  # noqa: E402


@pytest.fixture(scope="session")
def renders_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every test process of this session shares: under pytest-xdist, the parent of
    the workers' own temporary folders (made for this session alone), else this process's."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    (shared / "renders").mkdir(exist_ok=True)
    return shared / "renders"


@pytest.fixture(scope="session")
def rendered(renders_dir: Path):
    """A function combo -> Path of that combination rendered: once per session, whichever
    test process asks first (the template cannot change during a session).

    A process renders into a folder of its own and renames it into place; if another process
    got there first, the rename fails and its render is the one used. Tests treat these
    projects as read-only: one that writes into a project copies it first.
    """

    def get(combo: Combo) -> Path:
        dest = renders_dir / combo.id
        if not dest.is_dir():
            mine = renders_dir / f".{combo.id}.{os.getpid()}"
            shutil.rmtree(mine, ignore_errors=True)
            render(combo.answers, mine)
            try:
                mine.rename(dest)
            except OSError:  # another process renamed its render into place first
                shutil.rmtree(mine)
        return dest

    return get


@pytest.fixture(scope="session")
def torchrun_nproc() -> int:
    """Processes per ddp run: 2 on the CPU (gloo), one per GPU on CUDA (nccl)."""
    if DEVICE == "cuda":
        import torch

        return max(torch.cuda.device_count(), 1)
    return 2
