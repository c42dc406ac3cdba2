"""What is trained: the model families (one module each; adding one is its module and a line),
the workload built on one, and the batches each process trains on."""

from __future__ import annotations

from parbench.families.base import ModelFamily
from parbench.families.resnet import ResNetFamily
from parbench.families.vit import VisionTransformerFamily

__all__ = ["FAMILIES", "MODELS", "ModelFamily", "family_of"]

FAMILIES: tuple[ModelFamily, ...] = (ResNetFamily(), VisionTransformerFamily())
MODELS = tuple(model for family in FAMILIES for model in family.models)


def family_of(model: str) -> ModelFamily:
    """The family that builds `model`; a ValueError naming the choices for any other."""
    for family in FAMILIES:
        if model in family.models:
            return family
    raise ValueError(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
