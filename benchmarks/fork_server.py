"""What an end-to-end short run costs in fresh interpreters and forked from the fork server.

    python benchmarks/fork_server.py            # about two minutes on 2 CPU cores
    python benchmarks/fork_server.py --runs 6

tests/test_e2e.py trains every combination once (combos.SHORT_RUN): a plain process, or
torchrun with 2 ranks for a ddp one. It runs each through tests/forkserver.py, whose server
imported torch once. This renders the all-off project (one process) and the all-on one
(torchrun, 2 ranks), and runs each short run both ways in turns, so that a busy machine slows
both alike. It prints the median wall seconds and CPU seconds (every process of the run:
torchrun, its ranks, their loaders' workers) of each, and their ratios.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from combos import ALL_OFF, ALL_ON, PACKAGE, SHORT_RUN, Combo, render  # noqa: E402
from forkserver import PYTHON, Server, torchrun  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def command(combo: Combo, forked: bool) -> list[str]:
    """The short run's command, as tests/test_e2e.py's command() makes it (forked) or as a
    user types it (fresh)."""
    module = f"{PACKAGE}.train"
    if forked:
        return torchrun(2, module) if combo.ddp else [*PYTHON, "-m", module]
    if not combo.ddp:
        return [sys.executable, "-m", module]
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return [sys.executable, *launch, "-m", module]


def cpu_seconds(server: Server) -> float:
    """CPU seconds of this process's children ended so far, and the server's and its own."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    stat = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    server_ticks = sum(int(field) for field in stat[11:15])  # utime stime cutime cstime
    return usage.ru_utime + usage.ru_stime + server_ticks / TICKS


def measure(
    root: Path, combo: Combo, forked: bool, server: Server, out: Path
) -> tuple[float, float]:
    env = os.environ | {"PYTHONPATH": "src", "OMP_NUM_THREADS": "1"} | server.env
    args = [*command(combo, forked), *SHORT_RUN, *combo.run_flags(), "--out-dir", str(out)]
    if combo.ddp:
        args += ["--dist-timeout", "300"]
    cpu, start = cpu_seconds(server), time.perf_counter()
    subprocess.run(args, cwd=root, env=env, check=True, capture_output=True)
    # The server reaps its runs as they end: their seconds reach it a moment later.
    time.sleep(0.2)
    return time.perf_counter() - start - 0.2, cpu_seconds(server) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs of each command each way")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        server = Server(tmp)
        try:
            for combo, what in [(ALL_OFF, "one process"), (ALL_ON, "torchrun, 2 ranks")]:
                root = tmp / combo.id
                render(combo.answers, root)
                seen: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
                for i in range(runs):
                    for forked in (False, True):
                        out = tmp / f"run-{combo.id}-{forked}-{i}"
                        seen[forked].append(measure(root, combo, forked, server, out))
                fresh, forked_ = (
                    [statistics.median(column) for column in zip(*seen[way], strict=True)]
                    for way in (False, True)
                )
                print(f"{combo.id} ({what}), median of {runs}:")
                print(f"  fresh interpreters  {fresh[0]:5.2f} s wall  {fresh[1]:5.2f} s CPU")
                print(f"  fork server         {forked_[0]:5.2f} s wall  {forked_[1]:5.2f} s CPU")
                print(
                    f"  ratio (fresh / fork server): wall {fresh[0] / forked_[0]:.2f}x, "
                    f"CPU {fresh[1] / forked_[1]:.2f}x"
                )
        finally:
            server.close()


if __name__ == "__main__":
    main()
