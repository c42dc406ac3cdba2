"""torchvision's Vision Transformers: patch embedding, encoder layers, a class-token head."""

from __future__ import annotations

import torch
import torchvision
from torch import nn
from torchvision.models import VisionTransformer

from parbench.families.base import ModelFamily

__all__ = ["VisionTransformerFamily"]

_PATCH = 16
_GROUPS = 4  # the encoder's layer groups under --fsdp-units group


class _PositionEmbedding(nn.Module):
    """Adds the encoder's position embedding (its own parameter, shared)."""

    def __init__(self, vit: VisionTransformer) -> None:
        super().__init__()
        self.pos_embedding = vit.encoder.pos_embedding
        self.dropout = vit.encoder.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pos_embedding)


class _Embed(nn.Module):
    """Images to tokens: patches projected, the class token prepended, positions added.
    Registered in the model's parameter order: class token, projection, positions."""

    def __init__(self, vit: VisionTransformer) -> None:
        super().__init__()
        self.class_token = vit.class_token
        self.conv_proj = vit.conv_proj
        self.positions = _PositionEmbedding(vit)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(images).flatten(2).transpose(1, 2)  # (batch, patches, hidden)
        token = self.class_token.expand(x.shape[0], -1, -1)
        return self.positions(torch.cat([token, x], dim=1))


class _Head(nn.Module):
    """The encoder's final LayerNorm, then the class token's logits."""

    def __init__(self, vit: VisionTransformer) -> None:
        super().__init__()
        self.ln = vit.encoder.ln
        self.heads = vit.heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads(self.ln(x)[:, 0])


class VisionTransformerFamily(ModelFamily):
    """vit_b_16 and vit_l_16 at any image size that is a multiple of the 16-px patch, cut
    between encoder layers; LayerNorm normalises each token on its own."""

    models = ("vit_b_16", "vit_l_16")
    batch_statistics = False
    min_image_size = _PATCH
    image_size_step = _PATCH
    # FSDP shards each encoder layer, as torchtitan shards each transformer block.
    fsdp_units = "block"

    def build(self, model: str, image_size: int, num_classes: int) -> nn.Module:
        # torchvision's dropout and attention dropout default to 0: no random layer.
        return getattr(torchvision.models, model)(weights=None, num_classes=num_classes,
                                                  image_size=image_size)

    def tutorial_cut(self, block_names: list[str]) -> str:
        """No tutorial cuts a ViT: its encoder layers halved (vit_b_16's 12 at encoder.6)."""
        layers = sum(name.startswith("encoder.") for name in block_names)
        return f"encoder.{layers // 2}"

    def layer_groups(self, model: nn.Module) -> list[list[nn.Module]]:
        """The encoder layers in four runs of consecutive layers, as a ResNet has four layer
        groups (vit_b_16's 12: 3 each); the patch embedding and the head are the root's."""
        assert isinstance(model, VisionTransformer), type(model).__name__
        layers = list(model.encoder.layers)
        groups = min(_GROUPS, len(layers))
        cuts = [len(layers) * index // groups for index in range(groups + 1)]
        return [layers[begin:end] for begin, end in zip(cuts[:-1], cuts[1:], strict=True)]

    def blocks(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """`embed`, every encoder layer (`encoder.5`), `head`."""
        assert isinstance(model, VisionTransformer), type(model).__name__
        layers = [(f"encoder.{index}", layer)
                  for index, layer in enumerate(model.encoder.layers)]
        return [("embed", _Embed(model)), *layers, ("head", _Head(model))]
