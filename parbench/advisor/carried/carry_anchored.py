"""A whole step measured on one GPU, where no per-operation profile was taken, carried to another
by its operations' rooflines: T_B = T_A x (sum of the rooflines on B) / (sum on A), each
operation's roofline the longest of its FLOPs at the peak it runs at, its bytes at the memory
bandwidth, and its calls at the launch floor. PREDICTED, naming the GPU and run it came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parbench.advisor.carried.carry import (
    PREDICTED,
    PYTORCH_DEFAULTS,
    Math,
    math_peak_tflops,
    operation_kind,
)
from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.machine.gpus import GpuSpec

__all__ = ["ASSUMPTION", "AnchoredStep", "carry_step", "roofline_s"]

ASSUMPTION = ("each operation reaches the same share of its roofline on both GPUs (the measured "
              "step over the sum of its rooflines, the same on the other GPU)")


@dataclass(frozen=True)
class AnchoredStep:
    """A measured step carried by the ratio of its operations' rooflines on the two GPUs."""

    source: GpuSpec
    source_run: str
    target: GpuSpec
    source_step_s: float
    source_roofline_s: float
    target_roofline_s: float
    launch_floor_s: float
    math: Math
    label: str = PREDICTED
    assumption: str = ASSUMPTION

    @property
    def step_s(self) -> float:
        return self.source_step_s * self.target_roofline_s / self.source_roofline_s

    @property
    def headline(self) -> str:
        return (f"{self.label}: {self.target.label} from {self.source.label} ({self.source_run}): "
                f"step {self.step_s * 1e3:.3g} ms (measured {self.source_step_s * 1e3:.3g} ms; "
                f"rooflines {self.target_roofline_s * 1e3:.3g} against "
                f"{self.source_roofline_s * 1e3:.3g} ms)")


def roofline_s(row: OpRow, gpu: GpuSpec, launch_floor_s: float,
               math: Math = PYTORCH_DEFAULTS) -> float:
    """The least time `row`'s calls take on `gpu`: the longest of its FLOPs at the peak its math
    runs at (none for an operation counted without FLOPs), its bytes at the memory bandwidth,
    and its calls at the launch floor; nothing for one that moves and computes nothing (a
    view, which launches no kernel)."""
    if not row.flops and not row.bytes_moved:
        return 0.0
    kind = operation_kind(row)
    compute = 0.0 if kind == "memory" else \
        row.flops / (math_peak_tflops(gpu, kind, row.dtype, math) * 1e12)
    return max(compute, row.bytes_moved / gpu.memory_bandwidth_bytes_s,
               row.count * launch_floor_s)


def carry_step(step_s: float, rows: Sequence[OpRow], source: GpuSpec, target: GpuSpec, *,
               launch_floor_s: float, source_run: str,
               math: Math = PYTORCH_DEFAULTS) -> AnchoredStep:
    """`step_s` measured on `source` (a record's step_time_median_s) carried to `target` by the
    rooflines of `rows`, the step's operations (counted_rows of count_step: no times needed).
    `launch_floor_s` is a measured one (carry.launch_floor_s of a profile taken on a GPU), or
    0 to leave the floor out."""
    on_source = sum(roofline_s(row, source, launch_floor_s, math) for row in rows)
    on_target = sum(roofline_s(row, target, launch_floor_s, math) for row in rows)
    if not on_source:
        raise ValueError("the step's operations move and compute nothing: nothing to carry by")
    return AnchoredStep(source, source_run, target, step_s, on_source, on_target,
                        launch_floor_s, math)
