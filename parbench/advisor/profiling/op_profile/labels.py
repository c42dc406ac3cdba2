"""Where in a training step each operation runs: the block and phase it belongs to, set by
hooks on the model family's blocks and by the step itself, and marked in the profiler's trace
as zero-length ranges that the trace's operations are told apart by."""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.profiler import record_function

__all__ = ["END", "LOSS", "MARKER", "OPTIMIZER", "PHASES", "STEP", "StepLabels"]

PHASES = ("forward", "backward", "optimizer")
LOSS = "loss"  # the loss is a block of its own after the model's last: forward and backward
OPTIMIZER = "optimizer"  # the optimiser's step (with fp16's unscaling): block and phase
MARKER = "parbench:"  # the profiler ranges' prefix: "parbench:stem:forward", "parbench:step"
STEP = MARKER + "step"  # a step starts
END = MARKER + "end"  # a step ends, its device work done


class StepLabels:
    """The (block, phase) a step is in, read by the op counter as ops run and marked in the
    profiler's trace, where the operations that follow a mark belong to it. A block's forward
    starts at its forward pre-hook, its backward when the gradient of its output is ready
    (a hook on that tensor): the blocks run one after another, so a block's weight
    gradients, computed in the same autograd nodes as its input gradient or right after them
    (the engine runs the nodes made last first), fall in its own backward."""

    def __init__(self, blocks: list[tuple[str, nn.Module]]) -> None:
        self.current = ("", "")
        self._handles = [block.register_forward_pre_hook(self._forward_starts(name))
                         for name, block in blocks]
        self._handles += [block.register_forward_hook(self._backward_starts_later(name))
                          for name, block in blocks]

    def _forward_starts(self, block: str):
        def hook(*_) -> None:
            self.enter(block, "forward")
        return hook

    def _backward_starts_later(self, block: str):
        """A hook on the block's output that marks its backward as its gradient arrives: a
        tensor hook, which adds no operation (a full backward pre-hook adds a view)."""
        def hook(_module, _inputs, output) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(lambda _: self.enter(block, "backward"))
        return hook

    def enter(self, block: str, phase: str) -> None:
        """From here on the step is in `block`'s `phase`."""
        self.current = (block, phase)
        with record_function(f"{MARKER}{block}:{phase}"):
            pass

    def start_step(self) -> None:
        self.current = ("", "")
        with record_function(STEP):
            pass

    def end_step(self) -> None:
        with record_function(END):
            pass

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
