"""What is trained: a torchvision model, its synthetic data, loss, optimiser and precision."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch
from torch import nn

from parbench.families import FAMILIES, MODELS, ModelFamily, family_of

__all__ = ["MIN_IMAGE_SIZE", "MODELS", "PRECISIONS", "Workload"]

PRECISIONS = ("fp32", "bf16", "fp16")
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The smallest image any family trains on (each family checks its own).
MIN_IMAGE_SIZE = min(family.min_image_size for family in FAMILIES)


@dataclass(frozen=True)
class Workload:
    """One training job, identical for every strategy: model, data shape, loss, optimiser."""

    model: str = "resnet50"
    image_size: int = 128
    num_classes: int = 1000
    precision: str = "fp32"
    channels_last: bool = False
    # torch.compile each module a strategy runs (compiled by the first warm-up step).
    compile: bool = False
    # cuDNN picks the fastest convolution algorithm for each new input shape by timing them
    # (torch.backends.cudnn.benchmark; timm's benchmark.py turns it on): off by default, as in
    # torch. It applies to CUDA only.
    cudnn_benchmark: bool = False
    seed: int = 0
    learning_rate: float = 0.01
    momentum: float = 0.9
    # An image folder (one subfolder per class) to train on instead of synthetic data.
    data_dir: str | None = None
    # Where fp16's gradient scaler starts (torch's default; verify starts lower).
    initial_loss_scale: float = 2.0**16

    def __post_init__(self) -> None:
        family = family_of(self.model)  # a ValueError for a model no family builds
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"unknown precision {self.precision!r}; choose from {', '.join(PRECISIONS)}"
            )
        problem = family.image_size_problem(self.image_size)
        if problem:
            raise ValueError(f"{self.model} cannot train on images of {self.image_size} px; "
                             f"{problem}")
        if self.num_classes < 1:
            raise ValueError(f"num classes must be at least 1, got {self.num_classes}")

    def describe(self) -> dict:
        described = asdict(self)
        # Settings at their default are left out, as before they existed: run folders
        # resume as they were.
        if not self.compile:
            del described["compile"]
        if not self.cudnn_benchmark:
            del described["cudnn_benchmark"]
        if self.initial_loss_scale == Workload.initial_loss_scale:
            del described["initial_loss_scale"]
        return described

    @property
    def family(self) -> ModelFamily:
        """The model's family: its blocks, cuts and normalisation, for the strategies."""
        return family_of(self.model)

    def build_model(self) -> nn.Module:
        """A randomly initialised model; the same weights for the same seed, on the CPU."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self.family.build(self.model, self.image_size, self.num_classes)

    def build_model_on(self, device: torch.device | str) -> nn.Module:
        """`build_model` placed on `device`, in the workload's memory format, in training mode."""
        return self.prepare_model(self.build_model().to(device)).train()

    def make_batch(self, batch_size: int,
                   device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic images and labels for `device`, the same for the same seed on any device."""
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        shape = (batch_size, 3, self.image_size, self.image_size)
        images = torch.randn(shape, generator=generator).to(device)
        labels = torch.randint(0, self.num_classes, (batch_size,), generator=generator).to(device)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def input_bytes(self, images: int) -> int:
        """What `images` input images take as float32 pixels, in bytes."""
        return images * 3 * self.image_size**2 * 4

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Apply the memory format the workload asks for (after the model is on its device)."""
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def compiled(self, module: nn.Module) -> nn.Module:
        """`module` under torch.compile when the workload asks for it (it compiles on its first
        call, which the harness keeps in the warm-up); else `module` itself. The compiled
        module shares the original's parameters."""
        if not self.compile:
            return module
        # Static shapes: stages and micro-batches of other shapes each get their own graph
        # (the stages share nn.Sequential.forward, which dynamo would otherwise make dynamic).
        # Typed as the callable it wraps; a Module's is an OptimizedModule (a Module).
        return torch.compile(module, dynamic=False)  # type: ignore[return-value]

    def loss_fn(self) -> nn.Module:
        return nn.CrossEntropyLoss()

    def make_optimizer(self, parameters) -> torch.optim.Optimizer:
        return torch.optim.SGD(parameters, lr=self.learning_rate, momentum=self.momentum)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype autocast computes in (None for fp32)."""
        return _AUTOCAST_DTYPES.get(self.precision)

    def autocast(self, device: torch.device | str):
        """Mixed-precision context for code running on `device` (a no-op for fp32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=self.autocast_dtype)

    def make_grad_scaler(self, device: torch.device | str) -> torch.amp.GradScaler:
        """Loss scaling is needed for fp16 only; a disabled scaler passes calls straight through."""
        return torch.amp.GradScaler(torch.device(device).type, init_scale=self.initial_loss_scale,
                                    enabled=self.precision == "fp16")
