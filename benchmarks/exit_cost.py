"""What a command's exit costs with and without the interpreter's last garbage collection.

    python benchmarks/exit_cost.py            # about a minute on 2 CPU cores
    python benchmarks/exit_cost.py --runs 20

The rendered tests' ``sitecustomize.py`` registers ``atexit.register(gc.freeze)`` in every
process they start, so that its exit does not walk every object torch made. This renders
the all-off project and runs two commands, each both ways in turns (so that a busy machine
slows both alike): ``import`` (the package's train module imported, then exit: what
``--help`` and every start-up error costs) and ``train`` (the end-to-end tests' short run,
``combos.SHORT_RUN``). "with" is the same process with the freeze registered first, as the
tests' sitecustomize does; "without" is the package alone. It prints the median wall
seconds of each and their ratio; the seconds saved are those of the exit of every process
that the tests of a render start.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from combos import BY_ID, PACKAGE, SHORT_RUN, render  # noqa: E402

# argv[1]: "with" or "without"; the rest: train's flags, or nothing to import and exit.
COMMAND = f"""
import atexit, gc, runpy, sys
if sys.argv[1] == "with":
    atexit.register(gc.freeze)
import {PACKAGE}.train
if len(sys.argv) > 2:
    sys.argv = ["train", *sys.argv[2:]]
    runpy.run_module("{PACKAGE}.train", run_name="__main__")
"""


def seconds(root: Path, way: str, flags: list[str]) -> float:
    env = os.environ | {"PYTHONPATH": str(root / "src"), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", COMMAND, way, *flags],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs of each command each way")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="exit-cost-") as tmp:
        root = render(BY_ID["none"].answers, Path(tmp) / "project")
        train = [*SHORT_RUN, "--device", "cpu", "--out-dir"]
        commands = {"import": lambda i: [], "train": lambda i: [*train, f"{tmp}/run-{i}"]}
        seconds(root, "with", [])  # untimed: the first start pays for cold disk caches
        for name, flags in commands.items():
            times: dict[str, list[float]] = {"with": [], "without": []}
            for i in range(runs):
                for way in times:
                    times[way].append(seconds(root, way, flags(f"{way}-{i}")))
            with_, without = (statistics.median(times[way]) for way in times)
            print(
                f"{name:>6}: {with_:5.2f} s with the freeze, {without:5.2f} s without "
                f"(median of {runs}); without / with = {without / with_:.2f}, "
                f"{without - with_:.2f} s saved per process"
            )


if __name__ == "__main__":
    main()
