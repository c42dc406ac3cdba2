"""Data-parallel steps predicted from a profile and a link: every rank computes its share of
the batch. DDP all-reduces gradient buckets as backward fills them, behind the rest of
backward; FSDP all-gathers each unit's parameters before use and reduce-scatters its
gradients after, each on a stream of its own (on a GPU; on a CPU each blocks its rank). Only
what compute cannot hide shows, except where the ranks share a CPU's every core: there a
collective's work takes the cores from the compute, and none of it is hidden."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from parbench.advisor.models.links import AnyLink
from parbench.advisor.models.memory import RankMemory
from parbench.advisor.models.models import Prediction
from parbench.advisor.profiling.profile import Profile

__all__ = ["BUCKET_BYTES", "FIRST_BUCKET_BYTES", "Units", "bucket_ready_times", "ddp", "fsdp",
           "hsdp"]

# DDP's defaults: bucket_cap_mb=25, and a first bucket of 1 MiB so communication starts early.
BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20


def bucket_ready_times(profile: Profile, first_bytes: int = FIRST_BUCKET_BYTES,
                       bytes_per_bucket: int = BUCKET_BYTES) -> list[tuple[float, int]]:
    """(when, bytes) of each bucket, from the start of backward, as DDP assigns them:
    parameters in reverse order, a bucket closed once it holds at least its cap (a tensor is
    never split). A block's gradients are ready when its backward ends (blocks run last to
    first); the last bucket goes when backward ends."""
    buckets, filling, clock, cap = [], 0, 0.0, first_bytes
    for block in reversed(profile.blocks):
        clock += block.input_grad_s + block.weight_grad_s
        for size in reversed(block.parameter_sizes):
            filling += size
            if filling >= cap:
                buckets.append((clock, filling))
                filling, cap = 0, bytes_per_bucket
    if filling:
        buckets.append((clock, filling))
    return buckets


def ddp(profile: Profile, ranks: int, link: AnyLink, shared_cores: bool = False,
        bucket_view: bool = False, zero: bool = False) -> Prediction:
    """`ranks` ranks each on the profiled micro-batch (the global batch's share): forward, then
    backward with the buckets' all-reduces overlapped (after it, with `shared_cores`); the step
    ends when both have, and each rank steps the optimiser over every parameter (with `zero`,
    ZeroRedundancyOptimizer: over its 1/ranks of them, holding only their momentum, then
    every rank's updated share is broadcast: an all-gather of the parameters). Each rank
    holds the buckets' flat copy of the gradients (none with `bucket_view`: the gradients
    are views into the buckets). A static graph (`static_graph`) is not an argument: after
    the first step DDP buckets the gradients in the order they arrived with or without it,
    and these models have no unused parameter for it to stop looking for; what either
    setting costs a step beyond this (a copy into the buckets, the reducer's bookkeeping) is
    the record's fixed cost, which its probe measures at the same settings."""
    forward = sum(block.forward_s for block in profile.blocks)
    backward = sum(block.input_grad_s + block.weight_grad_s for block in profile.blocks)
    buckets = bucket_ready_times(profile)
    allreduces = [link.allreduce_s(size, ranks) if ranks > 1 else 0.0 for _, size in buckets]
    if shared_cores:
        communication_end = backward + sum(allreduces)
    else:
        communication_end = 0.0
        for (ready, _), allreduce in zip(buckets, allreduces, strict=True):
            communication_end = max(ready, communication_end) + allreduce
    optimizer = profile.optimizer_s / ranks if zero else profile.optimizer_s
    broadcast = link.collective_s("all_gather", profile.parameter_bytes, ranks) \
        if zero and ranks > 1 else 0.0
    step = forward + max(backward, communication_end) + optimizer + broadcast
    saved = sum(block.saved_bytes for block in profile.blocks)
    parameters = profile.parameter_bytes
    memory = RankMemory((2 + (1 / ranks if zero else 1)) * parameters, saved,
                        bucket_bytes=0 if bucket_view else parameters)
    return Prediction("ddp", profile.micro_batch * ranks, step, (memory,) * ranks,
                      bubble=max(0.0, 1 - (forward + backward + optimizer) / step),
                      overheads=profile.overheads)


@dataclass(frozen=True)
class Units:
    """FSDP's units besides the root (the first and last blocks, kept gathered from forward
    to backward): the profile's blocks each unit holds, in forward order, whether each
    reshards after forward (and is gathered again for backward), and the bytes a gather
    carries per byte of the fp32 parameters (the mixed-precision policy's 16-bit parameters:
    0.5; its gradients are reduce-scattered in fp32 whatever it gathers)."""

    blocks: tuple[tuple[int, ...], ...]
    reshard: tuple[bool, ...]
    gathered_per_byte: float = 1.0

    @classmethod
    def per_block(cls, profile: Profile, reshard: bool = True) -> Units:
        """FSDP2's defaults: a unit per block, every unit resharded after forward or none."""
        middle = range(1, len(profile.blocks) - 1)
        return cls(tuple((i,) for i in middle), (reshard,) * len(middle))

    def bytes_of(self, profile: Profile, unit: int) -> int:
        """The fp32 bytes of the parameters unit `unit` holds."""
        return sum(profile.blocks[i].parameter_bytes for i in self.blocks[unit])


def fsdp(profile: Profile, ranks: int, link: AnyLink, reshard: bool = True,
         units: Units | None = None) -> Prediction:
    """FSDP2 as parbench wraps it: `units` (default: a unit per block, resharded after forward
    where `reshard`) and a root (stem and head), gathered once. Each unit's parameters are
    all-gathered before its first block's forward and, when it reshards after forward, again
    before its last block's backward; each unit's gradient is reduce-scattered once its first
    block's backward ends, on a stream of its own. Backward prefetches the next unit's
    gather as the unit before starts; forward does not, but on a GPU the CPU issues it ahead
    of the compute it queued, as the unit before starts, which overlaps the same way. On a
    CPU, gloo's gathers and reduce-scatters block the rank that issued them (FSDP2 waits for
    each), whether or not the ranks share the CPU's cores: every collective after the other
    and the compute, none hidden. The step ends when compute and the last
    reduce-scatter have, then each rank steps the optimiser over its shard."""
    return _sharded("fsdp", profile, ranks, ranks, link,
                    units or Units.per_block(profile, reshard))


def hsdp(profile: Profile, ranks: int, shard_size: int, link: AnyLink, reshard: bool = True,
         units: Units | None = None) -> Prediction:
    """HSDP: fsdp's step within each group of `shard_size` ranks (its gathers and
    reduce-scatters over the group), and each reduce-scattered shard then all-reduced across
    the ranks/shard_size groups that hold the same shard, behind the reduce-scatter."""
    return _sharded("hsdp", profile, ranks, shard_size, link,
                    units or Units.per_block(profile, reshard))


def _sharded(name: str, profile: Profile, ranks: int, shard_size: int, link: AnyLink,
             units: Units) -> Prediction:
    blocks = profile.blocks
    root = blocks[0].parameter_bytes + blocks[-1].parameter_bytes
    first_of = {unit[0]: u for u, unit in enumerate(units.blocks)}  # forward's first block
    last_of = {unit[-1]: u for u, unit in enumerate(units.blocks)}  # backward's first
    issued_ahead = profile.device.startswith("cuda")
    replicas = ranks // shard_size

    spent = []  # every collective's time, as issued

    def collective(kind: str, size: float) -> float:
        spent.append(link.collective_s(kind, size, shard_size))
        if kind == "reduce_scatter" and replicas > 1:  # the shard, across the groups
            spent[-1] += link.allreduce_s(size / shard_size, replicas)
        return spent[-1]

    def gather(unit: int) -> float:
        return collective("all_gather", units.bytes_of(profile, unit) * units.gathered_per_byte)

    gathering = compute = collective("all_gather", root * units.gathered_per_byte)
    started = compute  # when the unit computing (or the root) started: the next is issued
    for i in range(len(blocks)):
        if i in first_of:
            start = max(gathering, started if issued_ahead else compute)
            gathering = start + gather(first_of[i])
            compute = started = max(compute, gathering)
        compute += blocks[i].forward_s
    reducing, started = 0.0, compute
    for i in reversed(range(len(blocks))):
        if i in last_of:
            if units.reshard[last_of[i]]:
                gathering = max(gathering, started) + gather(last_of[i])
                compute = max(compute, gathering)
            started = compute
        compute += blocks[i].input_grad_s + blocks[i].weight_grad_s
        if i in first_of:
            reducing = max(reducing, compute) + collective(
                "reduce_scatter", units.bytes_of(profile, first_of[i]))
    reducing = max(reducing, compute) + collective("reduce_scatter", root)
    busy = sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in blocks)
    step = (max(compute, reducing) if issued_ahead else busy + sum(spent)) \
        + profile.optimizer_s / shard_size
    busy += profile.optimizer_s / shard_size
    return Prediction(name, profile.micro_batch * ranks, step,
                      (_sharded_memory(profile, shard_size, units),) * ranks,
                      bubble=max(0.0, 1 - busy / step), overheads=profile.overheads)


def _sharded_memory(profile: Profile, shards: int, units: Units) -> RankMemory:
    """Parameters, gradients and momentum sharded `shards` ways, the saved activations, and
    what FSDP holds in full beyond them at its fullest moment (`_fullest_moment`). Under the
    mixed-precision policy the weights autograd saves are the gathered 16-bit parameters
    themselves, where the profile's autocast saved a 16-bit copy of each: each block's saved
    bytes less those copies (BatchNorm's, 0.2% of resnet50's parameters, are not cast)."""
    copies = units.gathered_per_byte if units.gathered_per_byte < 1 else 0.0
    saved = [max(0.0, b.saved_bytes - copies * b.parameter_bytes) for b in profile.blocks]
    memory = RankMemory.of(profile.parameter_bytes, sum(saved), shards)
    fullest = _fullest_moment(profile, shards, units, saved)
    return replace(memory, unsharded_bytes=max(
        0.0, fullest - memory.state_bytes - memory.activation_bytes))


def _fullest_moment(profile: Profile, shards: int, units: Units, saved: list[float]) -> float:
    """The most a rank holds at once through FSDP2's step, walked as its code allocates and
    frees (torch's _fully_shard; checked against its FSDPMemTracker): the sharded parameters
    and momentum throughout, the sharded gradients as each unit's reduce-scatter makes them
    (the optimiser's zero_grad frees them each step), the activations saved so far, the root
    gathered throughout, and at each unit:
    - forward, its copy-out: its all-gather's output and the parameters copied out of it,
      beside the unit before's output (freed once the copy-out returns), then computing with
      its output kept (until the next copy-out, or the root's forward ends);
    - backward, its copy-out (where it resharded after forward), then computing with the
      unit before's gather prefetched and its gradients in full, then its post-backward: its
      parameters freed, its gradients copied into its reduce-scatter's fp32 input, which is
      kept until the next unit's post-backward;
    with the root's gradients in full from the head's backward to the root's reduce-scatter.
    Gathered parameters and unsharded gradients are 16-bit under the mixed-precision policy."""
    part = units.gathered_per_byte
    root = profile.blocks[0].parameter_bytes + profile.blocks[-1].parameter_bytes
    sizes = [units.bytes_of(profile, u) for u in range(len(units.blocks))]
    through = [0.0, *itertools.accumulate(saved)]  # saved once blocks [0, i) have run
    state = 2 * profile.parameter_bytes / shards  # parameters and momentum

    # kept[u]: the units before u gathered from their forward to their backward
    kept = [0.0, *itertools.accumulate(0 if again else size
                                       for size, again in zip(sizes, units.reshard, strict=True))]
    moments = [state + 2 * part * root]
    previous = root
    for u, blocks in enumerate(units.blocks):
        gathered = root + kept[u] + 2 * sizes[u]
        moments += [state + through[blocks[0]] + part * (gathered + previous),
                    state + through[blocks[-1] + 1] + part * gathered]
        previous = sizes[u]
    moments.append(state + through[-1] + part * (root + kept[-1] + previous))
    reduced = held = 0.0  # the sharded gradients so far; the last reduce-scatter's input
    for u in reversed(range(len(sizes))):
        blocks = units.blocks[u]
        before = kept[u] + (sizes[u - 1] if u and units.reshard[u - 1] else 0)
        so_far = state + reduced / shards + part * root  # the root's gradients
        waiting = so_far + held + through[blocks[-1] + 1]  # as the unit's backward starts
        if units.reshard[u]:
            moments.append(waiting + part * (root + kept[u] + 2 * sizes[u]))
        moments += [waiting + part * (root + before + 2 * sizes[u]),
                    so_far + through[blocks[0]] + part * (root + before + sizes[u]) + sizes[u]]
        reduced, held = reduced + sizes[u], sizes[u]
    moments.append(state + reduced / shards + 2 * part * root + root)
    return max(moments)
