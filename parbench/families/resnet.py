"""torchvision's ResNets: a stem, residual blocks in four layers, a pooled linear head."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torchvision
from torch import nn
from torchvision.models import ResNet

from parbench.families.base import ModelFamily

__all__ = ["ResNetFamily"]


class ResNetFamily(ModelFamily):
    """resnet18..resnet152, cut between residual blocks; BatchNorm normalises per batch."""

    models = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
    batch_statistics = True
    # BatchNorm needs more than one value per channel: layer4 downsamples by 32.
    min_image_size = 32
    # FSDP shards layer1..layer4, four units (resnet50's 16 blocks made 17 units with the
    # root, each a small all-gather a GPU waits for).
    fsdp_units = "group"
    tensor_parallel_refusal = (
        "tensor parallelism splits linear layers by their features (torch's "
        "parallelize_module), and a ResNet is convolutions and BatchNorm: use ddp, fsdp or a "
        "pipeline, or a ViT (--model vit_b_16)")

    def build(self, model: str, image_size: int, num_classes: int) -> nn.Module:
        return getattr(torchvision.models, model)(weights=None, num_classes=num_classes)

    def blocks(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """Stem, every residual block (`layer2.3`), head."""
        assert isinstance(model, ResNet), type(model).__name__
        blocks: list[tuple[str, nn.Module]] = [
            ("stem", nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool))]
        for layer_name in ("layer1", "layer2", "layer3", "layer4"):
            for index, block in enumerate(getattr(model, layer_name)):
                blocks.append((f"{layer_name}.{index}", block))
        blocks.append(("head", nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)))
        return blocks

    def layer_groups(self, model: nn.Module) -> list[list[nn.Module]]:
        """layer1, layer2, layer3, layer4 (the stem and the head are the root's)."""
        assert isinstance(model, ResNet), type(model).__name__
        return [[model.layer1], [model.layer2], [model.layer3], [model.layer4]]

    def layer_group_names(self, block_names: Sequence[str]) -> list[list[str]]:
        """The residual blocks of each layer (`layer2.0`, `layer2.1`, ...)."""
        return [list(names) for _, names in itertools.groupby(
            block_names[1:-1], key=lambda name: name.split(".")[0])]

    def tutorial_cut(self, block_names: list[str]) -> str:
        return "layer3.0"  # the tutorial's conv1..layer2 | layer3..fc

    def smallest_batch(self, image_size: int) -> int:
        # Up to 32 px layer4's output is one pixel, and BatchNorm cannot train on one value
        # per channel: one image.
        return 2 if image_size <= 32 else 1
