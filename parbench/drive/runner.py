"""Run configurations: one configuration -> one record; a sweep of them -> a run folder."""

from __future__ import annotations

import dataclasses
import functools
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from parbench import launch
from parbench.families.workloads import Workload
from parbench.measure import (
    host_bound,
    imbalance,
    memory_growth,
    peak_tflops,
    training_flops_per_image,
)
from parbench.measure.measurement import Measurement
from parbench.measure.timeline import bubble_fractions, in_flight
from parbench.plan import Sweep, trials
from parbench.plan.config import Config
from parbench.results.comparisons import add_comparisons
from parbench.results.folder import RunFolder
from parbench.results.record import Record

__all__ = ["FINAL_STATUSES", "add_comparisons", "done_trials", "planned_fields", "run_config",
           "run_sweep"]


@functools.cache
def _flops_per_image(workload: Workload) -> int:
    return training_flops_per_image(workload.build_model, workload.image_size)


def _peak_tflops(config: Config) -> float | None:
    """The dense peak of the physical GPUs the configuration uses, together, at its precision
    (None on CPU, or on a GPU measure.flops does not know)."""
    used = config.used_devices
    if used.kind != "cuda":
        return None
    per_device = peak_tflops(torch.cuda.get_device_name(used.logical[0]),
                             config.workload.precision)
    return per_device * used.physical_count if per_device else None


def _measured_bubble(measured: Measurement) -> dict:
    """The timeline of the traced step (one after the measured ones), and each stage's idle
    share of that step."""
    spans = measured.timeline
    if not spans or not measured.traced_step_s:
        return {}
    idle = bubble_fractions(spans, measured.pipeline_stages, measured.traced_step_s)
    return dict(timeline=spans, traced_step_time_s=measured.traced_step_s,
                measured_bubble_fraction=sum(idle) / len(idle),
                measured_bubble_fraction_worst=max(idle),
                in_flight_micro_batches=in_flight(spans, measured.pipeline_stages))


def _communication_split(measured: Measurement, step_s: float) -> dict:
    """A data-parallel step split into compute (the same steps with communication off,
    measured in the same run) and the communication it leaves exposed (the rest), with the
    bytes communicated per step and the library's own timings. On one rank (one process: the
    merged measurement has no per-rank times) no byte crosses a link, so the rest is the
    wrapper's own work (DDP's reducer and its one-rank collectives; FSDP's hooks, DTensors and
    copies): recorded as `wrapper_overhead_time_s` (and its share of the step), never as
    exposed communication."""
    compute_times = measured.compute_step_times_s
    split: dict = {}
    if compute_times:
        compute = float(np.percentile(compute_times, 50))
        split = dict(compute_step_times_s=compute_times, compute_time_s=compute)
        if measured.rank_step_times_s is None:  # one rank
            split.update(wrapper_overhead_time_s=step_s - compute,
                         wrapper_overhead_fraction=(step_s - compute) / step_s)
        else:
            split.update(exposed_comm_time_s=step_s - compute,
                         exposed_comm_fraction=(step_s - compute) / step_s)
    return {**split, **measured.communication}


def _host_fields(config: Config, measured: Measurement, step_s: float) -> dict:
    """The host's median time to queue a measured step, and whether it bounds the step."""
    host = measured.host_step_times_s
    if not host:
        return {}
    host_s = float(np.percentile(host, 50))
    return dict(host_time_median_s=host_s,
                host_bound=host_bound(host_s, step_s, config.used_devices.kind,
                                      config.workload.precision, config.plan.backend))


def _gpu_fields(gpus: dict[str, dict], images: int) -> dict:
    """What was sampled on every GPU used, in rank order: mean utilisation %, max used MiB,
    the joules of them all (where every GPU reports energy) and the images per joule."""
    energy = [gpu["energy_j"] for gpu in gpus.values()]
    joules = sum(energy) if energy and None not in energy else None
    return dict(gpu_utilisation_pct=[gpu["utilisation_pct"] for gpu in gpus.values()
                                     if gpu["utilisation_pct"] is not None],
                gpu_memory_used_mib=[gpu["memory_used_mib"] for gpu in gpus.values()
                                     if gpu["memory_used_mib"] is not None],
                gpu_energy_j=joules, images_per_joule=images / joules if joules else None)


def _measured_fields(config: Config, measured: Measurement) -> dict:
    """Record fields from the configuration's measurement: the derived statistics are
    computed here, once."""
    times = measured.step_times_s
    # Over the slowest rank's time of each step, as step_times_s: a rank's own sum can be less.
    throughput = config.global_batch * len(times) / sum(times)
    flops = _flops_per_image(config.workload)
    peak_flops = _peak_tflops(config)
    peaks = measured.peak_memory_mib
    losses = measured.losses
    growth, leaking = memory_growth(measured.memory_after_step_mib)
    warmup = measured.warmup_step_times_s
    first_step = warmup[0] if warmup else None
    median = float(np.percentile(times, 50))
    return dict(
        status="ok",
        stages=measured.pipeline_stages,
        partition=measured.partition,
        micro_batches=measured.micro_batches,
        bubble_fraction=measured.bubble_fraction,
        **_measured_bubble(measured),
        torch_threads=measured.torch_threads,
        throughput_ips=throughput,
        step_time_median_s=median,
        step_time_p90_s=float(np.percentile(times, 90)),
        step_time_min_s=min(times),
        step_time_max_s=max(times),
        step_times_s=times,
        **_host_fields(config, measured, median),
        first_step_time_s=first_step,
        # The first warm-up step compiles: its time beyond a measured step's.
        compile_time_s=(first_step - median if config.workload.compile and first_step
                        else None),
        rank_step_times_s=measured.rank_step_times_s,
        peak_memory_mib=peaks,
        peak_memory_max_mib=max(peaks),
        memory_imbalance=imbalance(peaks),
        memory_source=measured.memory_source,
        physical_peak_memory_mib=measured.physical_peak_memory_mib,
        memory_after_step_mib=measured.memory_after_step_mib,
        memory_growth_mib_per_step=growth,
        memory_leak_suspected=leaking,
        flops_per_image=flops,
        achieved_tflops=flops * throughput / 1e12,
        peak_tflops=peak_flops,
        mfu=flops * throughput / 1e12 / peak_flops if peak_flops else None,
        gpu_sampling=measured.gpu_sampling,
        **_gpu_fields(measured.gpus, config.global_batch * len(times)),
        loss_first=losses[0],
        loss_last=losses[-1],
        **_communication_split(measured, median),
    )


def run_config(config: Config, run_id: str = "", index: int = 0,
               environment: dict | None = None,
               measure: Callable[[Config], Measurement | None] = launch.measure) -> Record:
    """Measure one configuration and return its record; failures become a record, not a raise.

    `measure` returns the configuration's measurement (another driver, such as
    pytest-benchmark, passes its own, see `parbench.launch.paced`)."""
    base = planned_fields(config, run_id, index)
    outcome: dict[str, Any]
    if config.plan.refusal:  # one combination of a sweep it refuses, or the machine cannot
        outcome = dict(status="skipped", reason=config.plan.refusal.reason)
    else:
        try:
            measured = measure(config)
            assert measured is not None  # None only on a torchrun rank other than 0's
            outcome = _measured_fields(config, measured)
        except Exception as error:
            outcome = dict(
                status="oom" if launch.is_out_of_memory(error, bool(config.memory_cap_mib))
                else "error",
                reason=launch.failure_reason(error))
        # Out of the except block: its exception is gone, and with it the traceback whose
        # frames held the failed strategy and its tensors, which can only now be freed.
        _release_memory(config, failed=outcome["status"] != "ok")
    return Record(**{**base, **outcome}, environment=dict(environment or {}))


def planned_fields(config: Config, run_id: str = "", index: int = 0) -> dict[str, Any]:
    """What a record says of its configuration before it runs: the workload, batch, devices
    and plan, and (where the plan runs it) the strategy's options resolved."""
    workload = config.workload
    used = config.used_devices
    base: dict[str, Any] = dict(
        run_id=run_id, config_index=index, config_key=config.key(), strategy=config.strategy,
        strategy_options=dict(config.options),  # as given, until the plan resolves them
        model=workload.model,
        image_size=workload.image_size, num_classes=workload.num_classes,
        precision=workload.precision, channels_last=workload.channels_last,
        compile=workload.compile, **_compile_fields(workload, used.kind),
        cudnn_benchmark=workload.cudnn_benchmark,
        global_batch=config.global_batch, scaling=config.scaling, devices=used.describe(),
        physical_devices=used.describe_physical(), device_kind=used.kind,
        nodes=used.nodes, emulated=used.emulated, micro_batches=1,
        world_size=config.plan.world_size, backend=config.plan.backend,
        data=workload.data_dir or "synthetic", memory_cap_mib=config.memory_cap_mib,
        device_memory_mib=config.device_memory_mib,
        threads_per_device=config.threads_per_device, warmup_steps=config.warmup_steps,
        measured_steps=config.steps,
    )
    if not config.plan.refusal:
        plan = config.plan.training_plan
        options = plan.options
        base.update(strategy_options=options.given(),
                    strategy_settings=options.settings(plan.devices),
                    parallel_dims=plan.dims.as_record(),
                    split_size=options.micro_batch_size())
    return base


def _compile_fields(workload: Workload, device_kind: str) -> dict[str, Any]:
    """How the workload was compiled: its scope and mode, and whether CUDA graphs ran (torch
    captures them on CUDA devices only); None for each where it ran eager."""
    if not workload.compile:
        return dict(compile_scope=None, compile_mode=None, cuda_graphs=None)
    return dict(compile_scope=workload.compile_scope, compile_mode=workload.compile_mode,
                cuda_graphs=workload.captures_cuda_graphs and device_kind == "cuda")


def _holds_gpu_memory(config: Config) -> bool:
    """Whether this process may hold the configuration's GPU memory: it ran on a GPU, here or
    partly here (rank 0 of a paced run). empty_cache is a no-op where CUDA never started."""
    return config.used_devices.kind == "cuda"


def _release_memory(config: Config, failed: bool) -> None:
    """Free what the configuration held before the next one starts: after any failure, and
    after every configuration measured on a GPU in this process, whose allocator would keep
    its cached blocks reserved (ranks started after it on that GPU could run out falsely)."""
    on_gpu = _holds_gpu_memory(config)
    if failed or on_gpu:
        gc.collect()
    if on_gpu or (failed and torch.cuda.is_available()):
        torch.cuda.empty_cache()


# Outcomes a resumed sweep keeps; `error` trials are measured again.
FINAL_STATUSES = ("ok", "oom", "skipped")


def done_trials(previous: Sequence[Record]) -> set[tuple[str, int, bool]]:
    """(configuration key, round, twin) of a resumed run's trials that are not measured again
    (a record without trials, from before them, is its own round 0)."""
    done = set()
    for record in previous:
        if record.config_key is None:  # matches no configuration
            continue
        for trial in record.trials or [dict(round=0, twin=False, status=record.status)]:
            if trial["status"] in FINAL_STATUSES:
                done.add((record.config_key, trial["round"], trial["twin"]))
    return done


def run_sweep(sweep: Sweep, folder: RunFolder, environment: dict,
              on_start: Callable[[trials.Slot, Config], None] | None = None,
              on_done: Callable[[trials.Slot, Record], None] | None = None,
              previous: Sequence[Record] = ()) -> list[Record]:
    """Measure every configuration of the sweep in its trials (`Sweep.schedule`: interleaved
    rounds), rewriting the run folder after each trial.

    A trial that fails is recorded with its status and the sweep goes on; whatever was
    measured before an interruption is already on disk, and the trial it stopped is recorded
    as an error saying what stopped it (Ctrl-C, SIGTERM, Slurm's time limit or scancel),
    which a resumed run measures again. A resumed run's trials (`previous`)
    that reached a final status are kept instead of measured again. Configurations their plan
    refuses are recorded as skipped, once.
    """
    configs = sweep.configs
    folder.write_environment(environment)
    kept = {r.config_key: r for r in previous}
    by_key: dict[str, Record] = {}
    for index, config in enumerate(configs):
        if config.key() in kept:
            by_key[config.key()] = dataclasses.replace(kept[config.key()], config_index=index)
        elif not config.plan.runs:
            by_key[config.key()] = run_config(config, folder.run_id, index, environment)

    def records() -> list[Record]:
        ordered = [by_key[c.key()] for c in configs if c.key() in by_key]
        add_comparisons(ordered)
        return ordered

    for slot in sweep.schedule(done_trials(previous)):
        config = configs[slot.index]
        if on_start:
            on_start(slot, config)
        started = time.perf_counter()
        interrupted = None
        try:
            measured = run_config(config, folder.run_id, slot.index, environment)
        except KeyboardInterrupt as interrupt:  # recorded as stopped (not final), then raised
            interrupted = interrupt
            measured = Record(**planned_fields(config, folder.run_id, slot.index),
                              status="error", reason=launch.interruption_reason(interrupt),
                              environment=dict(environment))
        trial = trials.trial_of(measured, slot.round, slot.twin, time.perf_counter() - started)
        record = trials.with_trial(by_key.get(config.key()), measured, trial, sweep.repeats,
                                   sweep.shuffle_seed)
        by_key[config.key()] = record
        folder.write_timeline(record)
        folder.write_records(records())
        if interrupted is not None:
            raise interrupted
        if on_done:
            on_done(slot, record)
    folder.write_records(records())  # kept and skipped records too
    return records()
