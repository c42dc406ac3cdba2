"""A published table's rows PREDICTED from its setup alone: each GPU's step carried from a step
parbench measured on another GPU (gpu_shape), the link's all-reduce behind backward, the host's
input pipeline where it decodes the images, each row beside the perfect-scaling guess and
what it would be without each cost. The table's own figures are never an input."""

from __future__ import annotations

from parbench.advisor.carried.gpu_references import GpuReference, choose_reference
from parbench.advisor.carried.gpu_shape import shaped_profile
from parbench.advisor.models import data_parallel, models
from parbench.advisor.tables.published_predictions import recomputed, torchgpipe_partition
from parbench.advisor.tables.setup import PipelineRow, ReplicaRow, TableSetup
from parbench.families.workloads import Workload

__all__ = ["NOT_MODELLED", "predict_setup"]

# What keeps a multi-GPU step from its prediction that nothing here measures.
NOT_MODELLED = ("NCCL's kernels sharing the SMs with the model's, the host driving several GPUs, "
                "cache and clock effects of several GPUs at once")


def _workload(setup: TableSetup) -> Workload:
    return Workload(model=setup.model, image_size=setup.image_size, precision=setup.precision,
                    channels_last=setup.channels_last)


def _loader_cap(setup: TableSetup, devices: int, rate: float | None) -> float | None:
    """The images a second the host's cores decode and augment: as many workers as it runs for
    the GPUs (each on a core; none beyond the cores the GPUs' processes leave), each at the
    worker's `rate` parbench loader measured; None where the host does not decode, or no
    rate was measured."""
    if setup.data != "jpeg-cpu" or rate is None or setup.host_cores is None:
        return None
    cores = setup.host_cores - devices
    workers = min(cores, devices * setup.workers_per_device) if setup.workers_per_device \
        else cores
    return workers * rate


def _replicas(setup: TableSetup, row: ReplicaRow, reference: GpuReference,
              loader_rate: float | None) -> dict:
    shaped = shaped_profile(_workload(setup), row.batch_per_device, setup.gpu, reference)
    one = models.single(shaped.profile, 1)
    many = data_parallel.ddp(shaped.profile, row.devices, setup.link)
    single_ips = row.batch_per_device / one.step_time_s
    unlinked = row.devices * row.batch_per_device / one.step_time_s
    cap = _loader_cap(setup, row.devices, loader_rate)
    predicted = min(many.throughput_ips, cap) if cap is not None else many.throughput_ips
    return dict(devices=row.devices, batch=row.batch_per_device * row.devices,
                batch_per_device=row.batch_per_device, predicted_ips=predicted,
                predicted_single_ips=single_ips, perfect_scaling_ips=row.devices * single_ips,
                predicted_efficiency=predicted / (row.devices * single_ips),
                without_communication_ips=unlinked if cap is None else min(unlinked, cap),
                without_loader_cap_ips=many.throughput_ips, loader_cap_ips=cap,
                dispatch_bound=shaped.dispatch_bound, share_of_roofline=shaped.share,
                carried_from=shaped.describe())


def _pipeline(setup: TableSetup, row: PipelineRow, reference: GpuReference) -> dict:
    """torchgpipe's clock-cycle fill and drain (parbench's tick pipeline), every micro-batch
    but the last recomputing its forward (checkpoint except_last), against its one-GPU
    baseline at `baseline_batch`, both on the carried GPU profile; torchgpipe's copies between
    GPUs run on streams of their own and are taken as hidden."""
    workload = _workload(setup)
    micro_batch = round(row.batch / row.chunks)
    shaped = shaped_profile(workload, micro_batch, setup.gpu, reference)
    share = {"always": 1.0, "never": 0.0}.get(row.checkpoint, (row.chunks - 1) / row.chunks)
    checkpointed = recomputed(shaped.profile, share)
    names = tuple(block.name for block in shaped.profile.blocks)
    partition = torchgpipe_partition(names, row.balance)
    ticks = models.tick_pipeline(checkpointed, partition, row.chunks)
    assert setup.baseline_batch is not None  # read_setup requires it
    baseline = shaped_profile(workload, setup.baseline_batch, setup.gpu, reference)
    baseline_ips = models.single(baseline.profile, 1).throughput_ips
    unrecomputed = models.tick_pipeline(shaped.profile, partition, row.chunks).throughput_ips
    return dict(devices=row.devices, batch=row.batch, micro_batch=micro_batch,
                chunks=row.chunks, cuts=partition.describe(), predicted_ips=ticks.throughput_ips,
                predicted_single_ips=baseline_ips, perfect_scaling_ips=row.devices * baseline_ips,
                predicted_speedup=ticks.throughput_ips / baseline_ips,
                predicted_bubble=ticks.bubble, without_recompute_ips=unrecomputed,
                dispatch_bound=shaped.dispatch_bound, share_of_roofline=shaped.share,
                carried_from=shaped.describe())


def predict_setup(setup: TableSetup, loader_rate: float | None = None,
                  reference_gpu: str | None = None) -> list[dict]:
    """Every row of `setup` PREDICTED (a dict each), from a GPU reference step carried to the
    setup's GPU; `loader_rate` is a loader worker's images a second (parbench loader), where
    the host decodes the images."""
    reference = choose_reference(setup.model, setup.image_size, setup.precision,
                                 setup.channels_last, setup.gpu, reference_gpu)
    rows = []
    for row in setup.rows:
        if isinstance(row, ReplicaRow):
            values = _replicas(setup, row, reference, loader_rate)
        else:
            values = _pipeline(setup, row, reference)
        rows.append(dict(kind="PREDICTED", setup=setup.name, row=row.label,
                         gpu=setup.gpu.label, strategy=setup.strategy, model=setup.model,
                         image_size=setup.image_size, precision=setup.precision,
                         channels_last=setup.channels_last, link=setup.link.describe(),
                         data=setup.data, not_modelled=NOT_MODELLED, **values))
    return rows
