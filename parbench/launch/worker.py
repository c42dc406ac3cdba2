"""What each process does for one configuration: build the strategy, train and measure it, or
train it for `parbench verify`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from parbench import strategies
from parbench.families.data import BatchSource, shard
from parbench.machine.devices import DeviceSet, synchronize
from parbench.measure import Pace, memory_cap, time_steps
from parbench.measure.measurement import Measurement
from parbench.measure.probes import Probes, count_tensors, counted_source, counts_tensors
from parbench.measure.tensors import DeviceLimit
from parbench.measure.timeline import Timeline
from parbench.plan.config import Config

__all__ = ["RankTrained", "Trained", "combine_trained", "measure_worker", "train_steps"]


def _build(config: Config) -> strategies.Strategy:
    """The configuration's strategy, in a process set as the workload asks (cuDNN's search
    set for every configuration, on or off: this process may have run another before)."""
    torch.backends.cudnn.benchmark = config.workload.cudnn_benchmark
    return strategies.create(config.plan.training_plan)


def _loss_value(loss: torch.Tensor) -> float:
    value = loss.item() if isinstance(loss, torch.Tensor) else loss
    return float("nan") if value is None else float(value)


def measure_worker(config: Config, local_devices: Callable[[strategies.Strategy], DeviceSet],
                   barrier: Callable[[], object] = lambda: None,
                   pace: Pace | None = None) -> Measurement:
    """Train `config` for its warm-up and measured steps in this process and measure it.

    `local_devices(strategy)` names the devices this process drives; `barrier` joins the
    other processes of the configuration, if any, after every step; `pace` lets an external
    timer drive the steps (see `time_steps`).
    """
    with memory_cap(config.memory_cap_mib, _capped_devices(config)) as uncapped:
        return _measure(config, local_devices, barrier, pace, uncapped)


def _capped_devices(config: Config) -> DeviceSet:
    """What this process's memory cap applies to: every device of a one-process strategy; a
    rank's own GPU (the launcher made it current) where there is one process per device."""
    used = config.used_devices
    if used.kind == "cuda" and config.process_per_device:
        return DeviceSet((torch.device("cuda", torch.cuda.current_device()),))
    return used


@dataclass
class _Untimed:
    """The harness's own steps around the timed ones: each a training step of the strategy,
    synchronised on every device and rank, never timed as a measured step."""

    strategy: strategies.Strategy
    batches: BatchSource
    devices: DeviceSet
    barrier: Callable[[], object]

    def sync(self) -> None:
        synchronize(self.devices)
        self.barrier()

    def step(self) -> None:
        self.strategy.train_step(*self.batches.next())
        self.sync()

    def count(self, limit: DeviceLimit | None) -> tuple[list[float], float]:
        """Each logical device's tensors counted over one step (`count_tensors`), and the
        step's wall time."""
        placed = self.strategy.placed_modules()
        assert placed is not None  # counted: the strategy names each device's modules
        self.sync()
        start = time.perf_counter()
        counted = count_tensors(placed, self.step, self.strategy.optimizer,
                                self.strategy.buffer_bytes, limit)
        return counted, time.perf_counter() - start

    def traced(self) -> tuple[list[list], float]:
        """One step timed action by action (measure.timeline): its spans, and its own time
        from synchronised start to synchronised end."""
        timeline = Timeline(self.devices.logical)
        self.strategy.timeline = timeline
        try:
            self.sync()  # every rank's timeline starts at the same instant
            start = time.perf_counter()
            timeline.start()
            self.step()
            return timeline.spans(), time.perf_counter() - start
        finally:
            self.strategy.timeline = None


def _device_limit(config: Config, strategy: strategies.Strategy,
                  counted: bool) -> DeviceLimit | None:
    if not config.device_memory_mib:
        return None
    if not counted:
        raise ValueError("--device-memory-mib counts each logical device's tensors, and "
                         "this strategy's devices cannot be told apart (nn.DataParallel); "
                         "give --memory-cap-mib instead")
    return DeviceLimit(config.device_memory_mib, strategy.optimizer, strategy.buffer_bytes())


def _measure(config: Config, local_devices, barrier, pace, uncapped) -> Measurement:
    """Warm-up, then the timed steps with nothing of the harness inside them; then, untimed,
    the harness's own steps: a pipeline's step traced action by action, a step with each
    logical device's tensors counted, and the compute-only steps."""
    strategy = _build(config)
    batches = None
    try:
        strategy.setup()
        devices = local_devices(strategy)
        batches = BatchSource(config.workload, config.global_batch, strategy.input_device,
                              *strategy.data_shard, loader_workers=config.loader_workers)
        untimed = _Untimed(strategy, batches, devices, barrier)
        probes = Probes.open(devices)
        counted = counts_tensors(devices, strategy.placed_modules())
        limit = _device_limit(config, strategy, counted)
        # Under a limit, a device that runs out does so before anything is timed; this step
        # is then the first (compiling) step, kept with the warm-up's.
        first = [untimed.count(limit)[1]] if limit is not None else []
        losses: list[torch.Tensor] = []

        def after_step(i: int) -> None:
            probes.step_done(measured=i >= config.warmup_steps)
            strategy.after_step(measured=i >= config.warmup_steps)

        with probes.sampling():
            timing = time_steps(lambda i: losses.append(strategy.train_step(*batches.next())),
                                untimed.sync, config.warmup_steps, config.steps, pace,
                                probes.start_measuring, after_step)
        physical, source = probes.read_peaks()
        communication = strategy.communication()  # of the measured steps
        spans, traced_s = untimed.traced() if strategy.pipeline_stages > 1 else ([], None)
        memory_mib = physical
        if counted:
            memory_mib, source = untimed.count(limit)[0], counted_source(source)
        # Last: memory has been read, and the model may diverge across ranks from here.
        # Uncapped: without its communication a strategy may hold more than its training
        # (fsdp keeps every unit gathered), and a capped run asks whether training fits.
        with uncapped():
            compute = _time_without_communication(
                strategy, lambda i: strategy.train_step(*batches.next()), untimed.sync,
                config.steps)
        return Measurement(
            step_times_s=list(timing.step_times_s), total_s=timing.total_s,
            warmup_step_times_s=first + list(timing.warmup_step_times_s),
            host_step_times_s=list(timing.host_times_s),
            losses=[_loss_value(loss) for loss in losses[config.warmup_steps:]],
            peak_memory_mib=memory_mib, memory_source=source, physical_peak_memory_mib=physical,
            memory_after_step_mib=probes.after_step_mib, torch_threads=torch.get_num_threads(),
            partition=strategy.partition, timeline=spans, traced_step_s=traced_s,
            bubble_fraction=strategy.bubble_fraction(), micro_batches=strategy.micro_batches,
            pipeline_stages=strategy.pipeline_stages, gpu_sampling=probes.gpu_sampling,
            gpus=probes.per_gpu(), compute_step_times_s=compute, communication=communication)
    finally:
        if batches is not None:
            batches.close()
        strategy.close()


def _time_without_communication(strategy: strategies.Strategy, step, sync,
                                 steps: int) -> list[float]:
    """The step times of `steps` more steps with the strategy's communication off, after one
    discarded step (FSDP gathers its parameters once there): the compute part of a step."""
    context = strategy.without_communication()
    if context is None:
        return []
    with context:
        timing = time_steps(step, sync, warmup=1, steps=steps)
    return list(timing.step_times_s)


@dataclass
class Trained:
    """What `parbench verify` compares: the loss of each step over the global batch, and
    the model's parameters after the last step, on the CPU, in model order."""

    losses: list[float]
    parameters: list[torch.Tensor]


def _nudge_gradients(parameters: list[torch.Tensor], generator: torch.Generator) -> None:
    """Move every gradient backward computes one ulp up or down at random: the difference
    another summation order makes to a gradient (an exact zero stays zero, as it would)."""
    def nudge(grad: torch.Tensor) -> torch.Tensor:
        # A random bit a gradient, as bytes: half the time of comparing floats from rand().
        up = torch.empty(grad.shape, dtype=torch.uint8).random_(2, generator=generator)
        towards = up.to(grad).sub_(0.5).mul_(math.inf)  # +inf or -inf, on grad's device
        return torch.nextafter(grad, towards).masked_fill_(grad == 0, 0)

    for p in parameters:  # the hooks go with the model, at the end of train_steps
        if p.requires_grad:
            p.register_hook(nudge)


class RankTrained(NamedTuple):
    """What one process of a `parbench verify` run hands back (`train_steps`)."""

    losses: list[float]  # the loss each step reported; nan where this process computes none
    share: float  # of the global batch this process trained on
    parameters: list[torch.Tensor]  # the ones it holds after the last step, on the CPU


def train_steps(config: Config, batches: list[tuple[torch.Tensor, torch.Tensor]],
                nudge_seed: int | None = None) -> RankTrained:
    """One optimiser step of `config`'s strategy on each batch, in this process (for
    `parbench verify`). With `nudge_seed`, every gradient is nudged one ulp as backward
    computes it (a one-process strategy only: verify's rounding twin)."""
    strategy = _build(config)
    generator = None if nudge_seed is None else torch.Generator().manual_seed(nudge_seed)
    try:
        strategy.setup()
        if generator is not None:
            _nudge_gradients(list(strategy.model.parameters()), generator)
        device = strategy.input_device
        index, count = strategy.data_shard
        losses = []
        for images, labels in batches:
            images, labels = shard((images, labels), index, count)
            losses.append(_loss_value(strategy.train_step(images.to(device), labels.to(device))))
        share = len(shard((batches[0][1],), index, count)[0]) / len(batches[0][1])
        return RankTrained(losses, share,
                           [p.detach().float().cpu() for p in strategy.trained_parameters()])
    finally:
        strategy.close()


def combine_trained(parts: list[RankTrained]) -> Trained:
    """The processes' `train_steps` as one: each step's loss over the global batch (the
    losses of the processes that computed one, weighted by their share of the batch; nan if
    none did) and every process's parameters in rank order."""
    losses = []
    for k in range(len(parts[0].losses)):
        computed = [(part.losses[k], part.share) for part in parts
                    if not math.isnan(part.losses[k])]
        shares = sum(share for _, share in computed)
        if computed and abs(shares - 1) > 1e-6:  # each image's loss counted once
            raise ValueError(f"the ranks that computed a loss saw {shares:.3g} of the batch")
        losses.append(sum(loss * share for loss, share in computed) if computed else math.nan)
    return Trained(losses, [p for part in parts for p in part.parameters])
