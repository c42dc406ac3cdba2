"""Timing models of the cut-model strategies from a profile and a link: single (whole batch or
accumulating micro-batches), model-parallel, and every pipeline schedule by replaying torch's
own action list. Every result is a Prediction, labelled as one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from parbench.advisor.models.links import AnyLink
from parbench.advisor.models.memory import NO_OVERHEADS, DeviceOverheads, RankMemory, mib
from parbench.advisor.models.schedule_replay import Replayed, StageTimes, replay, schedule_actions
from parbench.advisor.profiling.profile import Profile
from parbench.strategies.partition import Partition
from parbench.strategies.schedules import SCHEDULES

__all__ = ["KIND", "Prediction", "model_parallel", "pipeline", "single",
           "tick_pipeline", "tick_step_s"]

KIND = "predicted"


@dataclass(frozen=True)
class Prediction:
    """A strategy's predicted step: never a measurement (kind is always `predicted`)."""

    strategy: str
    global_batch: int
    step_time_s: float
    memory: tuple[RankMemory, ...]  # per device (rank, or logical device of one process)
    # The share of the devices' time in none of their compute: a pipeline's bubble, ddp's
    # exposed communication.
    bubble: float | None = None
    spans: tuple[tuple, ...] = field(default=(), repr=False)  # a predicted timeline
    # What it counts beyond compute and the link (parbench.advisor.profiling.fixed_costs): seconds.
    fixed_cost_s: float = 0.0
    # What each device holds beyond the counted tensors (a GPU's; none on a CPU).
    overheads: DeviceOverheads = NO_OVERHEADS
    kind: str = KIND

    @property
    def throughput_ips(self) -> float:
        return self.global_batch / self.step_time_s

    @property
    def peak_memory_mib(self) -> tuple[float, ...]:
        """Per device: every tensor it holds at its fullest (RankMemory.peak_mib), with a
        GPU's transients: what torch.cuda.max_memory_allocated reads."""
        return tuple(rank.peak_mib + mib(self.overheads.transient_bytes)
                     for rank in self.memory)

    @property
    def reserved_memory_mib(self) -> tuple[float, ...]:
        """Per device: what its caching allocator reserves at the peak (what a memory cap,
        torch.cuda.set_per_process_memory_fraction, limits)."""
        return tuple(peak + mib(self.overheads.reserved_extra_bytes)
                     for peak in self.peak_memory_mib)

    @property
    def device_memory_mib(self) -> tuple[float, ...]:
        """Per device: all the process takes of it (what must fit the device's memory)."""
        return tuple(reserved + mib(self.overheads.context_bytes)
                     for reserved in self.reserved_memory_mib)

    @property
    def counted_memory_mib(self) -> tuple[float, ...]:
        """Per device: what parbench's measured figure counts (RankMemory.counted_mib)."""
        return tuple(rank.counted_mib for rank in self.memory)


def single(profile: Profile, micro_batches: int) -> Prediction:
    """One device running `micro_batches` micro-batches of the profiled size one after the other,
    accumulating their gradients (one micro-batch: the whole batch at once), then the
    optimiser's step."""
    saved = sum(b.saved_bytes for b in profile.blocks)
    return Prediction("single", profile.micro_batch * micro_batches,
                      micro_batches * profile.step_compute_s + profile.optimizer_s,
                      (RankMemory.of(profile.parameter_bytes, saved),),
                      overheads=profile.overheads)


def model_parallel(profile: Profile, partition: Partition, link: AnyLink) -> Prediction:
    """The stages one after the other on the whole batch (the profile's micro-batch): forward
    through every stage, then backward; each cut sends the activation and returns its gradient;
    then one process steps every stage's optimiser."""
    times = profile.stage_times(partition)
    transfers = sum(2 * link.transfer_s(size) for size in profile.cut_bytes(partition))
    step = (sum(t.forward_s + t.input_grad_s + t.weight_grad_s for t in times) + transfers
            + profile.optimizer_s)
    ranges = partition.stage_ranges()
    memory = tuple(RankMemory.of(sum(profile.blocks[i].parameter_bytes for i in r),
                                 sum(profile.blocks[i].saved_bytes for i in r)) for r in ranges)
    return Prediction("model-parallel", profile.micro_batch, step, memory,
                      overheads=profile.overheads)


def tick_pipeline(profile: Profile, partition: Partition, micro_batches: int) -> Prediction:
    """parbench's `pipeline` (the tutorial's, in one process): in clock tick t stage k works on
    micro-batch t - k, and a tick ends when its slowest stage does; all forwards, then all
    backwards from the last stage, then the optimiser (one process). Its stages pass tensors
    within one process: no link."""
    times = profile.stage_times(partition)
    slowdown = _slowdown(profile)
    stages, schedule = len(times), tick_step_s(times, micro_batches, slowdown)
    busy = sum(_full(times[k]) * slowdown(len(ks)) for ks in _ticks(stages, micro_batches)
               for k in ks)
    ranges = partition.stage_ranges()
    memory = tuple(RankMemory.of(sum(profile.blocks[i].parameter_bytes for i in r),
                                 micro_batches * sum(profile.blocks[i].saved_bytes for i in r))
                   for r in ranges)
    # The bubble is the schedule's idle share, the optimiser apart (as a measured timeline's).
    return Prediction("pipeline", profile.micro_batch * micro_batches,
                      schedule + profile.optimizer_s, memory, 1 - busy / (stages * schedule),
                      overheads=profile.overheads)


def tick_step_s(times: list[StageTimes], micro_batches: int,
                slowdown: Callable[[int], float] = lambda computing: 1.0) -> float:
    """The tick pipeline's step: each tick as long as its slowest stage, forwards then
    backwards from the last stage; in a tick where k stages compute, each takes `slowdown(k)`
    times its time (stages sharing one CPU)."""
    stages = len(times)
    ticks = _ticks(stages, micro_batches)
    step = sum(max(times[k].forward_s for k in ks) * slowdown(len(ks)) for ks in ticks)
    return step + sum(max(_backward(times[stages - 1 - k]) for k in ks) * slowdown(len(ks))
                      for ks in ticks)


def _ticks(stages: int, micro_batches: int) -> list[list[int]]:
    """The stages that compute in each clock tick (the same in the forward and backward)."""
    return [[k for k in range(stages) if 0 <= t - k < micro_batches]
            for t in range(micro_batches + stages - 1)]


def _backward(times: StageTimes) -> float:
    return times.input_grad_s + times.weight_grad_s


def _full(times: StageTimes) -> float:
    return times.forward_s + _backward(times)


def _slowdown(profile: Profile, side_by_side: int = 1) -> Callable[[int], float]:
    """How many times its stage time (the profile's: every emulated device computing at once)
    an action takes with k of the schedule's ranks computing; `side_by_side` identical
    schedules run beside it in step, so k x side_by_side devices compute then. 1 where the
    devices do not share a CPU."""
    sharing = profile.sharing
    if sharing is None:
        return lambda computing: 1.0
    return lambda computing: sharing.of(computing * side_by_side) / sharing.slowdown


def pipeline(schedule: str, profile: Profile, partition: Partition, ranks: int,
             micro_batches: int, link: AnyLink, side_by_side: int = 1,
             action_s: float = 0.0) -> Prediction:
    """`schedule` (a key of SCHEDULES) over `ranks` devices holding `partition`'s stages as
    parbench places them, `micro_batches` micro-batches of the profiled size: torch's action
    list replayed with the profiled stage times, `action_s` more for each action (the
    runtime's fixed cost), and the link's transfer times (`side_by_side`: the identical
    pipelines running beside it, which share the CPU with it)."""
    chosen = SCHEDULES[schedule]
    per_rank = partition.stages // ranks
    if partition.stages % ranks or (per_rank > 1) != chosen.multi_stage:
        wants = "several stages" if chosen.multi_stage else "one stage"
        raise ValueError(f"pipeline-{schedule} runs {wants} per rank; {partition.stages} "
                         f"stages on {ranks} ranks do not fit it")
    actions = schedule_actions(chosen.torch_class, ranks, micro_batches, per_rank)
    times = profile.stage_times(partition)
    if chosen.splits_backward:  # torch's first stage has no input gradient: W is all of it
        first = times[0]
        times[0] = StageTimes(first.forward_s, 0.0, first.input_grad_s + first.weight_grad_s)
    cut_bytes = profile.cut_bytes(partition)
    replayed = replay(actions, times, lambda cut: link.transfer_s(cut_bytes[cut]),
                      _slowdown(profile, side_by_side), action_s)
    ranges = partition.stage_ranges()
    saved = [sum(profile.blocks[i].saved_bytes for i in r) for r in ranges]
    memory, ends = [], []
    for rank, rank_actions in enumerate(actions):
        stages = {stage for stage, _, _ in rank_actions}
        parameters = sum(profile.blocks[i].parameter_bytes for s in stages for i in ranges[s])
        memory.append(RankMemory.of(parameters, _peak_saved(replayed, rank, saved)))
        # Each rank steps its own stages' optimiser once its last action is done.
        last = max(span[4] for span in replayed.spans if span[0] == rank)
        ends.append(last + profile.optimizer_share_s(parameters))
    # One stage per rank: rows are stages, as in a measured timeline of such a schedule.
    spans = replayed.spans if per_rank > 1 else tuple(span[:5] for span in replayed.spans)
    return Prediction(f"pipeline-{schedule}", profile.micro_batch * micro_batches, max(ends),
                      tuple(memory), replayed.bubble, spans, overheads=profile.overheads)


def _peak_saved(replayed: Replayed, rank: int, saved: list[int]) -> int:
    """The most activation bytes `rank` holds at once: a forward's end holds its stage's saved
    tensors until that micro-batch's backward ends (B; where the backward is split, W: the
    weight gradient needs the inputs the input gradient left)."""
    events = sorted((span[4], 0 if span[2] in "BW" else 1, span[5]) for span in replayed.spans
                    if span[0] == rank and span[2] in "FBW")
    held = peak = 0
    for _, is_forward, stage in events:
        held += saved[stage] if is_forward else -saved[stage]
        peak = max(peak, held)
    return peak
