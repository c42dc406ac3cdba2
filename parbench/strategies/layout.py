"""How a strategy lays one step out over its devices: what parbench's timing models tell apart."""

from __future__ import annotations

import enum

__all__ = ["Layout"]


class Layout(enum.Enum):
    """How a strategy lays one step out over its devices: what parbench's timing models tell
    apart (each strategy declares its own, so that no caller picks a strategy by its name)."""

    ONE_DEVICE = "the whole model on one device, micro-batches accumulated"
    REPLICAS_IN_ONE_PROCESS = "one process scattering the batch over replicas"
    REPLICAS = "a replica per rank, gradients all-reduced"
    SHARDED_REPLICAS = "a rank per device, parameters sharded and gathered block by block"
    HYBRID_SHARDED = "parameters sharded within groups of ranks, the groups replicas"
    STAGES_IN_TURN = "stages on devices, the whole batch through each in turn"
    TICK_PIPELINE = "micro-batches through stages in one process, clock tick by tick"
    SCHEDULED_PIPELINE = "a rank per stage, micro-batches ordered by a pipelining schedule"
    SHARDED_PIPELINES = "pipelines side by side, each stage sharded over its copies"
    TENSOR_PARALLEL = "each layer's matrices split over the ranks, each rank on the whole batch"
    SHARDED_TENSOR_PARALLEL = ("layers split within groups of ranks, the groups fully sharded "
                               "data parallel")

    @property
    def data_parallel(self) -> bool:
        """A rank per device, each on its shard of the batch."""
        return self in (Layout.REPLICAS, Layout.SHARDED_REPLICAS, Layout.HYBRID_SHARDED)

    @property
    def warmup_steps(self) -> int:
        """The fewest warm-up steps before its steps are steady (0: no fewest beyond what a
        run asks): 2 for every layout of a process per rank. After one warm-up step, the first
        measured step took longer than the next: torch.distributed.pipelining's schedules a
        median 6.3% (40 of 45 trials of the held-out draw of seed 1), hsdp 19% (10% to 26%,
        its 9 records in four held-out draws), fsdp 10% (4% to 14%, 5), ddp 3% and 6% (DDP
        rebuilds its buckets in its second iteration); from the third step on, within this
        CPU's noise (results/20261127T155000Z-warmup-data-parallel-dev). One process and
        single: 0.3% and 0.4%."""
        return 2 if self.data_parallel or self in (
            Layout.SCHEDULED_PIPELINE, Layout.SHARDED_PIPELINES, Layout.TENSOR_PARALLEL,
            Layout.SHARDED_TENSOR_PARALLEL) else 0

    @property
    def splits_layers(self) -> bool:
        """Each layer's matrices split over ranks (tensor parallelism)."""
        return self in (Layout.TENSOR_PARALLEL, Layout.SHARDED_TENSOR_PARALLEL)

    @property
    def pipelined(self) -> bool:
        """Micro-batches in flight on several stages at once."""
        return self in (Layout.TICK_PIPELINE, Layout.SCHEDULED_PIPELINE,
                        Layout.SHARDED_PIPELINES)
