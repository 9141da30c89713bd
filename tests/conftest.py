"""Shared fixtures: each toggle combination is rendered once per test session and reused."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from combos import ALL_OFF, ALL_ON, DEVICE, Combo, render  # noqa: E402
from forkserver import Server  # noqa: E402

# The modules whose tests take longest, longest first (their summed seconds in a CI run on 2
# cores: project suites 1910, bare environment 200 in one test (375 under more load),
# mutations 180, own data 690 in 12 tests, mypy 250, across combinations 40, update 160,
# packaging 50, GPU bundle 30; the 184 end-to-end tests 400 between them). They run before
# all others: the test processes split the collected order between them and an idle one
# takes work from a busy one's queue (`nox -s tests` passes --dist worksteal), but a long
# test left to the end would run alone while the other process idles (11 of a run's 46
# minutes, before this order).
LONGEST_FIRST = [
    "test_project_suites",
    "test_bare_env",
    "test_mutations",
    "test_own_data",
    "test_typecheck",
    "test_across_combinations",
    "test_update",
    "test_packaging",
    "test_gpu_bundle",
    "test_e2e",
]


# `nox -s quick` (pytest --quick): the contributor's loop. These modules run whole; those of
# QUICK_PER_COMBO for the all-on and all-off renders alone (test_render's checks of every
# render too, ruff and the public-mechanisms scan among them), the project suites' fast tier
# only (test_project_suites) and mypy once (test_typecheck).
QUICK_MODULES = ["test_docs", "test_tables", "test_template_jinja", "test_forkserver"]
QUICK_PER_COMBO = ["test_render", "test_e2e", "test_project_suites", "test_typecheck"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="nox -s quick: the all-on and all-off renders, their fast suites, one mypy run, "
        "the docs checks",
    )


def quick_keeps(item: pytest.Item) -> bool:
    """Whether `pytest --quick` runs this test."""
    name = item.path.stem
    if name in QUICK_MODULES:
        return True
    if name not in QUICK_PER_COMBO:
        return False
    if name == "test_typecheck" or "every_render" in getattr(item, "fixturenames", ()):
        return True  # one mypy run, and every_render's two renders, under --quick
    combo = getattr(item, "callspec", None) and item.callspec.params.get("combo")
    return combo in (ALL_ON, ALL_OFF)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """LONGEST_FIRST's modules first, in that order; a module's tests stay together (its
    fixtures are set up once) and in their own order. Under --quick, only quick_keeps'."""
    if config.getoption("--quick"):
        dropped = [item for item in items if not quick_keeps(item)]
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if quick_keeps(item)]

    def rank(item: pytest.Item) -> int:
        name = item.path.stem
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


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
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for every mypy run of a test process (tests/test_typecheck.py,
    tests/test_names.py): torch's types are read once (about 25 s), and a render's own files
    are checked again only where their contents or imports differ."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture(scope="session")
def torchrun_nproc() -> int:
    """Processes per ddp run: 2 on the CPU (gloo), one per GPU on CUDA (nccl)."""
    if DEVICE == "cuda":
        import torch

        return max(torch.cuda.device_count(), 1)
    return 2


@pytest.fixture(scope="session")
def fork_server():
    """This test process's fork server (tests/forkserver.py): torch imported once, each run
    a fork of it. Its socket lies in a short folder of its own: a socket's path has at most
    107 bytes, which a deep temporary folder can pass."""
    with tempfile.TemporaryDirectory(prefix="fork-server-") as folder:
        server = Server(Path(folder))
        yield server
        server.close()
