"""Run each covering combination's own test suite, as its user would, inside the project."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from combos import ALL_OFF, ALL_ON, ALONE, COVERING, DEVICE, MOST, Combo, describe, run, slow_tests
from forkserver import PYTHON as FORKED

pytestmark = pytest.mark.suite

AFTER = "test_after_training.py"


def runs_slow_tests(combo: Combo) -> bool:
    """Whether this combination's suite includes its tests marked slow (real processes).

    All on (replicated, and sharded: its checkpoints are other code, whose slow tests run
    where its test files differ, see replicated_slow_tests), all off and each toggle alone run
    everything. The other combinations run their fast tests only: their slow tests
    (signals to process trees, full disks, resumes in new processes) repeat the all-on
    project's nearly step for step, and running them in every suite would double CI's time.
    On the CPU sync_bn alone is no exception: SyncBatchNorm runs on CUDA alone, so there its
    slow tests would run ddp alone's code, test for test (about 100 s of CI).
    """
    repeats_ddp_alone = DEVICE == "cpu" and combo == ALONE["sync_bn"]
    return combo in [ALL_ON, ALL_OFF, *ALONE.values(), MOST["sharding"]] and not repeats_ddp_alone


def proven_after_training(combo: Combo) -> bool:
    """Whether another suite proves this one's tests/test_after_training.py: a toggle alone
    without checkpointing but ddp and sharding. Their evaluate, predict and export are all
    off's, reading the weights all off's save_weights writes, but for what the toggle adds
    to them (bf16 autocast, deterministic kernels), which the all-on suite proves with
    checkpointing; ddp and sharding alone keep theirs: torchrun, and whole weights
    gathered from shards (about 160 s of CI)."""
    alone = combo in ALONE.values() and combo not in (ALONE["ddp"], ALONE["sharding"])
    return alone and not combo.checkpointing and combo != ALL_OFF


def replicated_slow_tests(sharded: Path, replicated: Path) -> list[str]:
    """--deselect flags for the all-on sharded suite: the slow tests of its test files that
    are the replicated all-on render's, letter for letter (test_checkpoint.py's, say).

    Its slow tier then runs where its tests differ: torchrun's process tree with sharded
    checkpoints (test_distributed.py), the after-training commands on a folder of shards,
    test_sharding.py. The files left out run one process, where the two renders' code
    differs only in how the model's and optimizer's state dicts are gathered and loaded, which
    the fast tier's resumes in this suite prove; their slow tests (signals, kill -9, a full
    disk) prove the same writes and stops as the replicated suite's (about 330 s of CI).
    """
    same = [
        path
        for path in sorted((sharded / "tests").glob("test_*.py"))
        if (replicated / "tests" / path.name).is_file()
        and path.read_bytes() == (replicated / "tests" / path.name).read_bytes()
    ]
    return [f"--deselect={node_id}" for path in same for node_id in slow_tests(path)]


@pytest.mark.parametrize("combo", COVERING, ids=lambda combo: combo.id)
def test_rendered_project_suite_passes(
    request, rendered, fork_server, combo: Combo, tmp_path: Path
) -> None:
    # A copy: the suite writes into its project (hypothesis's .hypothesis/, say), and the
    # shared render is read-only (test_render checks its files, in any order).
    root = shutil.copytree(rendered(combo), tmp_path / "project")
    assert (root / "tests").is_dir(), "every rendered project carries its own tests"
    # The project's pyproject puts src on the path; TEMPLATE_TEST_DEVICE passes through to
    # it unchanged, so a suite that wants to know the device can read it.
    # -m "" clears the rendered pyproject's default -m "not slow": every test runs.
    slow = runs_slow_tests(combo) and not request.config.getoption("--quick")
    select = ["-m", ""] if slow else ["-m", "not slow"]
    if slow and combo == MOST["sharding"]:
        select += replicated_slow_tests(root, rendered(ALL_ON))
    if slow and proven_after_training(combo):
        select += [f"--deselect={node}" for node in slow_tests(root / "tests" / AFTER)]
    # pytest itself forked from the fork server (tests/forkserver.py), torch imported: the
    # processes that the suite's tests start are fresh interpreters, as its user's are.
    result = run(
        [*FORKED, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select],
        cwd=root,
        # The all-on suites take 5 minutes on 2 idle cores and over 10 on busy ones: the
        # bound is for a suite that hangs, not a slow one.
        timeout=1800,
        TEMPLATE_TEST_DEVICE=DEVICE,
        **fork_server.env,
    )
    assert result.returncode == 0, describe(result)
