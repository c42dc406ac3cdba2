"""A training step measured on one GPU carried to another by what bounds each operation, as
Habitat (USENIX ATC'21) carries a profile (without its wave scaling): an operation above the
measured GPU's ridge point is bound by compute and scales by the two GPUs' peaks for the math
it runs on, one below by their memory bandwidths, and none runs faster than a launch. Every
figure it returns is PREDICTED and names the GPU and run it was carried from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.store import rows_of
from parbench.machine.gpus import GpuSpec, gpu_named

__all__ = ["PREDICTED", "PYTORCH_DEFAULTS", "CarriedOp", "CarriedProfile", "Math", "carry_document",
           "carry_profile", "launch_floor_s", "math_peak_tflops", "operation_kind"]

PREDICTED = "PREDICTED"


@dataclass(frozen=True)
class Math:
    """Where PyTorch runs fp32 matmuls and convolutions, as its defaults have them: cuDNN's
    convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 = True), cuBLAS's
    matmuls on fp32 CUDA cores (torch.backends.cuda.matmul.allow_tf32 = False)."""

    tf32_convolutions: bool = True
    tf32_matmuls: bool = False


PYTORCH_DEFAULTS = Math()


def operation_kind(row: OpRow) -> str:
    """"convolution", "matmul" (mm, addmm, bmm, attention: what flop_counter counts FLOPs of
    but convolutions), or "memory" for every operation it counts no FLOPs of (element-wise,
    normalisation, copies, reductions): bound by memory whatever its dtype."""
    if not row.flops:
        return "memory"
    return "convolution" if "convolution" in row.op else "matmul"


def math_peak_tflops(gpu: GpuSpec, kind: str, dtype: str, math: Math = PYTORCH_DEFAULTS) -> float:
    """The dense peak `gpu` runs a `kind` operation in `dtype` at: fp32 on TF32 tensor cores
    where `math` says PyTorch uses them and the GPU has them, else on its CUDA cores; bf16 and
    fp16 on tensor cores with fp32 accumulate. A 16-bit dtype the table gives the GPU no peak
    for is refused (a V100's bf16, a P40's fp16 at 1/64 of its fp32): not predicted, rather
    than carried at a rate the GPU does not have."""
    if dtype == "float32":
        tf32 = math.tf32_convolutions if kind == "convolution" else math.tf32_matmuls
        return (gpu.tf32_tflops if tf32 else None) or gpu.fp32_tflops
    if dtype in ("bfloat16", "float16"):
        peak = gpu.bf16_tflops if dtype == "bfloat16" else gpu.fp16_tflops
        if peak is None:
            name = "bf16" if dtype == "bfloat16" else "fp16"
            raise ValueError(f"{gpu.label} has no {name} tensor cores in the GPU table: a {name} "
                             "step on it is not predicted; give fp32")
        return peak
    raise ValueError(f"no peak for {kind} in {dtype!r}: the GPU table has fp32, TF32, bf16 and "
                     "fp16 only")


def launch_floor_s(rows: Sequence[OpRow]) -> float:
    """The least a call costs on the device, measured: the smallest per-call device time of the
    rows whose calls ran kernels (a launch and the smallest kernel)."""
    per_call = [row.device_s / row.count for row in rows if row.count and row.device_s > 0]
    if not per_call:
        raise ValueError("no operation of the profile ran a kernel: no launch floor to measure")
    return min(per_call)


@dataclass(frozen=True)
class CarriedOp:
    """One row carried: what bounds it on the measured GPU and its time on the other."""

    row: OpRow
    kind: str  # operation_kind's
    bound: str  # "compute" or "memory"
    intensity: float  # FLOPs per byte moved
    ridge: float | None  # the measured GPU's FLOPs per byte for the row's math; None: memory
    scale: float  # the other GPU's time over the measured one's, by peak or bandwidth
    device_s: float  # on the other GPU, floored
    floored: bool  # at its calls times the launch floor


@dataclass(frozen=True)
class CarriedProfile:
    """A per-operation profile carried from `source` to `target`: each row's device time, and
    the host time the source measured, carried as it is (the host that drives the target is
    taken to dispatch as fast). A step whose host time exceeds its carried device time is
    dispatch-bound: the device waits for the host, and the step is the host's time."""

    source: GpuSpec
    source_run: str
    target: GpuSpec
    ops: tuple[CarriedOp, ...]
    launch_floor_s: float
    math: Math
    label: str = PREDICTED

    @property
    def source_device_s(self) -> float:
        return sum(op.row.device_s for op in self.ops)

    @property
    def device_s(self) -> float:
        return sum(op.device_s for op in self.ops)

    @property
    def host_s(self) -> float:
        return sum(op.row.host_s for op in self.ops)

    @property
    def dispatch_bound(self) -> bool:
        return self.host_s > self.device_s

    @property
    def step_s(self) -> float:
        """The carried step: its operations' device time, or the host's where that is longer."""
        return max(self.device_s, self.host_s)

    def share(self, bound: str) -> float:
        """The share of the measured device time in operations bound by `bound` (compute,
        memory) or held at the launch floor on the target (floor)."""
        total = self.source_device_s or 1.0
        if bound == "floor":
            return sum(op.row.device_s for op in self.ops if op.floored) / total
        return sum(op.row.device_s for op in self.ops
                   if op.bound == bound and not op.floored) / total

    @property
    def headline(self) -> str:
        kind = "dispatch-bound (the host's time)" if self.dispatch_bound else "device-bound"
        return (f"{self.label}: {self.target.label} from {self.source.label} ({self.source_run}): "
                f"step {self.step_s * 1e3:.3g} ms, {kind}; device {self.device_s * 1e3:.3g} ms "
                f"(measured {self.source_device_s * 1e3:.3g} ms), host "
                f"{self.host_s * 1e3:.3g} ms as measured")


def carry_profile(rows: Sequence[OpRow], source: GpuSpec, target: GpuSpec, *, source_run: str,
                  math: Math = PYTORCH_DEFAULTS) -> CarriedProfile:
    """`rows` (a per-operation profile measured on `source`,
    parbench.advisor.profiling.op_profile's) carried to `target`: each row classed by its FLOPs
    per byte against the source's ridge point for its math (the peak PyTorch runs it at over the
    memory bandwidth), its device time scaled by the two GPUs' peaks if above, by their
    bandwidths if below, and floored at its calls times the launch floor the profile measured
    (launch_floor_s); a row that ran no kernel on the source (a view) runs none on the target."""
    floor = launch_floor_s(rows)
    carried = tuple(_carried(row, source, target, floor, math) for row in rows)
    return CarriedProfile(source, source_run, target, carried, floor, math)


def carry_document(document: dict, target: GpuSpec, *, source_run: str,
                   math: Math = PYTORCH_DEFAULTS) -> CarriedProfile:
    """A profile's document (op_profile.read_op_profile's) carried to `target` from the GPU it
    names (its device_name, as torch.cuda.get_device_name gave it)."""
    source = gpu_named(document.get("device_name"))
    if source is None or not str(document.get("device", "")).startswith("cuda"):
        raise ValueError(f"{source_run}: measured on {document.get('device_name')!r}, not a GPU "
                         "the table knows (parbench.machine.gpus): it cannot be carried")
    return carry_profile(rows_of(document), source, target, source_run=source_run, math=math)


def _carried(row: OpRow, source: GpuSpec, target: GpuSpec, floor: float,
             math: Math) -> CarriedOp:
    kind = operation_kind(row)
    intensity = row.flops / row.bytes_moved if row.bytes_moved else float("inf")
    ridge = None
    scale = source.memory_bandwidth_gbs / target.memory_bandwidth_gbs
    if kind != "memory":
        source_peak = math_peak_tflops(source, kind, row.dtype, math)
        ridge = source_peak * 1e12 / source.memory_bandwidth_bytes_s
        if intensity >= ridge:
            scale = source_peak / math_peak_tflops(target, kind, row.dtype, math)
    bound = "compute" if ridge is not None and intensity >= ridge else "memory"
    scaled = row.device_s * scale
    least = row.count * floor if row.device_s > 0 else 0.0
    return CarriedOp(row, kind, bound, intensity, ridge, scale, max(scaled, least),
                     least > scaled)
