"""FLOPs: training FLOPs per image (torch.utils.flop_counter) and the dense peak a GPU reaches.

The convention, one for every record: 2 FLOPs per multiply-accumulate, and a training step is a
forward and a backward pass as torch.utils.flop_counter counts them (about 3 forwards; the
optimiser's element-wise update is not counted). ResNet-50 at 224 px is then about 24.5 GFLOP
per image: torchvision's "4.09 GFLOPS" for it are multiply-accumulates of a forward pass.
MFU (model FLOPs utilisation) is the achieved FLOP/s over the dense peak of the physical
devices used at the precision trained in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["PEAK_TFLOPS", "peak_tflops", "training_flops_per_image"]

# Dense peak TFLOP/s from NVIDIA's data sheets (no sparsity): (16-bit: bf16 and fp16, TF32).
# fp32 training is held to the TF32 peak: PyTorch's cuDNN convolutions run in TF32 by default
# (torch.backends.cudnn.allow_tf32), and convolutions are nearly all of a ResNet's FLOPs.
# Matched as a substring of torch.cuda.get_device_name(), first match first.
PEAK_TFLOPS: dict[str, tuple[float, float]] = {
    "H100 PCIe": (756.0, 378.0),
    "H100 NVL": (835.0, 418.0),
    "H100": (989.0, 495.0),  # SXM: "NVIDIA H100 80GB HBM3"
    "H200 NVL": (835.0, 418.0),
    "H200": (989.0, 495.0),  # SXM: "NVIDIA H200"
    "A100": (312.0, 156.0),  # SXM4 and PCIe, 40 and 80 GB
}


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The dense peak TFLOP/s of one device of this name at this precision (fp32, bf16, fp16),
    or None for a device the table does not know (every CPU)."""
    for key, (half, tf32) in PEAK_TFLOPS.items():
        if device_name and key in device_name:
            return tf32 if precision == "fp32" else half
    return None


def training_flops_per_image(build_model: Callable[[], torch.nn.Module], image_size: int) -> int:
    """FLOPs of one forward and backward pass per image, counted on the meta device (no compute).

    Counted by torch.utils.flop_counter for the matmuls and convolutions, which dominate a ResNet.
    """
    with torch.device("meta"):
        model = build_model().to("meta")
    images = torch.empty(2, 3, image_size, image_size, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(images).sum().backward()
    return counter.get_total_flops() // 2
