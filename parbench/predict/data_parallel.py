"""Data-parallel steps predicted from a profile and a link: every rank computes its share of
the batch. DDP all-reduces gradient buckets as backward fills them, behind the rest of
backward; FSDP all-gathers each block's parameters before use and reduce-scatters its
gradients after, each on a stream of its own. Only what compute cannot hide shows."""

from __future__ import annotations

from parbench.predict.links import AnyLink
from parbench.predict.models import Prediction, mib
from parbench.predict.profile import Profile

__all__ = ["BUCKET_BYTES", "FIRST_BUCKET_BYTES", "bucket_ready_times", "ddp", "fsdp"]

# DDP's defaults: bucket_cap_mb=25, and a first bucket of 1 MiB so communication starts early.
BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20
# Parameters, gradients, momentum, and DDP's flat bucket copy of the gradients.
_PARAMETER_COPIES = 4


def bucket_ready_times(profile: Profile, first_bytes: int = FIRST_BUCKET_BYTES,
                       bytes_per_bucket: int = BUCKET_BYTES) -> list[tuple[float, int]]:
    """(when, bytes) of each bucket, from the start of backward: a block's gradients are ready
    when its backward ends (blocks run last to first); a bucket is all-reduced once full, the
    last when backward ends."""
    buckets, filling, clock, cap = [], 0, 0.0, first_bytes
    for block in reversed(profile.blocks):
        clock += block.input_grad_s + block.weight_grad_s
        filling += block.parameter_bytes
        while filling >= cap:
            buckets.append((clock, cap))
            filling, cap = filling - cap, bytes_per_bucket
    if filling:
        buckets.append((clock, filling))
    return buckets


def ddp(profile: Profile, ranks: int, link: AnyLink) -> Prediction:
    """`ranks` ranks each on the profiled micro-batch (the global batch's share): forward, then
    backward with the buckets' all-reduces overlapped; the step ends when both have."""
    forward = sum(block.forward_s for block in profile.blocks)
    backward = sum(block.input_grad_s + block.weight_grad_s for block in profile.blocks)
    communication_end = 0.0
    for ready, size in bucket_ready_times(profile):
        start = max(ready, communication_end)
        communication_end = start + (link.allreduce_s(size, ranks) if ranks > 1 else 0.0)
    step = forward + max(backward, communication_end)
    parameters = sum(block.parameter_bytes for block in profile.blocks)
    saved = sum(block.saved_bytes for block in profile.blocks)
    return Prediction("ddp", profile.micro_batch * ranks, step,
                      (mib(_PARAMETER_COPIES * parameters + saved),) * ranks,
                      bubble=1 - (forward + backward) / step)


def fsdp(profile: Profile, ranks: int, link: AnyLink, reshard: bool = True) -> Prediction:
    """FSDP2 as parbench wraps it: a unit per residual block and a root (stem and head),
    gathered once. Each unit's parameters are all-gathered before its forward and, when
    resharded after forward, again before its backward (the next one prefetched while a
    block computes); each unit's gradient is reduce-scattered once its backward ends, on a
    stream of its own. The step ends when compute and the last reduce-scatter have."""
    blocks = profile.blocks
    root = blocks[0].parameter_bytes + blocks[-1].parameter_bytes
    units = range(1, len(blocks) - 1)

    def collective(name: str, size: int) -> float:
        return link.collective_s(name, size, ranks)

    gathering = compute = collective("all_gather", root)  # the root first, alone
    issued = 0.0  # when the block before started: the next gather is issued then (prefetch)
    for i in range(len(blocks)):
        if i in units:
            gathering = max(gathering, issued) + collective("all_gather", blocks[i].parameter_bytes)
            compute = max(compute, gathering)
        issued, compute = compute, compute + blocks[i].forward_s
    reducing = 0.0
    for i in reversed(range(len(blocks))):
        if reshard and i in units:
            gathering = max(gathering, issued) + collective("all_gather", blocks[i].parameter_bytes)
            compute = max(compute, gathering)
        issued, compute = compute, compute + blocks[i].input_grad_s + blocks[i].weight_grad_s
        if i in units:
            reducing = max(reducing, compute) + collective("reduce_scatter",
                                                           blocks[i].parameter_bytes)
    reducing = max(reducing, compute) + collective("reduce_scatter", root)
    step = max(compute, reducing)
    busy = sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in blocks)
    parameters = sum(b.parameter_bytes for b in blocks)
    saved = sum(b.saved_bytes for b in blocks)
    # Sharded parameters, gradients and momentum, the root and one unit gathered at a time.
    largest = max(blocks[i].parameter_bytes for i in units)
    memory = 3 * parameters / ranks + root + 2 * largest + saved
    return Prediction("fsdp", profile.micro_batch * ranks, step,
                      (mib(memory),) * ranks, bubble=1 - busy / step)
