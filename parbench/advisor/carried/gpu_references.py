"""Whole training steps measured on GPUs by parbench's own GPU runs, kept with their
provenance, from which a step on a GPU that is not here is carried (parbench.advisor.carried.carry):
the suite's reference measurements, shipped with it so that a machine without a GPU predicts
from them. tests/parbench/advisor/test_gpu_references.py holds each to its run's records."""

from __future__ import annotations

from dataclasses import dataclass

from parbench.machine.gpus import GpuSpec

__all__ = ["REFERENCES", "GpuReference", "choose_reference"]


@dataclass(frozen=True)
class GpuReference:
    """`single` training `model` at `batch` images of `image_size` px on `gpu`: its median
    step over its measured steps (one trial), and where it was measured."""

    gpu: str  # as torch.cuda.get_device_name names it
    model: str
    image_size: int
    precision: str  # fp32 (convolutions on TF32 tensor cores, torch's default) or bf16
    channels_last: bool
    cudnn_benchmark: bool
    batch: int
    step_s: float
    host_s: float | None  # the host's enqueue time of a step, where the run measured it
    torch: str
    run: str  # the run folder under results/
    measured_ips: float  # the record's throughput: images over its measured steps' time

    @property
    def throughput_ips(self) -> float:
        """The batch over the median step: what the carry is anchored at."""
        return self.batch / self.step_s


_FIRST_H200 = "20261126T004029Z-gpu-reference-h200/4-resnet50-224"
_SECOND_H200 = "20261127T111514Z-gpu-reference-h200/1-parts-a-e/e-data-parallel-and-slow"
_H100 = "20261127T011008Z-gpu-reference-h100/1-default/c-resnet50-224px-bf16"
REFERENCES: tuple[GpuReference, ...] = (
    GpuReference("NVIDIA H200", "resnet50", 224, "fp32", False, False, 256, 0.116778,
                 None, "2.11.0+cu130", f"{_FIRST_H200}/20261126T004738Z-ablation", 2190.6),
    GpuReference("NVIDIA H200", "resnet50", 224, "bf16", True, False, 256, 0.055024,
                 0.021190, "2.11.0+cu130", f"{_SECOND_H200}/20261127T111955Z-bf16-channels-last",
                 4646.9),
    GpuReference("NVIDIA H200", "resnet50", 224, "bf16", True, True, 256, 0.055485,
                 None, "2.11.0+cu130", f"{_FIRST_H200}/20261126T004713Z-bf16-channels-last",
                 4617.2),
    GpuReference("NVIDIA H100 80GB HBM3", "resnet50", 224, "bf16", True, True, 256, 0.064951,
                 0.019908, "2.11.0+cu130", f"{_H100}/20261127T011208Z-timm-job", 3913.5),
)


def _precision_class(precision: str) -> str:
    return "fp32" if precision == "fp32" else "bf16"  # fp16 and bf16 run alike on tensor cores


def choose_reference(model: str, image_size: int, precision: str, channels_last: bool,
                     target: GpuSpec, on: str | None = None) -> GpuReference:
    """The measured step to carry from: on `on` (a GPU's torch name) where given, else on
    another GPU than `target`; always in the job's precision class (fp32, or bf16 for bf16
    and fp16). Among those, the one sharing the most of the job's model, image size and
    memory format, then the H200's, then one without cuDNN's search."""
    candidates = [r for r in REFERENCES
                  if (r.gpu == on if on else r.gpu not in target.names)
                  and r.precision == _precision_class(precision)]
    if not candidates:
        raise ValueError(f"no GPU reference step in {_precision_class(precision)}"
                         + (f" on {on}" if on else ""))
    wanted = (model, image_size, channels_last)
    return max(candidates, key=lambda r: (
        sum(a == b for a, b in zip((r.model, r.image_size, r.channels_last), wanted,
                                   strict=True)), r.gpu == "NVIDIA H200", not r.cudnn_benchmark))
