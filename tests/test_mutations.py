"""Mutation tests: break one pattern in a rendered project, and its generated tests must fail.

Each mutation is a textual patch of a copy of the all-on project's source (of the all-on
sharded project's, for SHARDED_MUTATIONS). The patch asserts that the text it replaces is
there exactly once, so a change to the template cannot silently turn a mutation into a
no-op; when that assertion fires, update the mutation to the new text.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from combos import DEFAULT, MOST, PACKAGE
from forkserver import PYTHON as FORKED

pytestmark = pytest.mark.mutation


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # in src/<package>/
    old: str
    new: str
    test: str  # the generated test file (or test) that must catch it
    says: str = ""  # what its failure must say: the change to make

    def apply(self, project: Path) -> None:
        path = project / "src" / PACKAGE / self.file
        source = path.read_text()
        count = source.count(self.old)
        assert count == 1, f"{self.name}: expected {self.old!r} once in {self.file}, found {count}"
        path.write_text(source.replace(self.old, self.new))


# The test that the same training runs on any number of processes, and resumes on any.
ANY_COUNT = "test_distributed.py::test_the_same_training_on_any_number_of_processes"

# The sampler pads a short step by repeating its first samples: (file, old, new).
PADDING = (
    "batches.py",
    "        return range(start, start + self.step_samples(step))[self.rank :: self.world_size]\n",
    "        count = self.step_samples(step)\n"
    "        largest = -(-count // self.world_size)  # rank 0's share\n"
    "        end = start + largest * self.world_size\n"
    "        return [start + (p - start) % count\n"
    "                for p in range(start + self.rank, end, self.world_size)]\n",
)

MUTATIONS = [
    Mutation(
        "DataLoader workers start with the stop signals not held",
        "loading.py",
        "held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)",
        "held = signal.pthread_sigmask(signal.SIG_BLOCK, [])",
        "test_checkpoint.py::test_a_stop_while_the_workers_start_is_a_stop_like_any_other",
    ),
    Mutation(
        "loss divided by --batch-size, not the step's samples",
        "train.py",
        "share = summed / (samples / run.env.world_size)",
        "share = summed / (run.config.batch_size / run.env.world_size)",
        "test_grad_accum.py",
    ),
    Mutation(
        "loss divided by the batch's own samples (each process's mean), not the step's",
        "train.py",
        "share = summed / (samples / run.env.world_size)",
        "share = summed / max(len(y), 1)",  # each process's own mean, then DDP's average
        ANY_COUNT,
    ),
    Mutation(
        "the sampler pads a short step by repeating its first samples",
        *PADDING,
        ANY_COUNT,
    ),
    Mutation(
        "the sampler pads a short step (caught by the property test, too)",
        *PADDING,
        "test_resume_steps.py::test_sampler_resumes_after_any_step",
    ),
    Mutation(
        "a resumed run restarts its epoch",
        "train.py",
        "sampler_of(train_loader).set_epoch(epoch, skip=state.samples)",
        "sampler_of(train_loader).set_epoch(epoch)",
        # The pattern's own test (12 s); ANY_COUNT catches it too, in 40 s.
        "test_checkpoint.py::test_resume_mid_epoch_is_bit_identical",
    ),
    Mutation(
        "validation without inference_mode",
        "validation.py",
        "@torch.inference_mode()\ndef validate(",
        "def validate(",
        "test_validation.py",
    ),
    Mutation(
        "validation in train mode",
        "validation.py",
        "    net.eval()\n",
        "    net.train()\n",
        "test_validation.py",
    ),
    Mutation(
        "validation does not restore the training mode",
        "validation.py",
        "        net.train(was_training)\n",
        "        pass\n",
        "test_validation.py",
    ),
    Mutation(
        "live loss accumulated (no detach)",
        "train.py",
        "detached = summed.detach()",
        "detached = summed",
        "test_loop.py",
    ),
    Mutation(
        "clip before unscale_",
        "train.py",
        "    run.scaler.unscale_(run.optimizer)",
        "    torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)\n"
        "    run.scaler.unscale_(run.optimizer)",
        "test_amp.py",
    ),
    Mutation(
        "optimizer stepped directly, bypassing the scaler's inf check",
        "train.py",
        "run.scaler.step(run.optimizer)",
        "run.optimizer.step()",
        "test_amp.py",
    ),
    Mutation(
        "deprecated torch.cuda.amp.GradScaler",
        "precision.py",
        "torch.amp.GradScaler(device.type, ",
        "torch.cuda.amp.GradScaler(",
        "test_amp.py",
    ),
    Mutation(
        "bf16 gets a GradScaler",
        "precision.py",
        'GradScaler(device.type, enabled=config.precision == "fp16")',
        'GradScaler(device.type, enabled=config.precision != "fp32")',
        "test_amp.py",
    ),
    Mutation(
        "set_epoch is a no-op",
        "loading.py",
        "        self.epoch = epoch\n",
        "        pass\n",
        "test_loading.py",
    ),
    Mutation(
        "augmentation ignores the epoch",
        "loading.py",
        "np.random.default_rng((self.seed, epoch, index))",
        "np.random.default_rng((self.seed, index))",
        "test_loading.py",
    ),
    Mutation(
        "augment draws from torch's global generator, not from rng",
        "data.py",
        "noise = torch.from_numpy(rng.standard_normal(image.shape)).to(image.dtype)",
        "noise = torch.randn(image.shape, dtype=image.dtype)",
        "test_data.py",
    ),
    Mutation(
        "the loss is a batch's mean, not its sum",
        "loss.py",
        'reduction="sum"',
        'reduction="mean"',
        "test_task.py::test_the_loss_is_a_sum_over_samples",
    ),
    Mutation(
        "a metric is a batch's mean, not its sum",
        "task.py",
        'sums = {"acc": (outputs.argmax(dim=1) == targets).sum()}',
        'sums = {"acc": (outputs.argmax(dim=1) == targets).float().mean()}',
        "test_task.py::test_the_metrics_are_sums_over_samples",
    ),
    Mutation(
        "validation keeps the last batch's metric sums, not their total",
        "validation.py",
        "sums[name] = sums[name] + value if name in sums else value",
        "sums[name] = value",
        "test_validation.py::test_the_metrics_are_the_tasks_on_the_whole_validation_set",
    ),
    Mutation(
        "a metric whose goal is min is kept best by its highest value",
        "seams.py",
        'return value < best - delta if goal(name) == "min" else value > best + delta',
        "return value > best + delta",
        "test_ema.py::test_best_checkpoint_says_which_weights_won",
    ),
    Mutation(
        "a parameter that no loss reaches",
        "model.py",
        "        self.head = nn.Sequential(",
        "        self.unused = nn.Linear(1, 1)\n        self.head = nn.Sequential(",
        "test_model.py",
    ),
    Mutation(
        "augment changes the dtype",
        "data.py",
        "    return image + 0.05 * image.std() * noise",
        "    return (image + 0.05 * image.std() * noise).double()",
        "test_data.py",
    ),
    Mutation(
        "the EMA walks state_dict, which lists a tied weight twice",
        "ema.py",
        "    current = dict(net.named_parameters()) | dict(net.named_buffers())\n"
        "    for named in (list(ema.named_parameters()), list(ema.named_buffers())):",
        "    current = net.state_dict()\n    for named in (list(ema.state_dict().items()),):",
        "test_ema.py::test_a_tied_weight_is_averaged_once_a_step",
    ),
    Mutation(
        "frozen backbone follows model.train()",
        "network.py",
        "        module.eval()\n",
        "        pass\n",
        "test_frozen_backbone.py",
    ),
    Mutation(
        "reentrant activation checkpointing",
        "model.py",
        "checkpoint(self.convs, x, use_reentrant=False)",
        "checkpoint(self.convs, x, use_reentrant=True)",
        "test_activation_checkpointing.py",
    ),
    Mutation(
        "torch RNG not seeded",
        "device.py",
        "    torch.manual_seed(seed)",
        "    torch.seed()",
        "test_determinism.py",
    ),
    Mutation(
        "bf16 accepted where the GPU only emulates it",
        "device.py",
        "torch.cuda.is_bf16_supported(including_emulation=False)",
        "torch.cuda.is_bf16_supported()",
        "test_amp.py",
    ),
    Mutation(
        "a CUBLAS_WORKSPACE_CONFIG that torch refuses is kept",
        "device.py",
        "    if workspace not in CUBLAS_DETERMINISTIC:\n",
        "    if workspace is None:\n",
        "test_determinism.py",
    ),
    Mutation(
        "an op without a deterministic kernel ends in a traceback",
        "device.py",
        "    if NONDETERMINISTIC not in str(error):\n",
        "    if True:\n",
        "test_determinism.py",
    ),
    Mutation(
        "validation's loss takes the training's label smoothing",
        "validation.py",
        "batch = {seams.LOSS: loss.summed_loss(outputs, y),",
        "batch = {seams.LOSS: loss.summed_loss(outputs, y, label_smoothing=0.1),",
        "test_training_options.py::test_label_smoothing_trains_with_it_and_validates_without",
    ),
    Mutation(
        "a loss that takes label_smoothing and ignores it (a regression's, to 0.2.0's contract)",
        "loss.py",
        'reduction="sum", label_smoothing=label_smoothing',
        'reduction="sum"',
        "test_training_options.py::test_label_smoothing_trains_with_it_and_validates_without",
        says="remove label_smoothing from summed_loss in loss.py",
    ),
    Mutation(
        "predictions that take top_k and ignore it",
        "task.py",
        "stable=True).indices[:, :top_k]",
        "stable=True).indices[:, :1]",
        "test_after_training.py::test_predict_orders_every_class_by_a_probability",
        says="remove top_k from predictions in task.py",
    ),
    Mutation(
        "a resumed run forgets the early-stopping count",
        "checkpoint.py",
        "if field.name in saved]",
        'if field.name in saved and field.name != "early_stop_epochs"]',
        "test_checkpoint.py::test_training_options_resume_bit_identical_and_stop_at_the_same_epoch",
    ),
    Mutation(
        "profiler schedule repeats",
        "profiling.py",
        "repeat=1)",
        "repeat=0)",
        "test_profiling.py",
    ),
]
# Patches of the all-on sharded project (sharding shard).
SHARDED_MUTATIONS = [
    Mutation(
        "no fully_shard on the root",
        "sharding.py",
        "    fully_shard(net, mesh=mesh, mp_policy=mixed)\n",
        "",
        "test_sharding.py",
    ),
    Mutation(
        "clipping by each process's shard of the gradient",
        "train.py",
        "    norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)\n",
        "    shards = []\n"
        "    for parameter in run.model.parameters():\n"
        "        if parameter.grad is not None:\n"
        "            local = getattr(parameter, 'to_local', parameter.detach)().detach()\n"
        "            local.grad = getattr(parameter.grad, 'to_local', parameter.grad.detach)()\n"
        "            shards.append(local)\n"
        "    norm = torch.nn.utils.clip_grad_norm_(shards, config.grad_clip)\n",
        "test_sharding.py::test_sharded_training_equals_one_process_with_the_global_batch",
    ),
    Mutation(
        "gradients synced on every micro-batch",
        "sharding.py",
        "module.set_requires_gradient_sync(sync, recurse=False)",
        "module.set_requires_gradient_sync(True, recurse=False)",
        "test_sharding.py::test_gradients_reduce_scatter_once_per_optimizer_step",
    ),
    Mutation(
        "a checkpoint folder's .metadata unpickled as DCP's own reader does",
        "sharding.py",
        "metadata = _MetadataUnpickler(file).load()",
        "metadata = pickle.load(file)",
        "test_sharding.py::test_a_hostile_metadata_file_is_refused_before_it_runs",
    ),
    Mutation(
        "a folder without .metadata taken by --resume auto",
        "checkpoint.py",
        'if path.is_dir() and not (path / ".metadata").is_file():',
        "if False:",
        "test_sharding.py::test_an_incomplete_folder_is_never_resumed",
    ),
]


def pytest_in(project: Path, fork_server, *tests: str) -> subprocess.CompletedProcess:
    """Run the project's own pytest on some of its test files, forked from the fork server
    (tests/forkserver.py); the processes its tests start are fresh interpreters."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **fork_server.env}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        # -m "": the slow tests too (the rendered pyproject leaves them out by default).
        [*FORKED, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", ""]
        + [f"tests/{test}" for test in tests],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("mutation", MUTATIONS + SHARDED_MUTATIONS, ids=lambda m: m.name)
def test_generated_tests_catch_the_mutation(rendered, fork_server, tmp_path, mutation):
    """The generated test file for the pattern fails once the pattern is broken. That it
    passes unbroken is tests/test_project_suites.py's: the all-on suites (replicated and
    sharded), slow tests too."""
    project = tmp_path / "project"
    combo = MOST["sharding"] if mutation in SHARDED_MUTATIONS else DEFAULT
    shutil.copytree(rendered(combo), project)
    mutation.apply(project)
    result = pytest_in(project, fork_server, mutation.test)
    # Exit code 1: tests ran and failed (2 or more would be a collection or usage error).
    assert result.returncode == 1, (
        f"{mutation.test} did not catch: {mutation.name}\n"
        + result.stdout[-4000:]
        + result.stderr[-2000:]
    )
    assert mutation.says in result.stdout, result.stdout[-4000:]
