"""Training FLOPs per image, counted by torch.utils.flop_counter on the meta device."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["training_flops_per_image"]


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
