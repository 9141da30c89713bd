"""What the end-to-end test matrix costs per toggle combination, and how it grows; and what
one run of the template's suite cost, per test file and per rendered suite.

    python benchmarks/suite_cost.py          # about a minute on 2 CPU cores
    python benchmarks/suite_cost.py --report build/test-durations.xml

``--report`` reads the JUnit XML that ``nox -s tests`` writes (CI's run, ``.ci/run`` prints
the report after it) and prints, longest first, the seconds of each test file (the sum of
its tests' durations, which is the work the 2 test processes share, not the wall time), the
share of the whole, and each rendered project's suite (tests/test_project_suites.py, one
line a combination). Compare two runs' reports to see what a change added.

For k = 1, 2 and 4 combinations it renders each combination from the working tree (as the
tests do, with tests/combos.py) and trains it end to end as the end-to-end tests do
(``combos.SHORT_RUN``: one epoch of 256 samples), one after another, and prints the wall
time of the batch and the time per combination. The sets are nested (the first k of one
list), and the combinations are single-process ones of similar size (every toggle off, then
pairs of toggles on), so that a constant time per combination means the cost grows linearly
in the number of combinations. Nothing is shared or cached between combinations: each renders
afresh into its own folder and trains in its own process.

A straight-line fit, seconds = fixed + per_combination * k, gives the cost of one more
combination, and the growth exponent b in time ~ k**b, through k = 1 and k = 4, is printed
last: 1.0 is linear; well above 1 (say 1.15) something grows faster than the matrix and
should be found. One warm-up combination runs first, untimed.

Last, the time a user waits for `pytest` (its default: the fast tier) in a fresh all-on
render, with the CPU seconds it used and the load average, since a busy machine stretches
the wall time: the rendered README states the figure.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from combos import BY_ID, DEFAULT, PACKAGE, SHORT_RUN, render  # noqa: E402

OFF = BY_ID["none"].answers
COMBINATIONS = [
    OFF,
    OFF | {"amp": True, "grad_accum": True},
    OFF | {"checkpointing": True, "deterministic": True},
    OFF | {"profiling": True, "amp": True},
]


def render_and_train(answers: dict, dest: Path) -> None:
    render(answers, dest)  # the working tree, as the tests render it
    env = os.environ | {"PYTHONPATH": str(dest / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", f"{PACKAGE}.train", *SHORT_RUN]
    command += ["--device", "cpu", "--out-dir", str(dest / "run")]
    subprocess.run(command, cwd=dest, env=env, check=True, capture_output=True)
    if not (dest / "run" / "metrics.jsonl").exists():
        raise RuntimeError(f"{dest}: training wrote no metrics.jsonl")


def main() -> None:
    seconds = {}
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        # Untimed: the first render and run pay one-time costs (imports, disk caches) that
        # would otherwise make k = 1 look dear and the growth look better than linear.
        render_and_train(OFF, Path(tmp) / "warm-up")
        for k in (1, 2, 4):
            start = time.perf_counter()
            for i, answers in enumerate(COMBINATIONS[:k]):
                render_and_train(answers, Path(tmp) / f"k{k}-{i}")
            seconds[k] = time.perf_counter() - start
            print(f"k={k}: {seconds[k]:6.1f} s in all, {seconds[k] / k:5.2f} s per combination")
    growth = math.log(seconds[4] / seconds[1]) / math.log(4)
    # Least squares of seconds = fixed + per_combination * k over k = 1, 2, 4.
    ks = list(seconds)
    mean_k, mean_s = sum(ks) / len(ks), sum(seconds.values()) / len(ks)
    per_combination = sum((k - mean_k) * (seconds[k] - mean_s) for k in ks) / sum(
        (k - mean_k) ** 2 for k in ks
    )
    fixed = mean_s - per_combination * mean_k
    print(f"fit: {fixed:.2f} s + {per_combination:.2f} s per combination")
    print(f"suite_cost_per_combination_s={per_combination:.2f} growth_exponent={growth:.2f}")
    default_pytest()


def default_pytest() -> None:
    """`pytest` as a user runs it in the all-on render: wall and CPU seconds."""
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as tmp:
        project = render(DEFAULT.answers, Path(tmp) / "project")
        before = os.times()
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=project,
            env=os.environ | {"OMP_NUM_THREADS": "1"},
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"pytest failed in the all-on render:\n{done.stdout[-3000:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    summary = done.stdout.strip().splitlines()[-1]
    load = os.getloadavg()[0]
    print(f"default pytest, all-on render: {summary}")
    print(f"default_pytest_wall_s={wall:.1f} default_pytest_cpu_s={cpu:.1f} load_1min={load:.1f}")


def report(junit_xml: Path) -> None:
    """Seconds per test file and per rendered suite, from one run's JUnit XML."""
    import xml.etree.ElementTree as ET
    from collections import Counter

    per_file: Counter[str] = Counter()
    per_suite: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        seconds = float(case.get("time", 0))
        file = case.get("classname", "?").replace(".", "/") + ".py"
        per_file[file] += seconds
        tests[file] += 1
        name = case.get("name", "")
        if file.endswith("test_project_suites.py") and "[" in name:
            per_suite[name[name.index("[") + 1 : -1]] += seconds
    total = sum(per_file.values())
    print(f"{total:8.0f} s in all, {sum(tests.values())} tests, {junit_xml}")
    print(f"{'seconds':>8} {'share':>6} {'tests':>6}  file")
    for file, seconds in per_file.most_common():
        print(f"{seconds:8.0f} {seconds / total:6.1%} {tests[file]:6d}  {file}")
    if per_suite:
        print(f"\n{'seconds':>8}  rendered project suite (tests/test_project_suites.py)")
        for suite, seconds in per_suite.most_common():
            print(f"{seconds:8.0f}  {suite}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:
        report(Path(sys.argv[2]))
    else:
        main()
