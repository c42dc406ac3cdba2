"""A DDP step predicted from a profile and a link: every rank computes its share of the batch;
gradients fill buckets as backward produces them, and each full bucket is all-reduced on one
communication stream while backward goes on (as DDP does), so only the tail shows."""

from __future__ import annotations

from parbench.predict.links import AnyLink
from parbench.predict.models import Prediction, mib
from parbench.predict.profile import Profile

__all__ = ["BUCKET_BYTES", "FIRST_BUCKET_BYTES", "bucket_ready_times", "ddp"]

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
