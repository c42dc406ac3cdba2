"""The parallel degrees of one configuration, resolved once when it is planned: how many copies
of the model, how many ranks shard one, split its layers, or hold its stages, and the
micro-batches that flow through them (torchtitan's ParallelDims, as a record states it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["ParallelDims"]


@dataclass(frozen=True)
class ParallelDims:
    """A layout's degrees: their product is the devices it uses (one each where a dimension is
    not used). Made by the strategy's resolved options (`Options.parallel_dims`), carried in
    its TrainingPlan and written whole into every record (`parallel_dims`)."""

    replicas: int = 1  # copies of the model, each on its share of the batch (ddp, hsdp's groups)
    shards: int = 1  # ranks one copy's parameters are sharded over (FSDP2's dimension)
    tensor_parallel: int = 1  # ranks each layer's matrices are split over
    stages: int = 1  # ranks (or devices) the model is cut over, one after another
    stages_per_rank: int = 1  # model stages each of those holds (interleaved schedules)
    schedule: str | None = None  # how micro-batches are ordered through the stages
    micro_batch: int | None = None  # images a forward pass takes; None: a rank's whole share

    def __post_init__(self) -> None:
        counts = (self.replicas, self.shards, self.tensor_parallel, self.stages,
                  self.stages_per_rank)
        if min(counts) < 1:
            raise ValueError(f"parallel degrees must be at least 1: {self}")

    @property
    def devices(self) -> int:
        """The devices (ranks, or logical devices of one process) the degrees take."""
        return self.replicas * self.shards * self.tensor_parallel * self.stages

    def checked(self, devices: int) -> ParallelDims:
        """Itself, where its degrees take exactly `devices` devices (else a strategy
        described its layout wrongly: a defect, not a user's error)."""
        if self.devices != devices:
            raise ValueError(f"{self} takes {self.devices} devices, not the {devices} planned")
        return self

    def as_record(self) -> dict:
        return asdict(self)
