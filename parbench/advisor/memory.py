"""Each rank's predicted peak memory, by what holds it: parameters, gradients and SGD's momentum
(sharded where the layout shards them), the activations its schedule keeps for backward at
once, DDP's gradient buckets and the FSDP units gathered at once; and whether it fits a cap."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PARAMETER_COPIES", "RankMemory", "mib"]

# What each parameter costs with its gradient and SGD's momentum.
PARAMETER_COPIES = 3


def mib(size_bytes: float) -> float:
    return size_bytes / 2**20


@dataclass(frozen=True)
class RankMemory:
    """One rank's predicted peak. `counted_mib` is what parbench measures per logical device
    (parbench.measure.tensors: the state, the saved activations' peak, DDP's buckets read
    from DDP); `peak_mib` adds the gathered FSDP units, which that count cannot see on a CPU
    (on a GPU, torch.cuda.max_memory_allocated sees all of it)."""

    state_bytes: float  # parameters, gradients and momentum held by this rank
    activation_bytes: float  # the most activation bytes saved for backward at once
    bucket_bytes: float = 0.0  # DDP's flat copy of the gradients, bucket by bucket
    gathered_bytes: float = 0.0  # FSDP units gathered at once (parameters in full)

    @classmethod
    def of(cls, parameter_bytes: float, activation_bytes: float, shards: int = 1,
           bucket_bytes: float = 0.0, gathered_bytes: float = 0.0) -> RankMemory:
        """A rank holding `parameter_bytes` of parameters (with their gradients and momentum),
        over `shards` ranks where they are sharded."""
        return cls(PARAMETER_COPIES * parameter_bytes / shards, activation_bytes, bucket_bytes,
                   gathered_bytes)

    @property
    def counted_mib(self) -> float:
        return mib(self.state_bytes + self.activation_bytes + self.bucket_bytes)

    @property
    def peak_mib(self) -> float:
        return self.counted_mib + mib(self.gathered_bytes)
