"""pipeline-fsdp's step predicted: P 1F1B pipelines side by side, each stage one FSDP2 unit
sharded over its P copies, gathered once before the first forward and kept gathered (its
gradient too, in full) until the last backward, then reduce-scattered."""

from __future__ import annotations

from dataclasses import replace

from parbench.advisor.models.links import AnyLink
from parbench.advisor.models.memory import RankMemory
from parbench.advisor.models.models import Prediction, pipeline
from parbench.advisor.profiling.profile import Profile
from parbench.strategies.partition import Partition

__all__ = ["sharded_pipelines"]


def sharded_pipelines(profile: Profile, partition: Partition, pipelines: int,
                      micro_batches: int, link: AnyLink, action_s: float = 0.0) -> Prediction:
    """`pipelines` pipelines of partition.stages ranks, each running 1F1B on `micro_batches`
    micro-batches of the profiled size (its 1/P of the batch): one pipeline's replayed step,
    starting once the slowest stage's all-gather is done and each rank's reduce-scatter after
    it (over the P ranks holding that stage: neither overlaps compute), and the optimiser
    over its stage's shard. Its bubble is the replayed pipeline's; the exposed collectives
    are in the step, not in it. `action_s`: each action's fixed cost (models.pipeline)."""
    stages = partition.stages
    one = pipeline("1f1b", profile, partition, stages, micro_batches, link, pipelines, action_s)
    ranges = partition.stage_ranges()
    sizes = [sum(profile.blocks[i].parameter_bytes for i in r) for r in ranges]
    # The schedule's first forward of each stage waits for its gather, and every stage
    # downstream waits for that one: the replay starts once the slowest gather is done.
    gathered = max(link.collective_s("all_gather", size, pipelines) for size in sizes)
    ends = [gathered + max(span[4] for span in one.spans if span[0] == stage)
            + link.collective_s("reduce_scatter", size, pipelines)
            + profile.optimizer_share_s(size) / pipelines for stage, size in enumerate(sizes)]
    step = max(ends)
    memory = tuple(replace(RankMemory.of(size, rank.activation_bytes, pipelines),
                           unsharded_bytes=2 * size)  # the stage and its gradient, in full
                   for size, rank in zip(sizes, one.memory, strict=True))
    return Prediction("pipeline-fsdp", one.global_batch * pipelines, step,
                      memory * pipelines, one.bubble, one.spans, overheads=one.overheads)
