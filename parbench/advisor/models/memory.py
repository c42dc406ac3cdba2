"""Each rank's predicted peak memory, by what holds it: parameters, gradients and SGD's momentum
(sharded where the layout shards them), the activations its schedule keeps for backward at
once, DDP's gradient buckets and what FSDP holds in full at its fullest; on a GPU, what its
allocator and runtime hold beyond those (measured by the profile on the device)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_OVERHEADS", "PARAMETER_COPIES", "DeviceOverheads", "RankMemory", "mib"]

# What each parameter costs with its gradient and SGD's momentum.
PARAMETER_COPIES = 3


def mib(size_bytes: float) -> float:
    return size_bytes / 2**20


@dataclass(frozen=True)
class RankMemory:
    """One rank's predicted peak. `counted_mib` is what parbench measures per logical device
    (parbench.measure.tensors: the state, the saved activations' peak, DDP's buckets read
    from DDP); `peak_mib` adds what FSDP holds in full beyond them, which that count cannot see
    on a CPU (on a GPU, torch.cuda.max_memory_allocated sees all of it)."""

    state_bytes: float  # parameters, gradients and momentum held by this rank
    activation_bytes: float  # the most activation bytes saved for backward at once
    bucket_bytes: float = 0.0  # DDP's flat copy of the gradients, bucket by bucket
    # What the rank holds at FSDP's fullest moment beyond the counted bytes (data_parallel's
    # walk, less the state and the activations' peak, at least 0): FSDP's units gathered, a
    # unit's gradients in full and its reduce-scatter's input, less the sharded gradients not
    # yet made then; pipeline-fsdp's stage and its gradient in full
    unsharded_bytes: float = 0.0

    @classmethod
    def of(cls, parameter_bytes: float, activation_bytes: float, shards: int = 1,
           bucket_bytes: float = 0.0, unsharded_bytes: float = 0.0) -> RankMemory:
        """A rank holding `parameter_bytes` of parameters (with their gradients and momentum),
        over `shards` ranks where they are sharded."""
        return cls(PARAMETER_COPIES * parameter_bytes / shards, activation_bytes, bucket_bytes,
                   unsharded_bytes)

    @property
    def counted_mib(self) -> float:
        return mib(self.state_bytes + self.activation_bytes + self.bucket_bytes)

    @property
    def peak_mib(self) -> float:
        return self.counted_mib + mib(self.unsharded_bytes)


@dataclass(frozen=True)
class DeviceOverheads:
    """What a GPU holds beyond the tensors RankMemory counts, each measured by the profile on
    the device (parbench.advisor.profiling.profile; none on a CPU, where parbench counts
    tensors): the allocator's peak in a training step beyond the parameters, their
    gradients and the saved activations (cuBLAS and cuDNN workspaces, the gradients in flight
    in backward, the batch); what the caching allocator reserves beyond its peak (blocks
    rounded up and cached); and what the process holds outside the allocator (the CUDA
    context, the libraries' handles). Measured on the whole model at the profile's
    micro-batch, so a stage's are taken as the whole model's: more, never less."""

    transient_bytes: float = 0.0
    reserved_extra_bytes: float = 0.0
    context_bytes: float = 0.0


NO_OVERHEADS = DeviceOverheads()
