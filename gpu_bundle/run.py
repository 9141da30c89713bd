"""Train and test every rendered combination in this bundle on this machine, and record it.

    python run.py --out DIR [--device cuda|cpu] [--quick]

Needs Python, torch, numpy and pytest; not copier or nox (`nox -s gpu-bundle` rendered the
projects beside this file). For each combination it trains a short run (ddp ones under
torchrun: one process per visible GPU on nccl, or two gloo processes on the CPU) and runs the
project's own test suite. The all-on project's tests marked gpu are the CUDA checks (no
host sync in the step, SyncBatchNorm, bf16 and fp16 with GradScaler and fused AdamW,
deterministic runs, --compile, the profiler, mid-epoch resume: tests/test_gpu.py and the
features' own test files); each is reported on its own line, as skip on the CPU. On CUDA
the suites leave out the tests marked slow (they start training processes on the CPU,
which CI covers) unless --slow. --quick trains only the all-on, all-on sharded and all-off
projects and runs only the all-on project's CUDA checks (pytest -m gpu).

Writes DIR/results.json (a list of {name, status, seconds, detail}, status pass, fail or
skip) and DIR/results.md (the same as a table). Exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Result name -> the all-on project's test (marked gpu) that checks it; no other test of the
# project has that name.
CHECKS = {
    "cuda: no host sync in a training step": "test_no_host_sync_inside_the_training_step",
    "cuda: fused AdamW, pinned memory": "test_adamw_is_fused_on_cuda",
    "cuda: bf16 autocast": "test_mixed_precision_trains_on_cuda[bf16]",
    "cuda: fp16 autocast + GradScaler + fused AdamW": "test_mixed_precision_trains_on_cuda[fp16]",
    "cuda: SyncBatchNorm conversion (nccl)": "test_sync_batchnorm_conversion_on_cuda",
    "cuda: one seed, bit-identical (deterministic)": "test_one_seed_is_bit_identical_on_cuda",
    "cuda: --compile": "test_compiled_model_trains_on_cuda",
    "cuda: profiler trace with CUDA kernels": "test_profiler_records_cuda_kernels",
    "cuda: mid-epoch resume, bit-identical": "test_resume_mid_epoch_on_cuda_is_bit_identical",
}
# Short runs: the whole bundle must fit in a few minutes of GPU time. On the CPU, the short run
# of the template's end-to-end tests, which build.py writes into combos.json.
CUDA_RUN = ["--epochs", "2", "--train-size", "4096", "--val-size", "1000"]
CUDA_RUN += ["--batch-size", "128", "--num-workers", "4", "--log-every", "8"]


def result(name: str, status: str, seconds: float, detail: str) -> dict:
    return {"name": name, "status": status, "seconds": round(seconds, 1), "detail": detail}


def environment(device: str) -> dict[str, str]:
    """The environment for the projects' processes: on the CPU, no GPU is visible at all."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def execute(command: list[str], cwd: Path, env: dict, timeout: float, log: Path):
    """Run a command, its output kept in ``log``; (exit code or None on timeout, output, s)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as error:
        output = error.output or ""  # bytes, on some Pythons, despite text=True
        output = output if isinstance(output, str) else output.decode(errors="replace")
        code, output = None, f"{output}\ntimed out after {timeout:.0f} s"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(command)}\n{output}")
    return code, output, time.perf_counter() - start


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def machine(torch, device: str) -> dict:
    """What ran the bundle: torch, CUDA and the GPUs."""
    parts = [f"torch {torch.__version__}", f"python {sys.version.split()[0]}"]
    if device == "cuda":
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        parts += [f"CUDA {torch.version.cuda}", f"{len(gpus)} x {gpus[0]}"]
    else:
        parts += [f"CPU only ({os.cpu_count()} cores)"]
    return result("environment", "pass", 0.0, ", ".join(parts))


def train(combo: dict, device: str, nproc: int, out: Path, manifest: dict) -> dict:
    """Train one combination for a short run; report samples/s and peak GPU memory."""
    name = f"train: {combo['id']}"
    project = HERE / "projects" / combo["id"]
    run_dir = out / "runs" / combo["id"]
    report = out / "reports" / combo["id"]
    report.parent.mkdir(parents=True, exist_ok=True)
    short = CUDA_RUN if device == "cuda" else [*manifest["short_run"], "--log-every", "4"]
    # What exercises each feature that is on (tests/combos.py's TABLE, written by build.py).
    flags = [*short, *combo["run_flags"], "--device", device, "--out-dir", str(run_dir)]
    measure = [str(HERE / "measure.py"), str(report), manifest["package"]]
    if combo["ddp"]:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command = [*launcher, f"--nproc-per-node={nproc}", *measure, *flags]
    else:
        command = [sys.executable, *measure, *flags]
    env = environment(device)
    env["PYTHONPATH"] = str(project / "src")
    log = out / "logs" / f"{combo['id']}.train.log"
    code, output, seconds = execute(command, project, env, 600, log)
    if code != 0:
        return result(name, "fail", seconds, f"exit {code}: {tail(output)}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    ranks = [json.loads(path.read_text()) for path in report.parent.glob(f"{report.name}.rank*")]
    peaks = [rank["peak_bytes"] for rank in ranks if rank["peak_bytes"] is not None]
    processes = nproc if combo["ddp"] else 1
    detail = f"{last['samples_per_sec']:.0f} samples/s, "
    detail += f"peak GPU memory {max(peaks) / 2**20:.0f} MiB, " if peaks else ""
    detail += f"val_acc {last['val_acc']:.3f}, {processes} process{'es' * (processes > 1)}"
    return result(name, "pass", seconds, detail)


def suite(combo: dict, device: str, slow: bool, out: Path, only: str) -> tuple[dict, Path]:
    """Run one project's own tests (GPU tests included), or ``only`` those with that marker;
    returns its result and JUnit file."""
    project = HERE / "projects" / combo["id"]
    junit = out / "junit" / f"{combo['id']}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={junit}", f"--basetemp={out / 'pytest' / combo['id']}"]
    # The project's pyproject leaves the slow tests out by default; -m "" brings them back.
    command += ["-m", only or ("not slow" if not slow else "")]
    log = out / "logs" / f"{combo['id']}.tests.log"
    code, output, seconds = execute(command, project, environment(device), 1200, log)
    status = "pass" if code == 0 else "fail"
    return result(f"tests: {combo['id']}", status, seconds, tail(output, 1)), junit


def checks(junit: Path) -> list[dict]:
    """The CUDA checks, one result each, read from the all-on project's JUnit report."""
    cases = {}
    if junit.exists():
        for case in ElementTree.parse(junit).iter("testcase"):
            cases[case.get("name")] = case
    results = []
    for name, test in CHECKS.items():
        case = cases.get(test)
        if case is None:
            results.append(result(name, "fail", 0.0, f"{test} did not run"))
            continue
        seconds = float(case.get("time", 0))
        problem = next((e for e in case if e.tag in ("failure", "error")), None)
        skipped = next((e for e in case if e.tag == "skipped"), None)
        if problem is not None:
            results.append(result(name, "fail", seconds, tail(problem.get("message", ""), 1)))
        elif skipped is not None:
            results.append(result(name, "skip", seconds, skipped.get("message", "")))
        else:
            results.append(result(name, "pass", seconds, test))
    return results


def write(results: list[dict], out: Path) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| check | status | seconds | detail |", "| --- | --- | ---: | --- |"]
    for r in results:
        detail = r["detail"].replace("|", "\\|")
        lines.append(f"| {r['name']} | {r['status']} | {r['seconds']:.1f} | {detail} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json, results.md, runs")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available")
    parser.add_argument("--quick", action="store_true", help="fewer projects and tests")
    parser.add_argument("--slow", action="store_true", help="tests marked slow also on CUDA")
    parser.add_argument("--jobs", type=int, help="test suites run at once (default: CPUs / 2)")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device: this machine has no CUDA GPU; use --device cpu")
    out = Path(args.out).resolve()
    if (out / "results.json").exists():
        parser.error(f"argument --out: {out} already holds results; choose a new folder")
    for folder in ["junit", "pytest"]:
        (out / folder).mkdir(parents=True, exist_ok=True)
    manifest = json.loads((HERE / "combos.json").read_text())
    combos = manifest["combos"]
    if args.quick:
        combos = [combo for combo in combos if combo["id"] in manifest["quick"]]
    nproc = torch.cuda.device_count() if device == "cuda" else 2
    jobs = args.jobs or max(1, (os.cpu_count() or 2) // 2)

    results = [machine(torch, device)]

    def record(entry: dict) -> None:
        results.append(entry)
        print(f"{entry['status']:<4}  {entry['seconds']:6.1f}s  {entry['name']}: {entry['detail']}")
        write(results, out)  # after each step: a run cut short still leaves its results

    record(results.pop())
    # One training run at a time: a ddp run takes every GPU.
    for combo in combos:
        record(train(combo, device, nproc, out, manifest))
    # The suites in parallel: their training processes run on the CPU, their GPU tests are short.
    # --quick: the all-on project's CUDA checks alone (marked gpu). The tests marked
    # slow train in processes pinned to the CPU, which CI covers: on CUDA only with --slow.
    slow = args.slow or (device == "cpu" and not args.quick)
    tested = [c for c in combos if not args.quick or c["id"] == manifest["default"]]
    only = "gpu" if args.quick else ""
    with ThreadPoolExecutor(jobs) as pool:
        suites = list(pool.map(lambda combo: suite(combo, device, slow, out, only), tested))
    junits = {}
    for combo, (entry, junit) in zip(tested, suites, strict=True):
        record(entry)
        junits[combo["id"]] = junit
    for entry in checks(junits[manifest["default"]]):
        record(entry)
    failed = [r["name"] for r in results if r["status"] == "fail"]
    print(f"{len(results)} results, {len(failed)} failed: {out / 'results.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
