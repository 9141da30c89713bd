"""Same seed, same numbers: a feature switched off at run time trains like its absence.

Each toggle adds code to the training loop, and the template writes some lines once per
combination of toggles (`{% if ddp and grad_accum %}`, say). An edit to one of those branches,
an RNG draw that one combination makes and another does not, or a different order of
operations, changes the numbers of some projects and not others. Here every project trains
the same short run with the same seed, its features switched off by the flags TABLE
(tests/combos.py) gives each (run_off: --precision fp32, say) or left off (no --profile, no
--resume, no torchrun), and its metrics.jsonl must equal the all-off project's: every loss,
accuracy and learning rate, at the full precision that JSON keeps, after two epochs whose
second starts from the first's weights. A last case switches on, as one process under
torchrun, the features that must not change the numbers on a CPU: DDP at one process,
SyncBatchNorm, deterministic kernels and the profiler.

Only the command line and the files a run writes are used, so the test holds whatever shape
the training code takes. On the CPU alone: CUDA picks kernels by itself, and the all-off
project has no deterministic mode to stop it, so its own runs may differ in the last bits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from combos import ALONE, BY_ID, DEFAULT, DEVICE, PACKAGE, TABLE, Combo, describe, run
from forkserver import PYTHON as FORKED
from forkserver import Server
from forkserver import torchrun as forked_torchrun

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        DEVICE != "cpu", reason="bit-identical runs on the CPU only; nox -s tests runs them"
    ),
]

# Two epochs: the second starts from the weights, optimizer state and RNG streams the first
# left. Dropout (the default 0.2) draws from the RNG, and --ema-decay adds the EMA's code
# (which ddp changes) to the comparison.
SAME_RUN = ["--epochs", "2", "--train-size", "256", "--val-size", "101", "--batch-size", "24"]
SAME_RUN += ["--num-workers", "0", "--width", "8", "--ema-decay", "0.9", "--device", "cpu"]
SAME_RUN += ["--seed", "0"]
# Fields that measure time, not training: they differ between any two runs.
TIMING = {"samples_per_sec"}
# Forked from the fork server (tests/forkserver.py), which imported torch once.
TRAIN = [*FORKED, "-m", f"{PACKAGE}.train"]
# All on, then each toggle alone (with the answers it needs): a failure names the toggle, and
# the code a toggle has only when others are off is compared too. The flags that switch a
# toggle off at run time are TABLE's run_off; the toggles without them (checkpointing,
# profiling, ddp) are off unless asked for (--resume, --profile, torchrun).
SWITCHED_OFF = list({c.id: c for c in [DEFAULT, *ALONE.values()]}.values())


def train(
    server: Server, root: Path, out_dir: Path, *extra: str, command: list[str] = TRAIN
) -> list[dict]:
    """Train the same run in the project at ``root``; its metrics.jsonl without timings."""
    args = [*command, *SAME_RUN, *extra, "--out-dir", str(out_dir)]
    result = run(args, cwd=root, **server.env)
    assert result.returncode == 0, describe(result)
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in r.items() if key not in TIMING} for r in records]


def differences(got: list[dict], want: list[dict]) -> list[str]:
    """Each field that differs from the all-off run's, by epoch, with both values."""
    if len(got) != len(want):
        return [f"{len(got)} epochs recorded, the all-off run recorded {len(want)}"]
    found = []
    for epoch, (a, b) in enumerate(zip(got, want, strict=True), start=1):
        for key in sorted(a.keys() | b.keys()):
            if a.get(key, "(missing)") != b.get(key, "(missing)"):
                found.append(
                    f"epoch {epoch} {key}: {a.get(key, '(missing)')!r}, all off: "
                    f"{b.get(key, '(missing)')!r}"
                )
    return found


@pytest.fixture(scope="module")
def all_off(rendered, fork_server, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The all-off project's records: what every other combination must reproduce."""
    out_dir = tmp_path_factory.mktemp("all-off") / "run"
    records = train(fork_server, rendered(BY_ID["none"]), out_dir)
    # The comparison means something only if the run trains: the loss moves between epochs.
    assert len(records) == 2 and records[0]["train_loss"] != records[1]["train_loss"], records
    assert {"train_loss", "val_loss", "val_acc", "lr"} <= records[0].keys(), records[0]
    return records


def test_another_seed_gives_other_numbers(rendered, fork_server, all_off, tmp_path) -> None:
    """The comparison notices a different RNG stream: another seed fails it on every epoch."""
    other = train(fork_server, rendered(BY_ID["none"]), tmp_path / "run", "--seed", "1")
    for epoch in range(2):
        assert other[epoch]["train_loss"] != all_off[epoch]["train_loss"]
        assert other[epoch]["val_loss"] != all_off[epoch]["val_loss"]


@pytest.mark.parametrize("combo", SWITCHED_OFF, ids=lambda combo: combo.id)
def test_switched_off_trains_like_rendered_without(
    rendered, fork_server, all_off, combo: Combo, tmp_path: Path
) -> None:
    records = train(fork_server, rendered(combo), tmp_path / "run", *combo.run_off())
    found = differences(records, all_off)
    flags = " ".join(combo.run_off()) or "no flags"
    assert not found, f"{combo.id} with {flags} trains unlike all off:\n" + "\n".join(found)


def test_neutral_features_on_train_like_all_off(
    rendered, fork_server, all_off, tmp_path: Path
) -> None:
    """DDP at one process (under torchrun, so the process group, the DDP wrapper and the
    all-reduces run), SyncBatchNorm (kept as BatchNorm on the CPU), deterministic kernels and
    the profiler: on a CPU none of them may change a number."""
    command = forked_torchrun(1, f"{PACKAGE}.train")
    # TABLE's neutral toggles switched on (ddp by torchrun), the others switched off.
    neutral = [
        flag for t in TABLE for flag in (t.run_on if t.neutral else t.run_off) if t.name != "ddp"
    ]
    assert {t.name for t in TABLE if t.neutral} >= {"ddp", "profiling"}, "see the docstring"
    out_dir = tmp_path / "run"
    records = train(fork_server, rendered(DEFAULT), out_dir, *neutral, command=command)
    assert (out_dir / "profile" / "trace.json").is_file(), "the profiler did not run"
    found = differences(records, all_off)
    assert not found, f"{' '.join(neutral)} under torchrun trains unlike all off:\n" + "\n".join(
        found
    )
