"""The record of one measured configuration: a typed dataclass whose fields are the schema of
records.json and records.csv, with the statistics derived from the measurement."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COMPARED", "FIELDS", "LIST_FIELDS", "PER_TRIAL", "STATUSES", "Record", "axis_label",
           "columns", "compile_variant", "declared", "has_interval", "heading",
           "is_number", "optional"]

STATUSES = ("ok", "oom", "error", "skipped")
# --compile compiled each module a strategy runs whole until it compiled each block, from
# this time (UTC, as records' timestamp_utc): how a compiled record from before
# compile_scope was compiled.
PER_BLOCK_SINCE = "2026-11-26T21:59:57+00:00"


VIEWS = ("readme", "table", "narrow")
PER_TRIAL_KINDS = ("log", "linear", "kept")


def declared(label: str | None = None, unit: str = "", heading: str | None = None, *,
             shown_in: tuple[str, ...] = (), per_trial: str | None = None,
             compared: bool = False, optional: bool = False, default=None):
    """A field declared here once, with what every reader of it derives from that: its label,
    unit and column heading (`axis_label`, `heading`); the views that show it, in field order
    (`columns`: "readme", the run README's record table; "table", the table printed after a
    run with --wide-table; "narrow", that table by default); `per_trial`, where each trial
    measures it ("log" or "linear": the record gives its geometric or arithmetic mean over
    the ok trials and its interval; "kept": each trial keeps it as measured); and `compared`,
    where it is a ratio paired by round against another record (parbench.results.comparisons),
    with its interval. An `optional` column is printed only where some record has a value
    (MFU: on GPUs measure.flops knows)."""
    assert set(shown_in) <= set(VIEWS) and per_trial in (None, *PER_TRIAL_KINDS)
    assert label or not shown_in, "a shown field needs a label"
    views = set(shown_in) | ({"table"} if "narrow" in shown_in else set())
    return field(default=default, metadata={
        "label": label, "unit": unit, "heading": heading or label, "views": views,
        "per_trial": per_trial, "compared": compared, "optional": optional})


@dataclass
class Record:
    """One configuration's outcome. Every field is written for every record (None where it
    does not apply); `environment` (parbench.machine.environment) is written after them, flat."""

    # Which run and configuration; what came of it.
    run_id: str | None = None
    config_index: int | None = None
    config_key: str | None = None  # what --resume finds the configuration by
    status: str | None = declared("status", shown_in=("readme", "table"))  # one of STATUSES
    reason: str | None = None  # why it is not ok
    # What was trained, and how.
    strategy: str | None = None  # a registered name
    # As planned, defaults resolved (Options.given); as given where no plan could be made.
    strategy_options: dict | None = None
    # Every option's value as the strategy ran it, defaults included (Options.settings):
    # which DDP or FSDP settings a record used even where its label names none.
    strategy_settings: dict | None = None
    # The parallel degrees as planned (strategies.ParallelDims): replicas, shards,
    # tensor_parallel, stages, stages_per_rank, schedule, micro_batch.
    parallel_dims: dict | None = None
    model: str | None = None
    image_size: int | None = None
    num_classes: int | None = None
    precision: str | None = declared("precision", shown_in=("readme",))
    channels_last: bool | None = declared("channels last", shown_in=("readme",))
    compile: bool | None = declared("compiled", shown_in=("readme",))
    # Compiled: what torch.compile compiled as one ("block", "model") and its mode; None eager.
    compile_scope: str | None = None
    compile_mode: str | None = None
    # Whether torch.compile captured CUDA graphs: True under a mode of CUDA graphs on CUDA
    # devices (a graph torch cannot capture fails the configuration), False where it did not
    # (another mode, or a CPU, where torch skips them); None eager.
    cuda_graphs: bool | None = None
    cudnn_benchmark: bool | None = None  # torch.backends.cudnn.benchmark in every process
    global_batch: int | None = None
    # strong: the global batch was given; weak: the batch per device was (global = it x devices)
    scaling: str | None = None
    stages: int | None = None
    partition: str | None = None  # where the model was cut
    split_size: int | None = None  # the micro-batch size trained on (Options.micro_batch_size)
    micro_batches: int | None = declared("micro-batches per step", "", "M", shown_in=("readme",))
    bubble_fraction: float | None = None  # GPipe's theoretical idle share (K-1)/(M+K-1)
    # The traced step's idle share per stage (timeline): the mean and the worst stage.
    measured_bubble_fraction: float | None = declared(per_trial="linear")
    measured_bubble_fraction_worst: float | None = None
    # Per stage (rank), the most micro-batches whose activations were held at once.
    in_flight_micro_batches: list | None = None
    # [stage, micro-batch, phase, start s, end s] of a step traced action by action after the
    # measured ones (measure.timeline), and the model stage as a sixth item where a rank holds
    # several.
    timeline: list | None = None
    traced_step_time_s: float | None = None  # that step's own time: untimed, after the measured
    data: str | None = None  # "synthetic" or the image folder
    # Where it ran.
    # the logical devices used, comma separated
    devices: str | None = declared("devices", shown_in=("readme", "narrow"))
    physical_devices: str | None = None
    nodes: int | None = None
    device_kind: str | None = None
    world_size: int | None = None  # processes
    backend: str | None = None  # process group, for one process per device
    emulated: bool | None = None  # several logical devices on one physical device
    threads_per_device: int | None = None
    torch_threads: int | None = None
    memory_cap_mib: int | None = None
    device_memory_mib: int | None = None
    warmup_steps: int | None = None
    measured_steps: int | None = None
    # Time.
    # images per second over the measured steps
    throughput_ips: float | None = declared("throughput", "images/s", "img/s",
                                            shown_in=("readme", "narrow"), per_trial="log")
    # achieved_tflops / peak_tflops (below): the throughput as a share of the devices' peak
    mfu: float | None = declared("model FLOP utilisation", "", "MFU", shown_in=("readme", "table"),
                                 optional=True)
    step_time_median_s: float | None = declared("median step", "s", "median step s",
                                                shown_in=("readme",), per_trial="log")
    step_time_p90_s: float | None = declared("p90 step", "s", "p90 step s", shown_in=("readme",))
    step_time_min_s: float | None = None
    step_time_max_s: float | None = None
    step_times_s: list | None = declared(per_trial="kept")  # per measured step, the slowest rank's
    # The host's time to queue a measured step's work, before waiting for the devices (median
    # over the measured steps, the slowest process's; over trials their geometric mean), and
    # whether the host bounds the step (measure.timing.host_bound: on GPUs, host time >= 90% of
    # the step; None on CPUs, where the host computes everything itself, and where the step
    # waits on the GPU inside itself by design: fp16's scaler, gloo on GPUs).
    host_time_median_s: float | None = declared(per_trial="log")
    host_bound: bool | None = None
    rank_step_times_s: list | None = None  # per rank, per step (one process per device)
    first_step_time_s: float | None = None
    compile_time_s: float | None = None  # the first warm-up step beyond a measured one
    # Trials (parbench.plan.trials): each measurement of this configuration, one a round in
    # interleaved rounds (the baseline's A/A twin marked `twin`), as Trial dicts. Throughput and
    # the median step above are then geometric means over the ok trials (trials.with_trial), and
    # what follows from them is rescaled; the other measured fields are the latest ok trial's.
    trials: list | None = None
    repeats: int | None = None  # rounds asked for
    round_seed: int | None = None  # round r's order: random.Random(round_seed + r).shuffle
    # name of a figure of merit -> [low, high], its 95% interval over trials (stats.METHOD);
    # absent with one trial.
    intervals: dict | None = None
    interval_method: str | None = None
    # Against the baseline, from the speedup's interval: faster, slower or within noise.
    verdict: str | None = declared("against the baseline", "", "verdict")
    # The baseline against itself (its A/A twin, the same round): the mean ratio and its
    # verdict; the run's noise floor.
    aa_ratio: float | None = None
    aa_verdict: str | None = None
    # Against other records of the same run (parbench.results.comparisons), geometric means of
    # ratios paired by round.
    speedup_vs_baseline: float | None = declared("speedup over single", "", "speedup",
                                                 shown_in=("readme", "narrow"), compared=True)
    # A cut model's speedup = micro_batch_effect x parallel_effect: single accumulating the same
    # micro-batches over single with the whole batch, then this record over that.
    micro_batch_effect: float | None = declared("micro-batch effect", "", "= micro-batch",
                                                shown_in=("readme", "table"), compared=True)
    parallel_effect: float | None = declared("parallel effect", "", "x parallel",
                                             shown_in=("readme", "table"), compared=True)
    # parallel_effect / devices used (at most 1)
    parallel_efficiency: float | None = declared(compared=True)
    device_efficiency: float | None = declared("efficiency: speedup / devices", "", "efficiency",
                                               shown_in=("readme", "table"), compared=True)
    # T(N) / (N x T(1)), the same strategy on one device (under weak scaling, at the same
    # batch per device: t_step(1) / t_step(N))
    scaling_efficiency: float | None = declared("scaling efficiency T(N) / (N x T(1))", "",
                                                "scaling", shown_in=("readme", "table"),
                                                compared=True)
    # Data parallel: the step split into compute and exposed communication. Compute: the
    # median of the same steps with communication off (Strategy.without_communication: DDP's
    # no_sync; FSDP without reduce-scatter and, gathered once, without all-gathers), timed
    # after the measured ones in the same run; exposed: the measured median minus it (noise
    # can make it slightly negative).
    compute_step_times_s: list | None = None
    compute_time_s: float | None = None
    exposed_comm_time_s: float | None = None
    exposed_comm_fraction: float | None = declared(per_trial="linear")  # of the median step
    # One rank (world size 1): no byte crosses a link, so the measured median minus the compute
    # is the wrapper's own work (DDP's reducer and its one-rank collective calls; FSDP's hooks,
    # DTensors and copies), recorded here and the exposed communication left None; and its
    # share of the median step (each trial's, for the mean over trials the figures show).
    wrapper_overhead_time_s: float | None = None
    wrapper_overhead_fraction: float | None = declared(per_trial="linear")
    # Bytes per step per rank: the gradient reduced (DDP: from its logging data; FSDP: counted
    # from its units), and the parameters all-gathered (FSDP).
    allreduce_bytes: int | None = None
    allgather_bytes: int | None = None
    # DDP's own times (_get_ddp_logging_data), seconds: means over the measured steps it
    # sampled (the first 10 iterations, then every 100th; the warm-up left out, and the last
    # measured step, whose times DDP logs at a later forward); None where it sampled none.
    ddp_forward_time_s: float | None = None
    ddp_backward_compute_time_s: float | None = None
    ddp_backward_comm_time_s: float | None = None
    ddp_overlap_time_s: float | None = None
    # Memory.
    peak_memory_mib: list | None = declared("peak memory per device", "MiB")  # per logical device
    peak_memory_max_mib: float | None = declared("peak memory on the fullest device", "MiB",
                                                 "peak MiB", shown_in=("readme", "narrow"))
    # max / mean over the devices
    memory_imbalance: float | None = declared("memory max / mean over devices", "", "mem max/mean",
                                              shown_in=("readme", "table"))
    memory_source: str | None = None  # how the peaks were obtained
    physical_peak_memory_mib: list | None = None
    memory_after_step_mib: list | None = None
    memory_growth_mib_per_step: float | None = None
    memory_leak_suspected: bool | None = None
    # Work and energy.
    # FLOPs as measure.flops states them: 2 per multiply-accumulate, forward + backward as
    # torch.utils.flop_counter counts them.
    flops_per_image: int | None = None
    achieved_tflops: float | None = None  # flops_per_image x throughput
    # The dense peak of the physical devices used, together, at this precision (a table of
    # GPU names, measure.flops.PEAK_TFLOPS; None on CPU or an unknown GPU), and
    # MFU (above) = achieved_tflops / peak_tflops.
    peak_tflops: float | None = None
    gpu_utilisation_pct: list | None = declared("GPU utilisation", "%", "GPU util %",
                                                shown_in=("readme",))
    gpu_memory_used_mib: list | None = None
    gpu_sampling: str | None = None
    gpu_energy_j: float | None = None
    images_per_joule: float | None = declared("images per joule", "img/J", "img/J",
                                             shown_in=("readme",))
    loss_first: float | None = None
    loss_last: float | None = None
    environment: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def device_count(self) -> int:
        return len(self.devices.split(",")) if self.devices else 0

    def to_dict(self) -> dict[str, Any]:
        """The flat form written to records.json and records.csv."""
        values = {name: getattr(self, name) for name in FIELDS}
        return {**values, **self.environment}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Record:
        """A record read back; keys that are not fields are its environment."""
        fields = {k: v for k, v in values.items() if k in FIELDS}
        environment = {k: v for k, v in values.items() if k not in FIELDS}
        return cls(**fields, environment=environment)


# Column order of records.csv: every field but the environment, whose keys follow.
FIELDS = tuple(f.name for f in dataclasses.fields(Record) if f.name != "environment")
# Fields holding a list or dict: JSON keeps them as they are; the CSV stores them as JSON text.
_HINTS = typing.get_type_hints(Record)
LIST_FIELDS = tuple(name for name in FIELDS
                    if {typing.get_origin(arg) or arg for arg in typing.get_args(_HINTS[name])}
                    & {list, dict})


_METADATA = {f.name: f.metadata for f in dataclasses.fields(Record) if f.metadata}
# Each trial's own figures (parbench.plan.trials.Trial): name -> "log", "linear" or "kept".
PER_TRIAL = {name: m["per_trial"] for name, m in _METADATA.items() if m["per_trial"]}
# The figures parbench.results.comparisons sets, against other records of the run.
COMPARED = tuple(name for name, m in _METADATA.items() if m["compared"])


def compile_variant(compile, scope, mode, measured_at) -> tuple[str, str] | None:
    """(scope, mode) a record's model was compiled with, None eager (compile None, False or
    NaN). A compiled record from before scopes and modes ran the default mode, per block, or
    whole where it was measured (`measured_at`, its timestamp_utc) before PER_BLOCK_SINCE."""
    if compile != True:  # noqa: E712 (numpy's True too)
        return None
    if not isinstance(scope, str):
        early = isinstance(measured_at, str) and measured_at < PER_BLOCK_SINCE
        scope = "model" if early else "block"
    return scope, mode if isinstance(mode, str) else "default"


def columns(view: str) -> tuple[str, ...]:
    """The fields `view` shows ("readme", "table" or "narrow"), in field order."""
    assert view in VIEWS, view
    return tuple(name for name, m in _METADATA.items() if view in m["views"])


def has_interval(name: str) -> bool:
    """Whether a record gives field `name`'s interval over trials (in `intervals`)."""
    meta = _METADATA.get(name)
    return meta is not None and (meta["per_trial"] in ("log", "linear") or meta["compared"])


def is_number(name: str) -> bool:
    """Whether field `name` holds a number (an int or a float; a bool is not one)."""
    return name in _HINTS and bool({int, float} & set(typing.get_args(_HINTS[name])))


def optional(name: str) -> bool:
    """Whether column `name` is printed only where some record has a value."""
    return bool(_METADATA[name]["optional"])


def heading(name: str) -> str:
    """A table's column heading for field `name` (`img/s`)."""
    return _METADATA[name]["heading"]


def axis_label(name: str) -> str:
    """A figure's axis label for field `name`: its label and unit (`throughput (images/s)`)."""
    unit = _METADATA[name]["unit"]
    return _METADATA[name]["label"] + (f" ({unit})" if unit else "")
