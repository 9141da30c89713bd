"""The archive of checkpoints that each released version wrote (tests/data/checkpoints), and
the script that writes a new version's: `python tests/release_checkpoints.py` (`--all`: every
version's again).

For each version that CHANGELOG.md names with its template commit, and each combination of
RUNS (the ones whose checkpoints differ in layout: replicated, with each process's random
streams, and sharded, a folder of DCP shards), it renders the release from a clone of this
repository at that commit, starts ARGV under torchrun with 2 processes, stops it by a real
SIGTERM on every process after step STOP (mid-epoch 1 of 2), and keeps the checkpoint that
the stop wrote, as `<version>/<combination id>/checkpoints/`. tests/test_update.py resumes
each one with this checkout's render of the same answers, with `--resume auto` and no other
flag: what a user whose run was preempted across `copier update` does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from combos import ALL_ON, PACKAGE, REPO_ROOT, render

ARCHIVE = Path(__file__).parent / "data" / "checkpoints"
RUNS = {combo.id: combo for combo in (ALL_ON, ALL_ON.with_("sharding"))}
# Small (a checkpoint of about 40 KB), and with every part of a run's state: the EMA, early
# stopping's counters, the loss scaler's absence under bf16, micro-batches.
ARGV = ["--epochs", "2", "--train-size", "64", "--val-size", "16", "--batch-size", "16"]
ARGV += ["--micro-batch", "8", "--width", "4", "--num-workers", "0", "--device", "cpu"]
ARGV += ["--ema-decay", "0.9", "--early-stop-patience", "3", "--dist-timeout", "300"]
STOP = 2  # of 4 optimizer steps an epoch
# Every process stops at step STOP: the processes agree on a stop about once a second, so
# the steps after the first are slowed down until they agree at each one.
STOPPED = f"""
import os, signal, sys, time
from {PACKAGE} import train
step = train.optimizer_step
def stop_at(run):
    step(run)
    time.sleep(1.2)
    if run.state.step == {STOP}:
        os.kill(os.getpid(), signal.SIGTERM)
train.optimizer_step = stop_at
sys.exit(train.main(sys.argv[1:]))
"""


def releases() -> list[tuple[str, str]]:
    """(version, template commit) of each release that CHANGELOG.md names, newest first."""
    heading = r"^## \[(\d+\.\d+\.\d+)\] - .*, template commit ([0-9a-f]{7,40})$"
    return re.findall(heading, (REPO_ROOT / "CHANGELOG.md").read_text(), flags=re.MULTILINE)


def archived() -> list[Path]:
    """The out-dirs of the archive: <version>/<combination id>."""
    return sorted(path.parent for path in ARCHIVE.glob("*/*/checkpoints"))


def write(version: str, commit: str, combo_id: str, work: Path) -> None:
    """Render the release, train until the stop, and keep the checkpoint it wrote."""
    clone = work / f"template-{commit}"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
    project = render(
        RUNS[combo_id].answers, work / f"{version}-{combo_id}", template=clone, vcs_ref=commit
    )
    (project / "stopped.py").write_text(STOPPED)
    out_dir = project / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node=2", "stopped.py", *ARGV, "--out-dir", str(out_dir)]
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert re.search(r"exitcode\s*:\s*75", done.stderr), done.stderr[-3000:]
    kept = ARCHIVE / version / combo_id / "checkpoints"
    shutil.rmtree(kept.parent, ignore_errors=True)
    kept.mkdir(parents=True)
    last = out_dir / "checkpoints" / "last.pt"
    if last.is_symlink():  # a folder of shards, which last.pt names
        target = last.parent / last.readlink()
        shutil.copytree(target, kept / target.name)
        (kept / "last.pt").symlink_to(target.name)
    else:
        shutil.copyfile(last, kept / "last.pt")


def main() -> None:
    """The versions the archive lacks; with --all, every version again."""
    with tempfile.TemporaryDirectory() as folder:
        for version, commit in releases():
            for combo_id in RUNS:
                if (ARCHIVE / version / combo_id).exists() and "--all" not in sys.argv:
                    continue
                write(version, commit, combo_id, Path(folder))
                print(f"{version} {combo_id}: written")


if __name__ == "__main__":
    main()
