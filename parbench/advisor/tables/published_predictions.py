"""Published multi-GPU tables predicted: a profile's shape at the published single-GPU level."""

from __future__ import annotations

from dataclasses import replace

from parbench.advisor.models import data_parallel, models
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.tables.published_tables import PublishedDataParallel, PublishedPipeline
from parbench.strategies.partition import Partition

__all__ = ["at_published_level", "predict_data_parallel", "predict_pipeline", "recomputed",
           "torchgpipe_partition"]

# torchgpipe's resnet101 is one nn.Sequential of 370 layers (benchmarks/models/resnet): the
# stem conv1, bn1, relu, maxpool; 33 bottlenecks of 11 (identity, conv/bn/relu x 2, conv3,
# bn3, residual, relu3: bottleneck.py); the head avgpool, flat, fc.
_STEM_LAYERS, _BOTTLENECK_LAYERS, _HEAD_LAYERS = 4, 11, 3


def at_published_level(profile: Profile, micro_batch: int, images_per_s: float) -> Profile:
    """`profile`'s shape on micro-batches of `micro_batch` images at a published single-device
    throughput: every block's time scaled alike so one image takes 1 / `images_per_s` (the
    optimiser's step folded in, as the published figure has it), the activations' bytes in
    proportion to the images. A GPU's time per image is taken not to depend on the
    micro-batch: the one level the table gives."""
    ratio = micro_batch / profile.micro_batch
    blocks = tuple(replace(b, output_bytes=round(b.output_bytes * ratio),
                           saved_bytes=round(b.saved_bytes * ratio)) for b in profile.blocks)
    resized = replace(profile, micro_batch=micro_batch, blocks=blocks)
    return replace(resized.scaled_to(micro_batch / images_per_s), optimizer_s=0.0)


def recomputed(profile: Profile, share: float) -> Profile:
    """Activation checkpointing on `share` of the micro-batches: each block's forward runs
    again before its backward, so its backward grows by `share` of its forward (torchgpipe's
    'except_last' recomputes every micro-batch but the last: share (m - 1) / m)."""
    return replace(profile, blocks=tuple(
        replace(b, input_grad_s=b.input_grad_s + share * b.forward_s) for b in profile.blocks))


def torchgpipe_partition(block_names: tuple[str, ...], balance: tuple[int, ...]) -> Partition:
    """torchgpipe's `balance` (layers per stage of its 370-layer resnet101) as cuts between
    parbench's blocks (stem, each bottleneck, head): each cut at the nearest block boundary
    (pipeline-2's and pipeline-4's fall inside a bottleneck)."""
    bounds, layer = [0], 0
    for layers in balance[:-1]:
        layer += layers
        bottlenecks = (layer - _STEM_LAYERS) / _BOTTLENECK_LAYERS
        bounds.append(1 + round(bottlenecks))
    expected = _STEM_LAYERS + _BOTTLENECK_LAYERS * (len(block_names) - 2) + _HEAD_LAYERS
    if sum(balance) != expected:
        raise ValueError(f"balance covers {sum(balance)} layers; this model has {expected}")
    return Partition(block_names, tuple(bounds), "torchgpipe")


def predict_data_parallel(row: PublishedDataParallel, profile: Profile) -> dict:
    """DDP on `row.gpus` GPUs at the row's batch per GPU, the level its 1-GPU throughput. The
    gradients all-reduced are the profile's fp32 ones for AMP too: torch.cuda.amp keeps the
    parameters, so their gradients, in fp32."""
    leveled = at_published_level(profile, row.batch_per_gpu, row.single_ips)
    one = models.single(leveled, 1)
    many = data_parallel.ddp(leveled, row.gpus, row.link)
    return dict(
        name=row.name, kind="data-parallel", model=row.model, precision=row.precision,
        gpus=row.gpus, batch_per_gpu=row.batch_per_gpu, link=row.link.describe(),
        gradient_bytes=leveled.parameter_bytes,
        predicted_single_ips=one.throughput_ips, predicted_ips=many.throughput_ips,
        predicted_step_s=many.step_time_s,
        predicted_efficiency=many.throughput_ips / (row.gpus * one.throughput_ips),
        inputs=dict(single_ips=row.single_ips, source=row.source))


def predict_pipeline(row: PublishedPipeline, profile: Profile) -> dict:
    """torchgpipe's run: its forward in clock cycles, each as long as its slowest stage, then
    the backward (parbench's tick pipeline, the same fill-drain in one process; torchgpipe
    copies between GPUs on streams of their own, taken as hidden), every micro-batch but the
    last recomputing its forward; beside it torch's GPipe schedule replayed with the link's
    copies. The level: the baseline's throughput on one GPU."""
    micro_batch = round(row.batch / row.chunks)
    leveled = at_published_level(profile, micro_batch, row.baseline_ips)
    share = (row.chunks - 1) / row.chunks if row.checkpoint == "except_last" else 1.0
    checkpointed = recomputed(leveled, share)
    partition = torchgpipe_partition(tuple(b.name for b in profile.blocks), row.balance)
    baseline = models.single(at_published_level(profile, row.baseline_batch, row.baseline_ips),
                             1)
    ticks = models.tick_pipeline(checkpointed, partition, row.chunks)
    replayed = models.pipeline("gpipe", checkpointed, partition, partition.stages, row.chunks,
                               row.link)
    return dict(
        name=row.name, kind="pipeline", model=row.model, gpus=partition.stages,
        batch=row.batch, chunks=row.chunks, micro_batch=micro_batch,
        balance=list(row.balance), cuts=partition.describe(), link=row.link.describe(),
        recompute_share=share, predicted_baseline_ips=baseline.throughput_ips,
        predicted_ips=ticks.throughput_ips,
        predicted_speedup=ticks.throughput_ips / baseline.throughput_ips,
        predicted_bubble=ticks.bubble,
        replayed_gpipe_ips=replayed.throughput_ips,
        replayed_gpipe_speedup=replayed.throughput_ips / baseline.throughput_ips,
        inputs=dict(baseline_ips=row.baseline_ips, baseline_batch=row.baseline_batch,
                    checkpoint=row.checkpoint, source=row.source))
