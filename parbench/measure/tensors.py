"""Memory per logical device, counted from its tensors: parameters, gradients, optimiser state
and the activations autograd saves for backward. Installed around a strategy's modules by the
worker, for a step of its own after the timed ones (its hooks cost time), for logical devices
that share a physical one (whose counters cannot tell them apart) and for CPU processes (whose
resident set includes the interpreter)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor import DTensor

__all__ = ["SOURCE", "DeviceLimit", "TensorMemory"]

MIB = 2**20
SOURCE = ("tensors per logical device: parameters, gradients, optimiser state, live "
          "activations saved for backward (saved-tensor hooks) and DDP's gradient buckets")


def _local_nbytes(tensor: torch.Tensor) -> int:
    """Bytes this process holds for `tensor` (its shard, for a sharded DTensor)."""
    return _local(tensor).nbytes


def _local_state(optimizer: torch.optim.Optimizer) -> dict:
    """The optimiser state this process holds: ZeroRedundancyOptimizer keeps its rank's shard
    in its local optimiser (`.optim`), not in its own `state`."""
    local = getattr(optimizer, "optim", None)
    return local.state if isinstance(local, torch.optim.Optimizer) else optimizer.state


class _SavedTensors:
    """The activations autograd saves while the modules of one logical device run forward,
    counted live: added when saved, released when backward consumes them (parameters saved by
    an op are state, not counted twice)."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self._parameters = {_local(p).untyped_storage().data_ptr() for module in modules
                            for p in module.parameters()}
        self._lock = threading.Lock()
        self._live: dict[int, list[int]] = {}  # storage pointer -> [bytes, references]
        self._live_bytes = 0
        self.peak_bytes = 0
        self.step_peak_bytes = 0  # since the step began
        # Saved bytes beyond which the device runs out (its limit less what it holds besides):
        # None, no limit.
        self.budget_bytes: int | None = None
        self._contexts = threading.local()  # the hooks entered by this thread's forward
        self._handles = [handle for module in modules for handle in (
            module.register_forward_pre_hook(self._enter),
            module.register_forward_hook(self._exit, always_call=True))]

    def _enter(self, module, inputs) -> None:
        context = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        context.__enter__()
        self._contexts.__dict__.setdefault("stack", []).append(context)

    def _exit(self, module, inputs, output) -> None:
        self._contexts.stack.pop().__exit__(None, None, None)

    def _pack(self, tensor: torch.Tensor):
        # A parameter, or a view of one (attention saves its packed weight in chunks), is
        # state, counted as such; FSDP's gathered ones are transient, not activations.
        if isinstance(tensor, nn.Parameter) or isinstance(tensor._base, nn.Parameter):
            return tensor, None
        storage = _local(tensor).untyped_storage()
        pointer = storage.data_ptr()
        if pointer in self._parameters:
            return tensor, None
        with self._lock:
            entry = self._live.setdefault(pointer, [storage.nbytes(), 0])
            if entry[1] == 0:
                self._live_bytes += entry[0]
                self.peak_bytes = max(self.peak_bytes, self._live_bytes)
                self.step_peak_bytes = max(self.step_peak_bytes, self._live_bytes)
            entry[1] += 1
            budget = self.budget_bytes
            over = budget is not None and self._live_bytes > budget
        if over:
            raise torch.OutOfMemoryError(
                f"device memory: the activations saved for backward exceed the "
                f"{(budget or 0) / MIB:.0f} MiB the device has left beside its parameters, "
                "gradients and optimiser state (--device-memory-mib)")
        # Detached: the graph must not hold the tensor with its grad_fn, or an op's saved output
        # (a ReLU's, say) refers back to its own node, a cycle that only a backward through
        # that node breaks. The zero-bubble schedules' weight pass skips some nodes, and leaked
        # every step's graph (the same storage, so nothing is copied).
        return tensor.detach(), pointer

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

    def release(self) -> None:
        """After a step's backward: whatever was saved and not unpacked is freed."""
        with self._lock:
            self._live.clear()
            self._live_bytes = self.step_peak_bytes = 0

    def reset_peak(self) -> None:
        self.peak_bytes = self._live_bytes

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


@dataclass(frozen=True)
class DeviceLimit:
    """The memory each logical device has for its counted tensors (--device-memory-mib), and
    what the count needs to check it: the optimiser (its state) and the strategy's buffers."""

    mib: int
    optimizer: torch.optim.Optimizer
    buffer_bytes: Sequence[int] | None = None


class TensorMemory:
    """Peak memory of each logical device a strategy drives in this process, from the module
    (or modules, for a rank holding several pipeline stages) it runs there
    (`Strategy.placed_modules`) and its optimiser's state for them."""

    def __init__(self, placed: Sequence[nn.Module | Sequence[nn.Module]],
                 limit: DeviceLimit | None = None) -> None:
        self._modules = [[entry] if isinstance(entry, nn.Module) else list(entry)
                         for entry in placed]
        self._saved = [_SavedTensors(modules) for modules in self._modules]
        self._limit = limit
        self._check_limit([0] * len(self._saved))

    def after_step(self) -> None:
        """A step is done: the device ran out if it held more than its limit at the step's
        fullest (its state now, with the gradients and momentum the step made, and the
        activations it saved at most); then whatever it saved and did not use is freed."""
        peaks = [saved.step_peak_bytes for saved in self._saved]
        for saved in self._saved:
            saved.release()
        self._check_limit(peaks)

    def _check_limit(self, step_peaks: list[int]) -> None:
        """Raise torch.OutOfMemoryError where a device's count went over its limit; set what
        each may save in the next step before it runs out."""
        if self._limit is None:
            return
        limit = self._limit.mib * MIB
        buffers = self._limit.buffer_bytes or [0] * len(self._modules)
        for modules, saved, extra, peak in zip(self._modules, self._saved, buffers, step_peaks,
                                               strict=True):
            held = self._state_bytes(modules, self._limit.optimizer) + extra
            if held + peak > limit:
                raise torch.OutOfMemoryError(
                    f"device memory: {(held + peak) / MIB:.0f} MiB of tensors counted on a "
                    f"device of {self._limit.mib} MiB (--device-memory-mib)")
            saved.budget_bytes = limit - held

    def reset(self) -> None:
        for saved in self._saved:
            saved.reset_peak()

    def saved_peak_bytes(self) -> list[int]:
        """Per logical device: the most activation bytes alive at once since `reset`."""
        return [saved.peak_bytes for saved in self._saved]

    def read_mib(self, optimizer: torch.optim.Optimizer,
                 buffer_bytes: Sequence[int] | None = None) -> list[float]:
        """Per logical device: parameters, gradients and optimiser state, plus the peak of the
        activations saved for backward, plus `buffer_bytes` (what the strategy's library holds
        for the whole step: DDP's buckets)."""
        buffers = buffer_bytes or [0] * len(self._modules)
        return [(self._state_bytes(modules, optimizer) + saved.peak_bytes + extra) / MIB
                for modules, saved, extra in zip(self._modules, self._saved, buffers,
                                                 strict=True)]

    @staticmethod
    def _state_bytes(modules: list[nn.Module], optimizer: torch.optim.Optimizer) -> int:
        total = 0
        for parameter in (p for module in modules for p in module.parameters()):
            total += _local_nbytes(parameter)
            if parameter.grad is not None:
                total += _local_nbytes(parameter.grad)
            for value in _local_state(optimizer).get(parameter, {}).values():
                if isinstance(value, torch.Tensor):
                    total += _local_nbytes(value)
        return total

    def close(self) -> None:
        for saved in self._saved:
            saved.remove()


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor this process holds: a DTensor's shard (a DTensor's own storage is not one:
    tensor parallelism saves DTensors for backward), else the tensor."""
    if isinstance(tensor, DTensor):
        with torch.no_grad():
            return tensor.to_local()
    return tensor
