"""One training step's operations measured on the device at hand: a warm-up step, one step
counted under a dispatch mode (FLOPs, bytes, dtypes), steps timed by parbench's step clock
alone, then steps under torch.profiler (each operation's kernel time, or its own on a CPU)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

from parbench.advisor.profiling.op_profile.counting import CountedOp, OpCounter
from parbench.advisor.profiling.op_profile.groups import OpRow, op_rows
from parbench.advisor.profiling.op_profile.labels import LOSS, OPTIMIZER, StepLabels
from parbench.advisor.profiling.op_profile.trace import TracedStep, traced_steps
from parbench.families.workloads import Workload
from parbench.machine.allocator import pin_cpu_allocator
from parbench.strategies.device_timer import StepClock

__all__ = ["DEFAULT_STEPS", "WARMUP_STEPS", "OpMeasurement", "Training", "counted_step",
           "measure_ops"]

# Untimed steps first: the warm-up step makes the optimiser's momentum buffers (a clone where
# later steps update them in place), fills the allocator's cache, and runs cuDNN's search
# where --cudnn-benchmark asks for it; the counted step after it, untimed too, is the first
# whose operations are every later step's.
WARMUP_STEPS = 1
# Profiled steps (and as many timed by the step clock): each operation's time is its median
# over them. Five give a true median, out of which one disturbed step (a clock change,
# another process) falls, and cost seconds.
DEFAULT_STEPS = 5


@dataclass(frozen=True)
class OpMeasurement:
    """What measure_ops measured: the blocks' names, the rows, and per step: the step clock's
    times (no profiler), and each profiled step's wall time, its operations' device and host
    time, and the device time of kernels no kept operation launched."""

    blocks: tuple[str, ...]
    rows: tuple[OpRow, ...]
    step_s: tuple[float, ...]
    profiled_steps: tuple[TracedStep, ...]
    # Counted calls the profiled steps did not run, per operator (groups.op_rows says which).
    unseen_calls: dict[str, int]

    @property
    def median_step_s(self) -> float:
        return statistics.median(self.step_s)


class Training:
    """The workload's model run as its family's blocks, one after another (what the blocks
    promise to compute), with its loss, optimiser and fp16's gradient scaler; the model built
    on `device`, or the one given (already there)."""

    def __init__(self, workload: Workload, micro_batch: int, device: torch.device,
                 model: nn.Module | None = None) -> None:
        self.workload, self.device = workload, device
        model = workload.build_model_on(device) if model is None else model
        self.blocks = workload.family.blocks(model)
        self.net = nn.Sequential(*[block for _, block in self.blocks])
        self.images, self.targets = workload.make_batch(micro_batch, device)
        self.loss_fn = workload.loss_fn()
        self.optimizer = workload.make_optimizer(model.parameters())
        self.scaler = workload.make_grad_scaler(device)

    def step(self, labels: StepLabels | None = None) -> None:
        enter = labels.enter if labels else (lambda block, phase: None)
        with self.workload.autocast(self.device):
            output = self.net(self.images)
            enter(LOSS, "forward")
            loss = self.scaler.scale(self.loss_fn(output, self.targets))
        enter(LOSS, "backward")
        loss.backward()
        enter(OPTIMIZER, OPTIMIZER)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def measure_ops(workload: Workload, micro_batch: int, device: torch.device | str = "cpu",
                threads: int = 1, steps: int = DEFAULT_STEPS) -> OpMeasurement:
    """Every operation of `workload`'s training step at `micro_batch` images on `device`
    (`threads` CPU threads), counted once and timed over `steps` profiled steps."""
    device = torch.device(device)
    pin_cpu_allocator()  # as the measured runs do
    settings = (torch.get_num_threads(), torch.backends.cudnn.benchmark)
    torch.set_num_threads(threads)
    torch.backends.cudnn.benchmark = workload.cudnn_benchmark
    try:
        training = Training(workload, micro_batch, device)
        for _ in range(WARMUP_STEPS):
            training.step()
        labels = StepLabels(training.blocks)
        try:
            counted = counted_step(training, labels)
            step_s = [_clocked_step(training) for _ in range(steps)]
            profiled = _profiled_steps(training, labels, steps,
                                       {op.name for op in counted})
        finally:
            labels.remove()
    finally:
        torch.set_num_threads(settings[0])
        torch.backends.cudnn.benchmark = settings[1]
    if device.type == "cuda" and not any(op.device_s for step in profiled for op in step.ops):
        raise RuntimeError("torch.profiler recorded no CUDA kernel: its CUDA activity needs "
                           "CUPTI (libcupti, shipped with PyTorch's CUDA wheels)")
    rows, unseen = op_rows(counted, profiled)
    return OpMeasurement(tuple(name for name, _ in training.blocks), tuple(rows),
                         tuple(step_s), tuple(profiled), unseen)


def counted_step(training: Training, labels: StepLabels) -> list[CountedOp]:
    """Every operation of one step of `training`, each with its block and phase."""
    with OpCounter(labels) as counter:
        training.step(labels)
    return counter.ops


def _clocked_step(training: Training) -> float:
    """One step timed by parbench's step clock, from the device's queue (no hook, no
    profiler)."""
    clock = StepClock(training.device)
    clock.synchronize()
    clock.mark("start")
    training.step()
    clock.mark("end")
    clock.synchronize()
    return clock.seconds("start", "end")


def _profiled_steps(training: Training, labels: StepLabels, steps: int,
                    counted_names: set[str]) -> list[TracedStep]:
    """`steps` steps under torch.profiler after one it discards (its own start-up), each
    between a start mark and an end mark set once the device finished it."""
    activities = [ProfilerActivity.CPU]
    if training.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as profiler:
        for _ in range(steps + 1):
            labels.start_step()
            training.step(labels)
            training.synchronize()
            labels.end_step()
            profiler.step()
    return traced_steps(profiler.events(), counted_names,
                        on_device=training.device.type == "cuda")
