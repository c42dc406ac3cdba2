"""Model stages placed on logical devices, with per-stage memory accounting, for one process."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from strategies.base import StrategyError
from strategies.partition import Partition, cut_resnet

__all__ = ["Stage", "build_stages", "micro_batch_sizes", "resolve_split"]

MIB = 2**20


def micro_batch_sizes(global_batch: int, split_size: int) -> list[int]:
    """Sizes of the micro-batches a global batch is cut into: ceil(B / split) near-equal parts.

    This is how torch.tensor_split (and torch.distributed.pipelining) splits, so every
    pipelined strategy feeds the same micro-batches.
    """
    count = -(-global_batch // split_size)
    return [len(part) for part in torch.arange(global_batch).tensor_split(count)]


def resolve_split(global_batch: int, split_size: int | None,
                  stages: int) -> tuple[int, list[int]]:
    """The split size to use (default: 4 micro-batches per stage, where GPipe's bubble
    (K-1)/(M+K-1) becomes small) and the micro-batch sizes it gives."""
    split_size = split_size or -(-global_batch // (4 * stages))
    if split_size > global_batch:
        raise StrategyError(f"split size {split_size} is larger than the batch "
                            f"{global_batch}; use a split size of at most {global_batch}")
    return split_size, micro_batch_sizes(global_batch, split_size)


def _local_nbytes(tensor: torch.Tensor) -> int:
    """Bytes this process holds for `tensor` (its shard, for a sharded DTensor)."""
    if isinstance(tensor, DTensor):
        tensor = tensor.to_local()
    return tensor.nbytes


class Stage:
    """One stage module on one logical device, counting the memory it holds.

    Logical devices that share a physical device cannot be told apart by the device's own
    counters (and a CPU process's resident set includes the interpreter), so each stage counts
    its tensors: parameters, gradients and optimiser state, plus the activations autograd
    saves for backward, tracked live by saved-tensor hooks (counted when saved in forward,
    released when backward consumes them; parameters saved by an op are not counted twice).
    """

    def __init__(self, index: int, module: nn.Module, device: torch.device) -> None:
        self.index = index
        self.module = module
        self.device = device
        self._parameter_storages = {p.untyped_storage().data_ptr() for p in module.parameters()
                                     if not isinstance(p, DTensor)}
        self._lock = threading.Lock()
        self._live: dict[int, list[int]] = {}  # storage pointer -> [bytes, references]
        self._live_bytes = 0
        self.peak_saved_bytes = 0

    def _pack(self, tensor: torch.Tensor):
        if isinstance(tensor, nn.Parameter):  # counted as state (FSDP's are transient)
            return tensor, None
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer in self._parameter_storages:
            return tensor, None
        with self._lock:
            entry = self._live.setdefault(pointer, [storage.nbytes(), 0])
            if entry[1] == 0:
                self._live_bytes += entry[0]
                self.peak_saved_bytes = max(self.peak_saved_bytes, self._live_bytes)
            entry[1] += 1
        return tensor, pointer

    def _unpack(self, packed) -> torch.Tensor:
        tensor, pointer = packed
        if pointer is not None:
            with self._lock:
                entry = self._live.get(pointer)
                if entry is not None:
                    entry[1] -= 1
                    if entry[1] == 0:  # backward is done with it: autograd frees it now
                        self._live_bytes -= entry[0]
                        del self._live[pointer]
        return tensor

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            return self.module(inputs)

    def release_saved(self) -> None:
        """Call once the step's backward is done: whatever was saved and not unpacked is freed."""
        with self._lock:
            self._live.clear()
            self._live_bytes = 0

    def reset_peak(self) -> None:
        self.peak_saved_bytes = self._live_bytes

    def state_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        """Parameters, their gradients and the optimiser's state for them."""
        total = 0
        for parameter in self.module.parameters():
            total += _local_nbytes(parameter)
            if parameter.grad is not None:
                total += _local_nbytes(parameter.grad)
            for value in optimizer.state.get(parameter, {}).values():
                if isinstance(value, torch.Tensor):
                    total += _local_nbytes(value)
        return total

    def memory_mib(self, optimizer: torch.optim.Optimizer) -> float:
        return (self.state_bytes(optimizer) + self.peak_saved_bytes) / MIB


def build_stages(workload, devices: Sequence[torch.device], balance: str,
                 sample_batch: int) -> tuple[Partition, list[Stage]]:
    """Cut the workload's model into len(devices) stages and place stage k on devices[k].

    For balance by time the blocks are timed on devices[0] with `sample_batch` images.
    """
    model = workload.build_model()
    sample = None
    if balance == "time":
        sample, _ = workload.make_batch(sample_batch, devices[0])
        model = model.to(devices[0])
    partition, modules = cut_resnet(model, len(devices), balance, sample)
    stages = []
    for index, (module, device) in enumerate(zip(modules, devices, strict=True)):
        module = workload.prepare_model(module.to(device)).train()
        stages.append(Stage(index, workload.compiled(module), device))
    return partition, stages
