"""A pipeline schedule's step predicted by replaying torch's own action list: each rank runs its
actions in torch's order, each as soon as its inputs have arrived, for its profiled time."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

__all__ = ["Actions", "Replayed", "StageTimes", "replay", "schedule_actions"]

FORWARD, FULL_BACKWARD, INPUT_GRAD, WEIGHT_GRAD = "F", "B", "I", "W"


@dataclass(frozen=True)
class StageTimes:
    """One model stage's compute for one micro-batch, in seconds: forward, the backward to its
    input (I) and to its weights (W); a full backward (B) is the two."""

    forward_s: float
    input_grad_s: float
    weight_grad_s: float

    def of(self, kind: str) -> float:
        return {FORWARD: self.forward_s, INPUT_GRAD: self.input_grad_s,
                WEIGHT_GRAD: self.weight_grad_s,
                FULL_BACKWARD: self.input_grad_s + self.weight_grad_s}[kind]


@dataclass(frozen=True)
class Replayed:
    """The predicted step: spans as a measured timeline holds them, [rank, micro-batch, kind,
    start s, end s, model stage], so the same Gantt draws both."""

    ranks: int
    spans: tuple[tuple, ...]

    @property
    def step_time_s(self) -> float:
        return max(span[4] for span in self.spans)

    def busy_s(self, rank: int) -> float:
        return sum(s[4] - s[3] for s in self.spans if s[0] == rank)

    @property
    def bubble(self) -> float:
        """The share of the ranks' time in none of their actions (as the measured bubble)."""
        busy = sum(self.busy_s(rank) for rank in range(self.ranks))
        return 1 - busy / (self.ranks * self.step_time_s)


Actions = tuple[tuple[tuple[int, str, int], ...], ...]  # per rank: (stage, kind, micro-batch)


# torch builds its IR through mocked schedules (about 25 ms a call): a prediction's bisection
# replays one schedule hundreds of times, so each is built once
@functools.lru_cache(maxsize=256)
def schedule_actions(torch_class, ranks: int, micro_batches: int,
                     stages_per_rank: int) -> Actions:
    """Per rank, its compute actions in torch's order, as (model stage, kind, micro-batch):
    torch's own schedule IR (`_schedule_visualizer.get_schedule_ops`), with its spacing and
    gradient reductions left out and DualPipeV's overlapped pairs run one after the other (one
    stream, as on a CPU)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    from torch.distributed.pipelining.schedules import _ComputationType as Type

    kinds = {Type.FORWARD: FORWARD, Type.FULL_BACKWARD: FULL_BACKWARD,
             Type.BACKWARD_INPUT: INPUT_GRAD, Type.BACKWARD_WEIGHT: WEIGHT_GRAD}
    single_stage = issubclass(torch_class, PipelineScheduleSingle)
    ops = get_schedule_ops(torch_class, ranks, micro_batches,
                           num_stages_per_rank=None if single_stage else stages_per_rank)
    per_rank = [[a for action in rank_ops if action is not None
                 for a in (action.sub_actions or (action,))
                 if a.computation_type in kinds] for rank_ops in ops]
    # Every compute action has a micro-batch (torch's IR types it optional for the others).
    actions = [[(a.stage_index, kinds[a.computation_type], cast(int, a.microbatch_index))
                for a in rank_ops] for rank_ops in per_rank]
    if single_stage:
        actions = [_in_micro_batch_order(rank_actions) for rank_actions in actions]
    return tuple(tuple(rank_actions) for rank_actions in actions)


def _in_micro_batch_order(actions: list[tuple[int, str, int]]) -> list[tuple[int, str, int]]:
    """Single-stage schedules run a loop of their own; their IR is only a picture of it, and
    torch 2.14's numbers the last rank's 1F1B forwards from 1 (F1..F4 for 4 micro-batches).
    The loops run each kind of action in micro-batch order, so the replay renumbers them so."""
    seen: dict[str, int] = {}
    renumbered = []
    for stage, kind, _ in actions:
        renumbered.append((stage, kind, seen.get(kind, 0)))
        seen[kind] = seen.get(kind, 0) + 1
    return renumbered


def replay(actions: Sequence[Sequence[tuple[int, str, int]]], stage_times: Sequence[StageTimes],
           transfer_s: Callable[[int], float] = lambda stage: 0.0,
           slowdown: Callable[[int], float] = lambda computing: 1.0,
           action_s: float = 0.0) -> Replayed:
    """Run `actions` (per rank, in order) as a list schedule: an action starts when its rank is
    free and its inputs are there; a forward needs the previous stage's forward of the same
    micro-batch, a backward (B or I) its own forward and the next stage's backward, a weight
    gradient its input gradient. Crossing ranks adds `transfer_s(stage)`: the time to move the
    activation (or its gradient) at the cut after `stage`. The sender does not wait for it
    (torch's single-stage loops do wait for their sends, which on one link costs a transfer
    per cut and micro-batch at most: small beside a stage's compute here).

    Every action also costs `action_s` beyond its compute (the pipelining runtime's own work
    for it, measured: parbench.advisor.profiling.fixed_costs), slowed alike where ranks share
    a processor.

    Ranks that share a processor (emulated devices on one CPU) slow each other only while they
    compute at once: with k ranks computing, each action runs `slowdown(k)` times as long as
    its stage time (processor sharing, the time advanced from one start or end to the next)."""
    rank_of = {stage: rank for rank, rank_actions in enumerate(actions)
               for stage, _, _ in rank_actions}
    last = max(rank_of)
    done: dict[tuple[int, str, int], float] = {}
    position = [0] * len(actions)
    running: dict[int, list[float]] = {}  # rank: [its action's work left (s at 1x), start]
    spans = []
    now = 0.0
    while any(position[r] < len(actions[r]) for r in range(len(actions))):
        later = []  # when actions whose inputs are on their way become ready
        for rank, rank_actions in enumerate(actions):
            if rank in running or position[rank] == len(rank_actions):
                continue
            stage, kind, micro_batch = rank_actions[position[rank]]
            ready = _ready_at(stage, kind, micro_batch, done, rank_of, last, transfer_s)
            if ready is not None and ready <= now:
                running[rank] = [stage_times[stage].of(kind) + action_s, now]
            elif ready is not None:
                later.append(ready)
        if not running and not later:
            waiting = {r: actions[r][position[r]] for r in range(len(actions))
                       if position[r] < len(actions[r])}
            raise ValueError(f"the schedule cannot proceed: every rank waits ({waiting})")
        rate = 1 / slowdown(len(running)) if running else 0.0
        step = min([left / rate for left, _ in running.values()] + [t - now for t in later])
        if not 0 <= step < math.inf:
            raise ValueError(f"the replay cannot advance by {step} s: every stage time, "
                             "transfer and slowdown must be finite, the slowdowns positive")
        now += step
        for rank, (left, start) in list(running.items()):
            running[rank][0] = left - step * rate
            if running[rank][0] <= _DONE_S:
                stage, kind, micro_batch = actions[rank][position[rank]]
                done[(stage, _BACKWARD if kind in (FULL_BACKWARD, INPUT_GRAD) else kind,
                      micro_batch)] = now
                spans.append((rank, micro_batch, kind, start, now, stage))
                position[rank] += 1
                del running[rank]
    return Replayed(len(actions), tuple(spans))


_DONE_S = 1e-12  # work left below this (seconds): the action has ended (rounding, not work)
_BACKWARD = "backward"  # B or I: what the previous stage's backward waits for


def _ready_at(stage, kind, micro_batch, done, rank_of, last, transfer_s) -> float | None:
    """When the inputs of an action are there; None while one is not yet computed."""
    if kind == FORWARD:
        needs = [(stage - 1, FORWARD, micro_batch, stage - 1)] if stage > 0 else []
    elif kind == WEIGHT_GRAD:
        needs = [(stage, _BACKWARD, micro_batch, None)]
    else:
        needs = [(stage, FORWARD, micro_batch, None)]
        if stage < last:
            needs.append((stage + 1, _BACKWARD, micro_batch, stage))
    ready = 0.0
    for source, source_kind, source_batch, cut in needs:
        end = done.get((source, source_kind, source_batch))
        if end is None:
            return None
        crossing = cut is not None and rank_of[source] != rank_of[stage]
        ready = max(ready, end + (transfer_s(cut) if crossing else 0.0))
    return ready
