"""A profile's rows: the profiled steps' operations, each given its count (FLOPs, bytes, dtype)
from the counted step, grouped by block, phase, operator, input shapes and dtype with the
number of calls, and timed by the median over the profiled steps."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict, deque
from dataclasses import dataclass

import torch

from parbench.advisor.profiling.op_profile.counting import CountedOp, Shapes
from parbench.advisor.profiling.op_profile.trace import TracedOp, TracedStep

__all__ = ["OpRow", "op_rows"]

# The profiler's names for dtypes (C++'s), for the few operations the counted step did not see.
_PROFILER_DTYPES = {"float": torch.float32, "double": torch.float64, "c10::Half": torch.float16,
                    "c10::BFloat16": torch.bfloat16, "long int": torch.int64, "int": torch.int32,
                    "short int": torch.int16, "signed char": torch.int8,
                    "unsigned char": torch.uint8, "bool": torch.bool}


@dataclass(frozen=True)
class OpRow:
    """The calls of one operator on the same input shapes and dtype in one block and phase of
    a step: their FLOPs, bytes and times summed over the calls (the times: the median over the
    profiled steps of each step's sum)."""

    block: str
    phase: str
    op: str
    input_shapes: Shapes
    dtype: str
    count: int
    flops: int
    bytes_read: int
    bytes_written: int
    device_s: float
    host_s: float
    # Calls the counted step did not see as the profiled ones ran them: unwatched, autograd
    # sums a gradient used twice in place (add_), and linear adds a 3-d input's bias in place,
    # where a dispatch mode sees them add out of place. Their bytes are read from the
    # profiler's shapes (an in-place op writing its first input) and they count no FLOPs
    # (flop_counter has no formula for an addition).
    uncounted: int = 0

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


def op_rows(counted: list[CountedOp],
            steps: list[TracedStep]) -> tuple[list[OpRow], dict[str, int]]:
    """The rows, in the order the first profiled step ran them, and the counted calls the first
    profiled step did not run, per operator (views and autograd's out-of-place gradient sums,
    which the profiler shows as they run without a dispatch mode)."""
    per_step: list = []
    unseen: Counter[str] = Counter()
    for index, step in enumerate(steps):
        pairs, left = _paired(counted, step.ops)
        per_step.append(pairs)
        if index == 0:
            unseen = Counter(op.name for op in left)
    return _grouped(per_step), dict(unseen)


def _paired(counted: list[CountedOp], traced: list[TracedOp]):
    """Each traced call with its counted twin (the next unused call of the same operator on
    the same shapes in the same block and phase), or None; and the counted calls left over."""
    queues: dict[tuple, deque[CountedOp]] = defaultdict(deque)
    for op in counted:
        queues[op.key].append(op)
    pairs = [(op, queues[op.key].popleft() if queues[op.key] else None) for op in traced]
    return pairs, [op for queue in queues.values() for op in queue]


def _grouped(per_step: list[list[tuple[TracedOp, CountedOp | None]]]) -> list[OpRow]:
    """Each step's calls summed per row; the rows and counts of the first step, each time the
    median of the steps' sums."""
    first: dict[tuple, OpRow] = {}
    times: dict[tuple, list[list[float]]] = defaultdict(lambda: [[0.0, 0.0] for _ in per_step])
    for index, pairs in enumerate(per_step):
        seen: dict[tuple, OpRow] = {}
        for traced, twin in pairs:
            call = _call(traced, twin)
            key = (call.block, call.phase, call.op, call.input_shapes, call.dtype)
            seen[key] = _added(seen[key], call) if key in seen else call
            times[key][index][0] += traced.device_s
            times[key][index][1] += traced.host_s
        if index == 0:
            first = seen
    rows = []
    for key, row in first.items():
        device, host = zip(*times[key], strict=True)
        rows.append(OpRow(**{**row.__dict__, "device_s": statistics.median(device),
                             "host_s": statistics.median(host)}))
    return rows


def _call(traced: TracedOp, twin: CountedOp | None) -> OpRow:
    if twin is not None:
        return OpRow(traced.block, traced.phase, traced.name, traced.input_shapes, twin.dtype,
                     1, twin.flops, twin.bytes_read, twin.bytes_written, 0.0, 0.0)
    sizes = [_size(shape, dtype)
             for shape, dtype in zip(traced.input_shapes, traced.input_dtypes, strict=False)
             if dtype in _PROFILER_DTYPES]
    dtypes = [dtype for dtype in traced.input_dtypes if dtype in _PROFILER_DTYPES]
    in_place = traced.name.endswith("_") and bool(sizes)
    return OpRow(traced.block, traced.phase, traced.name, traced.input_shapes,
                 str(_PROFILER_DTYPES[dtypes[0]]).removeprefix("torch.") if dtypes else "",
                 1, 0, sum(sizes), sizes[0] if in_place else 0, 0.0, 0.0, uncounted=1)


def _size(shape: tuple[int, ...], dtype: str) -> int:
    elements = 1
    for extent in shape:
        elements *= extent
    return elements * _PROFILER_DTYPES[dtype].itemsize


def _added(row: OpRow, call: OpRow) -> OpRow:
    return OpRow(row.block, row.phase, row.op, row.input_shapes, row.dtype,
                 row.count + call.count, row.flops + call.flops,
                 row.bytes_read + call.bytes_read, row.bytes_written + call.bytes_written,
                 0.0, 0.0, row.uncounted + call.uncounted)
