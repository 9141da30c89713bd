"""Check the rendered projects in this bundle on this machine's GPU, within a time budget,
and record each result as it ends.

    python run.py --out DIR [--device cuda|cpu] [--quick] [--budget SECONDS]

Needs Python, torch, numpy and pytest; not copier or nox (`nox -s gpu-bundle` rendered the
projects beside this file). In order, most telling first, so that a run cut at its limit
keeps what matters:

1. the machine: GPU, driver, CUDA, cuDNN, NCCL, torch and Python versions;
2. the CUDA checks, the all-on project's tests marked gpu, one result each: a sync-free
   training step under torch.cuda.set_sync_debug_mode("error") in fp32, bf16 and fp16 with
   GradScaler and fused AdamW, eager and compiled, with the EMA and micro-batches; fused
   AdamW; bf16 and fp16 autocast; SyncBatchNorm on nccl; two deterministic runs
   bit-identical; --compile; a profiler trace with CUDA kernels; a mid-epoch resume;
3. short trainings: fp32, bf16, fp16 with GradScaler (its skipped steps counted), bf16
   compiled (ddp on nccl under torchrun, one process per GPU), FSDP2 (sharding), and the
   all-off project in a plain process;
4. on CUDA, the throughput of a model wide enough to keep the GPU busy, eager then
   compiled: samples/s, peak memory allocated and reserved, and the GPU's busy share of a
   steady stretch of steps (kernel time in a profiler trace of three steps);
5. the projects' own test suites, in parallel, as many as the budget leaves time for (on
   CUDA the tests marked slow, which train in processes on the CPU that CI covers, only
   with --slow);
6. what one GPU cannot prove.

--quick: the checks and the first trainings of the all-on, sharded and all-off projects
only (what CI runs on the CPU). --budget (default 480 s): nothing starts after it, and
what runs is stopped at it, recorded as a skip.

Writes three files into DIR: results.json (a list of {name, status, seconds, detail};
status pass, fail or skip), results.md (the same as a table) and logs.tar.gz (every
command's output and the test reports), each rewritten after each result. Exits 1 if
anything failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Result name -> the all-on project's test (marked gpu) that checks it; no other test of the
# project has that name. The sync-free step's cases are (precision, compile).
SYNC_FREE = "cuda: no host sync in a training step (EMA, micro-batches), "
CHECKS = {
    SYNC_FREE + "fp32": "test_no_host_sync_inside_the_training_step[fp32-False]",
    SYNC_FREE + "bf16": "test_no_host_sync_inside_the_training_step[bf16-False]",
    SYNC_FREE + "fp16 + GradScaler": "test_no_host_sync_inside_the_training_step[fp16-False]",
    SYNC_FREE + "bf16 compiled": "test_no_host_sync_inside_the_training_step[bf16-True]",
    "cuda: fused AdamW, pinned memory": "test_adamw_is_fused_on_cuda",
    "cuda: bf16 autocast": "test_mixed_precision_trains_on_cuda[bf16]",
    "cuda: fp16 autocast + GradScaler + fused AdamW": "test_mixed_precision_trains_on_cuda[fp16]",
    "cuda: SyncBatchNorm conversion (nccl)": "test_sync_batchnorm_conversion_on_cuda",
    "cuda: one seed, bit-identical (deterministic)": "test_one_seed_is_bit_identical_on_cuda",
    "cuda: --compile": "test_compiled_model_trains_on_cuda",
    "cuda: profiler trace with CUDA kernels": "test_profiler_records_cuda_kernels",
    "cuda: mid-epoch resume, bit-identical": "test_resume_mid_epoch_on_cuda_is_bit_identical",
}
# Short runs on CUDA. On the CPU, the short run of the template's end-to-end tests, which
# build.py writes into combos.json.
CUDA_RUN = ["--epochs", "2", "--train-size", "4096", "--val-size", "1000"]
CUDA_RUN += ["--batch-size", "128", "--num-workers", "4", "--log-every", "8"]
# The trainings: (name, which project, flags after its own run flags). --quick: the first
# of each project.
TRAININGS = [
    ("bf16", "default", ["--precision", "bf16"]),
    ("FSDP2", "sharded", []),
    ("all off", "off", []),
    ("fp32", "default", ["--precision", "fp32"]),
    ("fp16 + GradScaler", "default", ["--precision", "fp16"]),
    ("bf16 compiled", "default", ["--precision", "bf16", "--compile"]),
]
# Throughput: the all-on project in one process, wide enough to keep a GPU busy (width 256:
# 2.3 GFLOP a sample for a training step, measured with torch's FlopCounterMode, 4.1 M
# parameters), whole batches (no micro-batches), cuDNN timing its kernels (deterministic
# off); --profile traces steps 2 to 4 of the first epoch, after the compilation.
BENCH = ["--epochs", "2", "--train-size", "65536", "--val-size", "2048", "--width", "256"]
BENCH += ["--batch-size", "1024", "--micro-batch", "0", "--num-workers", "12"]
BENCH += ["--log-every", "16", "--precision", "bf16", "--deterministic", "off", "--profile"]
ONE_GPU_CANNOT_PROVE = (
    "gradients averaged across GPUs by ddp, FSDP2 shards on several GPUs, SyncBatchNorm "
    "statistics across processes, nccl between GPUs: CI proves them with 2 gloo processes "
    "on the CPU"
)
# The least time worth starting a step with (seconds).
MIN_SECONDS = 20


def result(name: str, status: str, seconds: float, detail: str) -> dict:
    return {"name": name, "status": status, "seconds": round(seconds, 1), "detail": detail}


def environment(device: str) -> dict[str, str]:
    """The environment for the projects' processes: on the CPU, no GPU is visible at all."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class Budget:
    """The seconds left until the run's deadline."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


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
            timeout=max(timeout, 1),
            check=False,
        )
        code, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as error:
        output = error.output or ""  # bytes, on some Pythons, despite text=True
        output = output if isinstance(output, str) else output.decode(errors="replace")
        code, output = None, f"{output}\nstopped at the budget's end, after {timeout:.0f} s"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ {' '.join(command)}\n{output}")
    return code, output, time.perf_counter() - start


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def machine(torch, device: str) -> dict:
    """What ran the bundle: torch, Python, and on CUDA the GPUs, driver, CUDA, cuDNN, NCCL."""
    parts = [f"torch {torch.__version__}", f"python {sys.version.split()[0]}"]
    if device == "cuda":
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        capability = ".".join(map(str, torch.cuda.get_device_capability()))
        memory = torch.cuda.get_device_properties(0).total_memory / 2**30
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        parts += [f"{len(gpus)} x {gpus[0]} (compute {capability}, {memory:.0f} GiB)"]
        parts += [f"driver {driver()}", f"CUDA {torch.version.cuda}"]
        parts += [f"cuDNN {torch.backends.cudnn.version()}", f"NCCL {nccl}"]
    else:
        parts += [f"CPU only ({os.cpu_count()} cores)"]
    return result("environment", "pass", 0.0, ", ".join(parts))


def driver() -> str:
    """The NVIDIA driver's version, from nvidia-smi; "unknown" without it."""
    query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    return lines[0] if lines else "unknown"


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


class Bundle:
    """One run of the bundle: where it writes, what it ran, and the budget left."""

    def __init__(self, out: Path, device: str, budget: Budget, manifest: dict) -> None:
        self.out, self.device, self.budget, self.manifest = out, device, budget, manifest
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu-bundle-"))  # runs, logs, reports
        self.results: list[dict] = []
        self.projects = {key: manifest[key] for key in ("default", "sharded", "off")}
        self.combos = {combo["id"]: combo for combo in manifest["combos"]}

    def record(self, entry: dict) -> None:
        """Keep ``entry`` and rewrite the results: a run cut short still leaves its results."""
        self.results.append(entry)
        print(f"{entry['status']:<4}  {entry['seconds']:6.1f}s  {entry['name']}: {entry['detail']}")
        (self.out / "results.json").write_text(json.dumps(self.results, indent=2) + "\n")
        lines = ["| check | status | seconds | detail |", "| --- | --- | ---: | --- |"]
        for r in self.results:
            detail = r["detail"].replace("|", "\\|")
            lines.append(f"| {r['name']} | {r['status']} | {r['seconds']:.1f} | {detail} |")
        (self.out / "results.md").write_text("\n".join(lines) + "\n")
        partial = self.out / "logs.tar.gz.partial"
        with tarfile.open(partial, "w:gz") as archive:
            for folder in ("logs", "junit"):
                if (self.scratch / folder).exists():
                    archive.add(self.scratch / folder, arcname=folder)
        partial.replace(self.out / "logs.tar.gz")

    def out_of_time(self, name: str) -> bool:
        """Whether the budget leaves too little to start ``name``; if so, records a skip."""
        if self.budget.left() >= MIN_SECONDS:
            return False
        self.record(result(name, "skip", 0.0, "not started: the budget ran out (--budget)"))
        return True

    def suite(self, combo_id: str, marker: str) -> tuple[dict, Path]:
        """Run one project's own tests with that marker expression; its result and JUnit file."""
        project = HERE / "projects" / combo_id
        if self.budget.left() < MIN_SECONDS:
            return result(f"tests: {combo_id}", "skip", 0.0, "not started: --budget"), project
        junit = self.scratch / "junit" / f"{combo_id}.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += [f"--junitxml={junit}", f"--basetemp={self.scratch / 'pytest' / combo_id}"]
        command += ["-m", marker]
        log = self.scratch / "logs" / f"{combo_id}.tests.log"
        env = environment(self.device)
        code, output, seconds = execute(command, project, env, self.budget.left(), log)
        status = {0: "pass", None: "skip"}.get(code, "fail")
        return result(f"tests: {combo_id}", status, seconds, tail(output, 1)), junit

    def train(self, name: str, combo_id: str, flags: list[str], bench: bool = False) -> dict:
        """Train one project; samples/s, peak GPU memory, val_acc, and what else it shows."""
        combo = self.combos[combo_id]
        key = f"{combo_id}.{name.replace(' ', '_').replace('+', '')}"
        project = HERE / "projects" / combo_id
        run_dir = self.scratch / "runs" / key
        report = self.scratch / "reports" / key
        report.parent.mkdir(parents=True, exist_ok=True)
        cpu_run = [*self.manifest["short_run"], "--log-every", "4"]
        short = CUDA_RUN if self.device == "cuda" else cpu_run
        own = [] if bench else [*short, *combo["run_flags"]]
        argv = [*own, *flags, "--device", self.device, "--out-dir", str(run_dir)]
        measure = [str(HERE / "measure.py"), str(report), self.manifest["package"]]
        # ddp projects under torchrun: one process per GPU on nccl, two gloo ones on the CPU.
        nproc = torch_device_count() if self.device == "cuda" else 2
        if combo["ddp"] and not bench:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command = [*launcher, f"--nproc-per-node={nproc}", *measure, *argv]
        else:
            nproc, command = 1, [sys.executable, *measure, *argv]
        env = environment(self.device)
        env["PYTHONPATH"] = str(project / "src")
        log = self.scratch / "logs" / f"{key}.train.log"
        code, output, seconds = execute(command, project, env, self.budget.left(), log)
        title = f"{'throughput' if bench else 'train'}: {name} ({combo_id})"
        if code is None:
            return result(title, "skip", seconds, "stopped: the budget ran out (--budget)")
        if code != 0:
            return result(title, "fail", seconds, f"exit {code}: {tail(output)}")
        metrics = (run_dir / "metrics.jsonl").read_text().splitlines()
        last = json.loads(metrics[-1])
        ranks = [json.loads(p.read_text()) for p in report.parent.glob(f"{report.name}.rank*")]
        parts = [f"{last['samples_per_sec']:.0f} samples/s"]
        peaks = [rank for rank in ranks if rank["peak_bytes"] is not None]
        if peaks:
            allocated = max(rank["peak_bytes"] for rank in peaks) / 2**20
            reserved = max(rank["peak_reserved"] for rank in peaks) / 2**20
            parts.append(f"peak GPU memory {allocated:.0f} MiB allocated, {reserved:.0f} reserved")
        if "--precision" in argv and argv[len(argv) - argv[::-1].index("--precision")] == "fp16":
            parts.append(skipped_fp16_steps(run_dir, last["step"]))
        if bench:
            parts.append(gpu_busy(run_dir / "profile" / "trace.json"))
        parts.append(f"val_acc {last['val_acc']:.3f}, {nproc} process{'es' * (nproc > 1)}")
        return result(title, "pass", seconds, ", ".join(parts))


def torch_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def skipped_fp16_steps(run_dir: Path, steps: int) -> str:
    """The optimizer steps that GradScaler skipped (inf or NaN gradients), read from the
    scale in last.pt: it starts at 2**16 and halves at each skip (it grows only every
    growth_interval steps without one, which the count allows for)."""
    import torch

    checkpoint = run_dir / "checkpoints" / "last.pt"
    if not checkpoint.exists():
        return "skipped fp16 steps: no checkpoint to read"
    scaler = torch.load(checkpoint, map_location="cpu", weights_only=True).get("scaler", {})
    if "scale" not in scaler:
        return "skipped fp16 steps: no GradScaler in the checkpoint"
    growths = steps // scaler.get("growth_interval", 2000)
    skipped = round(16 + growths - math.log2(scaler["scale"]))
    return f"{skipped} of {steps} fp16 steps skipped (GradScaler scale {scaler['scale']:g})"


def gpu_busy(trace: Path) -> str:
    """The GPU's busy share of the profiled steps: the union of its kernels' and copies'
    intervals over the time from the first step's start to the last GPU work's end."""
    if not trace.exists():
        return "GPU busy: no profiler trace"
    events = json.loads(trace.read_text())["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not steps or not work:
        return "GPU busy: no CUDA kernels in the trace"
    start = min(float(e["ts"]) for e in steps)
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in work)
    end = max(max(float(e["ts"]) + float(e.get("dur", 0)) for e in steps), intervals[-1][1])
    busy, reach = 0.0, start
    for begin, finish in intervals:
        begin = max(begin, reach)
        if finish > begin:
            busy, reach = busy + finish - begin, finish
    return f"GPU busy {100 * busy / (end - start):.0f}% of {len(steps)} profiled steps"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the three result files")
    parser.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available")
    parser.add_argument("--quick", action="store_true", help="the checks and three trainings")
    parser.add_argument("--slow", action="store_true", help="tests marked slow also on CUDA")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds (default 480)")
    parser.add_argument("--jobs", type=int, help="test suites run at once (default: CPUs / 2)")
    args = parser.parse_args(argv)

    import torch

    budget = Budget(args.budget)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("argument --device: this machine has no CUDA GPU; use --device cpu")
    out = Path(args.out).resolve()
    if (out / "results.json").exists():
        parser.error(f"argument --out: {out} already holds results; choose a new folder")
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((HERE / "combos.json").read_text())
    bundle = Bundle(out, device, budget, manifest)
    default = manifest["default"]
    try:
        bundle.record(machine(torch, device))
        # 2. The CUDA checks: the all-on project's tests marked gpu (skips on the CPU).
        entry, junit = bundle.suite(default, "gpu")
        bundle.record({**entry, "name": f"cuda checks: {default}"})
        for check in checks(junit):
            bundle.record(check)
        # 3. The trainings, one at a time: a ddp run takes every GPU.
        for name, project, flags in TRAININGS[:3] if args.quick else TRAININGS:
            combo_id = bundle.projects[project]
            if not bundle.out_of_time(f"train: {name} ({combo_id})"):
                bundle.record(bundle.train(name, combo_id, flags))
        # 4. Throughput, eager then compiled.
        if device == "cuda" and not args.quick:
            for name, flags in [("eager", BENCH), ("compiled", [*BENCH, "--compile"])]:
                if not bundle.out_of_time(f"throughput: {name} ({default})"):
                    bundle.record(bundle.train(name, default, flags, bench=True))
        # 5. The suites, in parallel, each recorded as it ends; the all-on one first, without
        # the checks that ran already.
        if not args.quick:
            slow = args.slow or device == "cpu"
            marker = "" if slow else "not slow"
            suites = [(default, "not gpu" if slow else "not slow and not gpu")]
            suites += [(c["id"], marker) for c in manifest["combos"] if c["id"] != default]
            jobs = args.jobs or max(1, (os.cpu_count() or 2) // 2)
            with ThreadPoolExecutor(jobs) as pool:
                running = [pool.submit(bundle.suite, *suite) for suite in suites]
                for future in as_completed(running):
                    bundle.record(future.result()[0])
        # 6. What this machine could not prove.
        gpus = torch.cuda.device_count() if device == "cuda" else 0
        if gpus < 2:
            what = "one GPU" if gpus else "the CPU (no CUDA check ran)"
            bundle.record(result(f"not proven on {what}", "skip", 0.0, ONE_GPU_CANNOT_PROVE))
    finally:
        shutil.rmtree(bundle.scratch, ignore_errors=True)
    failed = [r["name"] for r in bundle.results if r["status"] == "fail"]
    print(f"{len(bundle.results)} results, {len(failed)} failed: {out / 'results.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
