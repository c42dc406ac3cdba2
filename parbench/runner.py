"""Run configurations: one configuration -> one measured record; a sweep -> a run folder."""

from __future__ import annotations

import functools
import itertools
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

import strategies
from parbench.devices import DeviceSet
from parbench.measure import (
    GpuSampler,
    PeakMemory,
    imbalance,
    time_steps,
    training_flops_per_image,
)
from parbench.results import RunFolder, new_record
from parbench.workloads import Workload

__all__ = ["Config", "expand_sweep", "measure", "run_config", "run_sweep"]


@dataclass(frozen=True)
class Config:
    """One point of a sweep: everything needed to measure one strategy once."""

    strategy: str
    workload: Workload
    global_batch: int
    devices: DeviceSet
    warmup: int = 3
    steps: int = 10
    threads_per_device: int = 1
    options: dict = field(default_factory=dict)

    @property
    def used_devices(self) -> DeviceSet:
        """The devices the strategy takes out of those given (single takes the first)."""
        return DeviceSet(strategies.lookup(self.strategy).cls.select_devices(self.devices.logical))

    def label(self) -> str:
        w = self.workload
        return (f"{self.strategy} {w.model} batch {self.global_batch} {w.image_size}px "
                f"{w.precision} on {self.used_devices.describe()}")


def expand_sweep(strategy: Iterable[str], model: Iterable[str], global_batch: Iterable[int],
                 image_size: Iterable[int], precision: Iterable[str],
                 devices: Iterable[DeviceSet], **common) -> list[Config]:
    """The cartesian product of the swept values, strategies varying fastest."""
    workload_fields = {k: common.pop(k) for k in ("num_classes", "channels_last", "seed")
                       if k in common}
    configs = []
    for dev, mdl, size, prec, batch, name in itertools.product(
            devices, model, image_size, precision, global_batch, strategy):
        workload = Workload(model=mdl, image_size=size, precision=prec, **workload_fields)
        configs.append(Config(strategy=name, workload=workload, global_batch=batch,
                              devices=dev, **common))
    return configs


@functools.cache
def _flops_per_image(workload: Workload) -> int:
    return training_flops_per_image(workload.build_model, workload.image_size)


def measure(config: Config) -> dict:
    """Train `config` for its warm-up and measured steps; return the measured record fields.

    Raises whatever the strategy raises (out of memory included); `run_config` records it.
    """
    strategy = strategies.create(config.strategy, config.workload, config.devices.logical,
                                 **config.options)
    used = DeviceSet(strategy.devices)
    threads_before = torch.get_num_threads()
    if used.kind == "cpu":
        # One core's worth of threads per logical device: N logical devices = N cores of work.
        torch.set_num_threads(config.threads_per_device * len(used))
    try:
        strategy.setup()
        images, labels = config.workload.make_batch(config.global_batch, strategy.input_device)
        losses = []
        memory = PeakMemory(used)
        sampler = GpuSampler() if used.kind == "cuda" else None

        def step(i: int) -> None:
            losses.append(strategy.train_step(images, labels))
            if i + 1 == config.warmup:
                memory.reset()  # the peak of the measured steps, not of building the model

        if config.warmup == 0:
            memory.reset()
        if sampler is not None:
            with sampler:
                timing = time_steps(step, used, config.warmup, config.steps)
        else:
            timing = time_steps(step, used, config.warmup, config.steps)
        peaks = memory.read_mib()
        torch_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)

    throughput = timing.throughput(config.global_batch)
    flops = _flops_per_image(config.workload)
    measured_losses = [loss.item() for loss in losses[config.warmup:]]
    return dict(
        status="ok",
        strategy_options={**strategy.options},
        micro_batches=strategy.micro_batches,
        torch_threads=torch_threads,
        throughput_ips=throughput,
        step_time_median_s=timing.median_s,
        step_time_p90_s=timing.p90_s,
        step_time_min_s=min(timing.step_times_s),
        step_time_max_s=max(timing.step_times_s),
        step_times_s=list(timing.step_times_s),
        peak_memory_mib=peaks,
        peak_memory_max_mib=max(peaks),
        memory_imbalance=imbalance(peaks),
        memory_source=memory.source,
        flops_per_image=flops,
        achieved_tflops=flops * throughput / 1e12,
        gpu_utilisation_pct=sampler.mean_utilisation() if sampler else [],
        gpu_memory_used_mib=sampler.max_memory_used_mib() if sampler else [],
        gpu_sampling=(sampler.unavailable_reason or "GPUtil") if sampler else "not a GPU run",
        loss_first=measured_losses[0],
        loss_last=measured_losses[-1],
    )


def _is_out_of_memory(error: BaseException) -> bool:
    return isinstance(error, (torch.OutOfMemoryError, MemoryError))


def run_config(config: Config, run_id: str = "", index: int = 0,
               environment: dict | None = None) -> dict:
    """Measure one configuration and return its record; failures become a record, not a raise."""
    workload = config.workload
    used = config.used_devices
    base = dict(
        run_id=run_id, config_index=index, strategy=config.strategy,
        strategy_options=dict(config.options), model=workload.model,
        image_size=workload.image_size, num_classes=workload.num_classes,
        precision=workload.precision, channels_last=workload.channels_last,
        global_batch=config.global_batch, devices=used.describe(),
        physical_devices=",".join(map(str, used.physical)), device_kind=used.kind,
        emulated=used.emulated, world_size=1, micro_batches=1,
        threads_per_device=config.threads_per_device, warmup_steps=config.warmup,
        measured_steps=config.steps,
    )
    reason = strategies.lookup(config.strategy).cls.unavailable_reason(config.devices.logical)
    if reason is not None:
        outcome = dict(status="skipped", reason=reason)
    else:
        try:
            outcome = measure(config)
        except Exception as error:
            status = "oom" if _is_out_of_memory(error) else "error"
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            last_frame = traceback.extract_tb(error.__traceback__)[-1]
            where = f" (at {last_frame.filename.rsplit('/', 1)[-1]}:{last_frame.lineno})"
            outcome = dict(status=status,
                           reason=f"{error.__class__.__name__}: {error}".strip()[:500] + where)
    record = new_record(**{**base, **outcome})
    return {**record, **(environment or {})}


def run_sweep(configs: list[Config], folder: RunFolder, environment: dict,
              on_start: Callable[[int, Config], None] | None = None,
              on_done: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Measure every configuration in order, rewriting the run folder after each one.

    A configuration that fails is recorded with its status and the sweep goes on; whatever was
    measured before an interruption is already on disk.
    """
    folder.write_environment(environment)
    records: list[dict] = []
    for index, config in enumerate(configs):
        if on_start:
            on_start(index, config)
        record = run_config(config, folder.run_id, index, environment)
        records.append(record)
        folder.write_records(records)
        if on_done:
            on_done(index, record)
    return records

