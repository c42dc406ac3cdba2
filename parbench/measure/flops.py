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

from parbench.machine.gpus import gpu_named

__all__ = ["peak_tflops", "training_flops_per_image"]


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The dense peak TFLOP/s of one device of this name at this precision (fp32, bf16, fp16),
    or None for a device the table does not know (every CPU).

    The peak is machine.gpus' for a training step at the precision (fp32 at TF32's: PyTorch's
    cuDNN convolutions run in TF32 by default, and convolutions are nearly all of a ResNet's
    FLOPs), to three significant figures as records carry it (989 and 495 on an H100 SXM5)."""
    gpu = gpu_named(device_name)
    if gpu is None:
        return None
    return float(f"{gpu.training_peak_tflops(precision):.3g}")


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
