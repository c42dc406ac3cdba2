"""What a strategy's step costs beyond its profiled compute and its bytes on the link, measured
on the device at hand: the same strategy, ranks and options run through the core's launcher on
micro-batches of PROBE_IMAGES images (the probe), less what the models predict for the probe
without it. A multi-process pipeline is probed at two micro-batch counts: what the longer
costs beyond the shorter is per action (the pipelining runtime's own work, its sends' and
receives' latency), what both cost beyond that is per step (pipeline-fsdp's gathers' and
reductions' hooks and copies, the schedule's setup). A data-parallel layout is probed once, its
cost per step (DDP's hooks and bucket copies, FSDP's unit hooks and DTensor copies, a
collective's waits for the slower rank beyond the one a step that emulated devices' lock-step
contention counts: a model's buckets and units are the same at any batch). A one-rank group
costs what it measures. A record's probes are measured in PROBE_ROUNDS rounds, each probe once
a round in turn, each probe's step the median of its rounds' steps, and kept together: a slow
spell of the machine during one probe, or two probes measured at different times, would
otherwise move the difference of the two, and with it the cost per action, by several times.
Kept beside the profiles."""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parbench.advisor.profiling.cache import cached, settings_key
from parbench.advisor.runs.fields import number
from parbench.families.workloads import Workload
from parbench.launch import measure
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config
from parbench.strategies import Layout, layout_of

__all__ = ["NO_FIXED_COSTS", "PROBE_IMAGES", "PROBE_ROUNDS", "FixedCosts", "load_or_probe",
           "measure_in_rounds", "measure_probe", "probe_records", "probed", "probes_path",
           "solve_action_cost"]

FIXED_COSTS_VERSION = 3  # bump when what is measured changes: older caches are measured again
# Images a micro-batch (a data-parallel rank's share) holds in the probe: the fewest that
# BatchNorm trains on where a ResNet's last block is 1x1 pixel, so compute is least.
PROBE_IMAGES = 2
# A probe's launches (rounds), each its warm-up steps then its measured steps: a slow spell of
# the machine shorter than a round slows one round of a probe, which the others outvote.
PROBE_WARMUP, PROBE_STEPS, PROBE_ROUNDS = 2, 3, 3
PROBE_TIMEOUT_S = 300.0  # a launch (one round) is seconds of work: one that hangs is ended
# Per action: the scheduled pipelines (each rank a process). Per step: the data-parallel ones.
_PER_ACTION = (Layout.SCHEDULED_PIPELINE, Layout.SHARDED_PIPELINES)
_PER_STEP = (Layout.REPLICAS, Layout.SHARDED_REPLICAS, Layout.HYBRID_SHARDED)


@dataclass(frozen=True)
class FixedCosts:
    """Seconds a prediction adds beyond compute and the link: to every compute action of a
    multi-process pipeline (F, B, I or W), and once to a step (a pipeline's beyond its
    actions', a data-parallel layout's); `probe` says what was measured (empty: nothing, as
    for hardware that is not here)."""

    per_action_s: float = 0.0
    per_step_s: float = 0.0
    probe: str = ""


NO_FIXED_COSTS = FixedCosts()


def probed(record: dict) -> bool:
    """Whether a record's layout has fixed costs a probe measures."""
    return layout_of(str(record["strategy"])) in _PER_ACTION + _PER_STEP


def probe_records(record: dict) -> tuple[dict, ...]:
    """The probes of `record`'s configuration: its strategy, devices, ranks and options, on
    micro-batches of PROBE_IMAGES images, never the record's own configuration. A pipeline's
    two: at 2 and 4 micro-batches a rank of its stages (one a rank more where that is the
    record itself), or, where the record has fewer than 2 a rank, at the record's own count
    (in micro-batches of twice PROBE_IMAGES where the record's are PROBE_IMAGES) and 2 a rank,
    so its fixed costs are measured there, not extrapolated below the probes. A
    data-parallel layout's one, a rank PROBE_IMAGES images."""
    layout = layout_of(str(record["strategy"]))
    options = dict(record.get("strategy_options") or {})
    ranks = int(record.get("world_size") or 1)
    if layout in _PER_ACTION:
        pipelines = int(options.get("pipelines") or 1)
        stages = ranks // pipelines
        recorded = int(number(record.get("micro_batches")) or 0)
        below = 0 < recorded < 2 * stages
        probes = []
        for micro_batches in ((recorded, 2 * stages) if below else (2 * stages, 4 * stages)):
            images = PROBE_IMAGES
            if _is_split(record, images, images * micro_batches * pipelines):
                if below:  # the record's own count: larger micro-batches, as few
                    images *= 2
                else:
                    micro_batches += stages
            probes.append({**record, "strategy_options": {**options, "split_size": images},
                           "split_size": images, "micro_batches": micro_batches,
                           "global_batch": images * micro_batches * pipelines})
        return tuple(probes)
    images = 2 * PROBE_IMAGES if int(record["global_batch"]) == PROBE_IMAGES * ranks \
        else PROBE_IMAGES
    return ({**record, "strategy_options": options, "global_batch": images * ranks},)


def _is_split(record: dict, split: int, batch: int) -> bool:
    """Whether the record is `batch` images in micro-batches of `split` (the probe itself)."""
    recorded = number(record.get("split_size"))
    return recorded == split and int(record["global_batch"]) == batch


def _config(probe: dict, workload: Workload) -> Config:
    """The probe as a configuration the core's launcher runs; a ValueError where it is refused
    here."""
    options = {k: v for k, v in probe["strategy_options"].items() if v is not None}
    config = Config(str(probe["strategy"]), workload, int(probe["global_batch"]),
                    parse_devices(str(probe["devices"])), warmup=PROBE_WARMUP,
                    steps=PROBE_STEPS, threads_per_device=int(probe.get("threads_per_device") or 1),
                    options=options, timeout_s=PROBE_TIMEOUT_S,
                    backend=str(probe.get("backend") or "auto"))
    reason = config.refusal() or config.unavailable_reason()
    if reason:
        raise ValueError(f"the fixed-cost probe of {probe['strategy']} cannot run here: {reason}")
    return config


def measure_probe(probe: dict, workload: Workload) -> dict:
    """The probe run once through the core's launcher: its median step (`step_s`) over its
    PROBE_STEPS measured steps (`step_times_s`), `global_batch`, `partition` and
    `micro_batches`."""
    config = _config(probe, workload)
    measured = measure(config)
    assert measured is not None  # rank 0 of a launcher of this machine's own
    return {"step_s": statistics.median(measured.step_times_s),
            "step_times_s": list(measured.step_times_s), "global_batch": config.global_batch,
            "partition": measured.partition, "micro_batches": measured.micro_batches}


def measure_in_rounds(probes: tuple[dict, ...], workload: Workload,
                      rounds: int = PROBE_ROUNDS) -> list[dict]:
    """Each probe measured once a round, in turn, for `rounds` rounds (none where one is
    refused here), as `load_or_probe` keeps them: `step_s` the median of a probe's steps over
    every round (`steps_by_round_s`), its `global_batch`, and the `partition` and
    `micro_batches` of its last round (a cut balanced by time may move between rounds)."""
    for probe in probes:
        _config(probe, workload)
    taken: list[list[dict]] = [[] for _ in probes]
    for _ in range(rounds):
        for each, probe in zip(taken, probes, strict=True):
            each.append(measure_probe(probe, workload))
    return [{"step_s": statistics.median(t for m in each for t in m["step_times_s"]),
             "steps_by_round_s": [m["step_times_s"] for m in each],
             **{key: each[-1][key] for key in ("global_batch", "partition", "micro_batches")}}
            for each in taken]


def solve_action_cost(predicted_step: Callable[[float], float], measured_s: float) -> float:
    """The cost per action that makes `predicted_step(cost)` (increasing in it) equal the
    measured seconds: 0 where the prediction without it is already as slow (no cost is
    negative), by bisection to a microsecond."""
    if predicted_step(0.0) >= measured_s:
        return 0.0
    low, high = 0.0, max(measured_s, 1e-3)
    while predicted_step(high) < measured_s:  # widened until it brackets the cost
        low, high = high, 2 * high
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (middle, high) if predicted_step(middle) < measured_s else (low, middle)
    return (low + high) / 2


def probes_path(cache: Path, probes: tuple[dict, ...], workload: Workload) -> Path:
    """Where `load_or_probe` keeps a record's probes' measurements in `cache`: one file named
    by every probe's size, so probes measured together are read together."""
    first = probes[0]
    options = {k: v for k, v in first["strategy_options"].items()
               if k not in ("split_size", "balance")}
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
    settings = settings_key(workload, str(first["device_kind"]),
                            int(first.get("threads_per_device") or 1), PROBE_IMAGES)
    devices = len(str(first["devices"]).split(","))
    return (cache / f"fixed-{first['strategy']}-{digest}-{settings}-x{devices}"
                    f"{''.join(_size(probe) for probe in probes)}.json")


def _size(probe: dict) -> str:
    """A probe's images, and its micro-batch's where a pipeline's is not PROBE_IMAGES (it may
    hold as many images as another probe of the same configuration)."""
    split = number(probe.get("split_size"))
    sized = f"-s{int(split)}" if layout_of(str(probe["strategy"])) in _PER_ACTION \
        and split and split != PROBE_IMAGES else ""
    return f"{sized}-g{probe['global_batch']}"


def load_or_probe(cache: Path, record: dict, workload: Workload,
                  predict: Callable[[dict, FixedCosts], float]) -> FixedCosts:
    """`record`'s fixed costs from its probes (measured together and kept where they are not):
    `predict(probe record, costs)` is the models' step for a probe with those costs."""
    if not probed(record):
        return NO_FIXED_COSTS
    wanted = probe_records(record)
    stored = cached(probes_path(cache, wanted, workload), FIXED_COSTS_VERSION,
                    lambda: {"probes": measure_in_rounds(wanted, workload)})
    probes, steps = [], []
    for probe, each in zip(wanted, stored["probes"], strict=True):
        probes.append({**probe, "partition": each["partition"] or probe.get("partition"),
                       "micro_batches": each["micro_batches"] or probe.get("micro_batches")})
        steps.append(each["step_s"])
    label = _label(probes, steps)
    if len(probes) == 1:
        extra = steps[0] - predict(probes[0], NO_FIXED_COSTS)
        return FixedCosts(per_step_s=max(0.0, extra), probe=label)
    short, long = probes

    def longer_by(cost: float) -> float:  # the longer probe's step beyond the shorter's
        costs = FixedCosts(per_action_s=cost)
        return predict(long, costs) - predict(short, costs)

    # per action: what the longer probe's extra actions cost beyond their compute
    cost = solve_action_cost(longer_by, steps[1] - steps[0])
    # per step: what both probes measured beyond their actions' costs, on average
    left = [measured - predict(probe, FixedCosts(per_action_s=cost))
            for probe, measured in zip(probes, steps, strict=True)]
    return FixedCosts(per_action_s=cost, per_step_s=max(0.0, statistics.fmean(left)),
                      probe=label)


def _label(probes: list[dict], steps: list[float]) -> str:
    """What the probes were and measured, as predictions.csv says it."""
    first = probes[0]
    measured = " and ".join(f"{step:.4g}" for step in steps)
    if len(probes) == 1:
        images = f"{int(first['global_batch']) // int(first.get('world_size') or 1)} a rank"
        return (f"{first['strategy']} on {first['global_batch']} images ({images}): "
                f"{measured} s measured")
    sizes = {int(probe["split_size"]) for probe in probes}
    if len(sizes) == 1:
        batches = " and ".join(str(probe["global_batch"]) for probe in probes)
        return (f"{first['strategy']} on {batches} images ({sizes.pop()} a micro-batch): "
                f"{measured} s measured")
    each = " and ".join(f"{probe['global_batch']} ({int(probe['split_size'])} a micro-batch)"
                        for probe in probes)
    return f"{first['strategy']} on {each} images: {measured} s measured"
