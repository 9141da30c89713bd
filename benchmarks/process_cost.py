"""How much of a test run is Python interpreters starting: every interpreter the run starts,
the CPU each used, and the least wall time the machine's cores allow for them alone.

    python benchmarks/process_cost.py              # the all-on render's pytest -m "" (5 min)
    python benchmarks/process_cost.py -- ARGS...   # the template's own pytest ARGS, here

It makes a throwaway virtual environment over this one (the same packages: a .pth file adds
this environment's site-packages) whose interpreter records, in one log, each interpreter's
start and, at its exit, its own CPU seconds and whether it imported torch. The run under test
uses that interpreter (sys.executable), and so does every process it starts the usual way
(`sys.executable -m ...`, torchrun's ranks, pytest-xdist's workers): each fresh interpreter
is counted. A process forked from one, such as the template tests' fork server's runs
(tests/forkserver.py), is not a fresh interpreter and is not counted as one. A process that
was killed (SIGKILL) has a start and no exit: it is counted apart, and not in the floor.

It prints the run's wall and CPU seconds (all of its processes), its fresh interpreters
that imported torch, their CPU, and the floor: the CPU of a fresh `import torch` (measured
first, best of 3) for each of them, over the machine's cores (2 on CI's). Each of them paid at
least that, so no scheduling gets the run's wall time under the floor while every one of
those processes starts afresh, whatever is done about the rest.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from combos import ALL_ON, QUESTION_DEFAULTS, REPO_ROOT, render  # noqa: E402

CORES = os.cpu_count() or 1  # 2 on the CI machines

# The recorder, imported by a .pth file in every interpreter of the throwaway environment. A
# line at start, a line at exit; a failure to write (a test that drops to another user, or
# leaves no file descriptor free) loses that line and changes nothing else.
RECORDER = """
import atexit, os, resource, sys

LOG = {log!r}
_PID = os.getpid()


def _write(what):
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    torch = "torch" if "torch" in sys.modules else "-"
    seconds = cpu.ru_utime + cpu.ru_stime
    line = f"{{what}}\\t{{os.getpid()}}\\t{{_PID}}\\t{{seconds:.3f}}\\t{{torch}}\\n"
    try:
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.write(fd, line.encode())
        os.close(fd)
    except OSError:
        pass


_write("start")
atexit.register(_write, "exit")
"""


def environment(folder: Path, log: Path) -> Path:
    """A virtual environment in ``folder`` over this one, its interpreters recorded in ``log``:
    returns its python."""
    venv.create(folder, with_pip=False, symlinks=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": folder, "platbase": folder}))
    here = sysconfig.get_path("purelib")
    # .pth files run in name order: this environment's packages (and their own .pth files)
    # first, the recorder after them.
    (site / "a_packages.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    (site / "process_cost_recorder.py").write_text(RECORDER.format(log=str(log)))
    (site / "z_recorder.pth").write_text("import process_cost_recorder\n")
    log.touch()
    log.chmod(0o666)  # a test that drops to another user still records
    return folder / "bin" / "python"


def import_cost(python: Path) -> float:
    """CPU seconds of a fresh interpreter that imports torch and ends: the least that each
    interpreter of the run that imported torch paid (best of 3)."""
    costs = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(python), "-c", "import torch"], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        costs.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return min(costs)


def measure(command: list[str], cwd: Path, python: Path, log: Path) -> None:
    """Run ``command`` (its python the recording one) and print what its interpreters cost."""
    each = import_cost(python)
    log.write_text("")  # import_cost's interpreters are not the run's
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=os.environ | {"OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    started: set[str] = set()
    ended: dict[str, tuple[float, bool]] = {}
    for line in log.read_text().splitlines():
        what, pid, first_pid, seconds, torch = line.split("\t")
        if what == "start":
            started.add(pid)
        elif pid == first_pid:  # a forked process inherits the exit hook: not counted
            ended[pid] = (float(seconds), torch == "torch")
    with_torch = [seconds for seconds, torch in ended.values() if torch]
    killed = started - ended.keys()
    paid = len(with_torch) * each
    print(f"exit code {done.returncode}; wall {wall:.0f} s, CPU {cpu:.0f} s (every process)")
    print(f"fresh interpreters: {len(started)}; {len(with_torch)} imported torch and ended,")
    print(f"  with {sum(with_torch):.0f} CPU s between them ({cpu and sum(with_torch) / cpu:.0%})")
    print(f"  {len(killed)} were killed (their CPU is not recorded, nor counted below)")
    print(f"import torch alone: {each:.2f} CPU s; for those {len(with_torch)} interpreters")
    print(f"  {paid:.0f} CPU s: on {CORES} cores a floor of {paid / CORES:.0f} s wall")
    print(f"process_cost_wall_s={wall:.0f} process_cost_cpu_s={cpu:.0f}")
    print(f"torch_interpreters={len(with_torch)} import_torch_cpu_s={each:.2f}")
    print(f"import_floor_s={paid / CORES:.0f}")
    if done.returncode != 0:
        raise SystemExit(done.returncode)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="process-cost-") as tmp:
        log = Path(tmp) / "interpreters.tsv"
        python = environment(Path(tmp) / "venv", log)
        if sys.argv[1:2] == ["--"]:
            print(f"the template's suite: pytest {' '.join(sys.argv[2:])}")
            measure([str(python), "-m", "pytest", *sys.argv[2:]], REPO_ROOT, python, log)
            return
        project = render(
            {"project_name": "Image Classifier", **QUESTION_DEFAULTS, **ALL_ON.answers},
            Path(tmp) / "project",
        )
        print(f'the all-on render ({ALL_ON.id}): pytest -m "" -n auto')
        command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", "-n"]
        measure([*command, "auto"], project, python, log)


if __name__ == "__main__":
    main()
