"""Each operation of a training step as the dispatcher runs it below autograd, counted in a
step of its own: its FLOPs by torch.utils.flop_counter's formulas (FlopCounterMode's, 2 per
multiply-add), the bytes of the tensors it reads and writes, its dtype, and its input shapes
as the profiler records them (how a profiled step's operation finds its count)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from parbench.advisor.profiling.op_profile.labels import StepLabels

__all__ = ["CountedOp", "OpCounter", "dtype_name"]

Shapes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class CountedOp:
    """One call of an operation: where it ran, what it is, what it computes and moves."""

    block: str
    phase: str
    name: str  # the operator, as the profiler names it: "aten::convolution"
    input_shapes: Shapes  # each argument in its schema's order; () for all but tensors
    dtype: str  # what it computes in: its first floating-point input's ("bfloat16")
    flops: int
    bytes_read: int  # its input tensors', each once
    bytes_written: int  # its output tensors' (an in-place op's destination is read and written)

    @property
    def key(self) -> tuple[str, str, str, Shapes]:
        return self.block, self.phase, self.name, self.input_shapes


class OpCounter(TorchDispatchMode):
    """Records every operation that reaches the dispatcher below autograd (what FlopCounterMode
    counts): composite operations (conv2d, linear) arrive as the operations they decompose
    into, the operations a kernel calls inside itself do not arrive at all. Python runs for
    each, so it counts a step that is not timed."""

    def __init__(self, labels: StepLabels) -> None:
        super().__init__()
        self.labels = labels
        self.ops: list[CountedOp] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # Not the profiler's marks, nor a tensor subclass's questions about itself (FakeTensor's
        # `prim::device`, when a step is counted without storage): neither launches anything.
        if func.namespace not in ("profiler", "prim"):
            self.ops.append(_counted(func, args, kwargs, out, *self.labels.current))
        return out


def _counted(func, args, kwargs, out, block: str, phase: str) -> CountedOp:
    inputs = _tensors((args, kwargs))
    counter = flop_registry.get(func._overloadpacket)
    flops = int(counter(*args, **kwargs, out_val=out)) if counter else 0
    moves = not func.is_view  # a view launches nothing and moves nothing
    return CountedOp(block, phase, func._schema.name, _input_shapes(func, args, kwargs),
                     _compute_dtype(inputs, _tensors(out)), flops,
                     _bytes(inputs) if moves else 0, _bytes(_tensors(out)) if moves else 0)


def _tensors(tree) -> list[torch.Tensor]:
    """The distinct tensors in `tree`, in order."""
    seen: dict[int, torch.Tensor] = {}
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor):
            seen.setdefault(id(leaf), leaf)
    return list(seen.values())


def _bytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _input_shapes(func, args, kwargs) -> Shapes:
    """Each schema argument's shape, as torch.profiler's record_shapes gives it: a tensor's
    shape, () for anything else (a list of tensors too)."""
    shapes = []
    for index, argument in enumerate(func._schema.arguments):
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        shapes.append(tuple(value.shape) if isinstance(value, torch.Tensor) else ())
    return tuple(shapes)


def _compute_dtype(inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> str:
    tensors = inputs + outputs
    floating = [t for t in tensors if t.is_floating_point()]
    return dtype_name((floating or tensors)[0].dtype) if tensors else ""


def dtype_name(dtype: torch.dtype) -> str:
    """"bfloat16" for torch.bfloat16."""
    return str(dtype).removeprefix("torch.")
