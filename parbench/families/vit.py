"""torchvision's Vision Transformers: patch embedding, encoder layers, a class-token head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torchvision.models import VisionTransformer

from parbench.families.base import ModelFamily

__all__ = ["SplitAttention", "VisionTransformerFamily"]

_PATCH = 16
_GROUPS = 4  # the encoder's layer groups under --fsdp-units group
_HEADS = {"vit_b_16": 12, "vit_l_16": 16}  # torchvision's builders' num_heads
# How tensor parallelism splits an encoder layer, as torchtitan splits a transformer block:
# the attention's query, key and value by heads and the MLP's first layer by features
# (colwise), their output layers by input features, the partial sums all-reduced (rowwise).
_LAYER_PLAN = {"self_attention.q": "colwise", "self_attention.k": "colwise",
               "self_attention.v": "colwise", "self_attention.out": "rowwise",
               "mlp.0": "colwise", "mlp.3": "rowwise"}


_Item = TypeVar("_Item")


def _in_runs(layers: list[_Item]) -> list[list[_Item]]:
    """The encoder's layers in _GROUPS runs of consecutive layers (fewer if fewer layers)."""
    groups = min(_GROUPS, len(layers))
    cuts = [len(layers) * index // groups for index in range(groups + 1)]
    return [layers[begin:end] for begin, end in zip(cuts[:-1], cuts[1:], strict=True)]


class SplitAttention(nn.Module):
    """An encoder layer's nn.MultiheadAttention (self-attention, batch first, no weights
    returned) computed the same way with its packed input projection as three Linears, so that
    tensor parallelism can split query, key and value by heads: each rank then attends over the
    heads its shard of them holds (the head count follows from the features it is given)."""

    def __init__(self, attention: nn.MultiheadAttention) -> None:
        super().__init__()
        # What torchvision's encoder layers build: one packed projection, batch first.
        assert attention.batch_first and attention.in_proj_weight is not None, attention
        width = attention.embed_dim
        self.head_dim = width // attention.num_heads
        self.dropout = attention.dropout
        weights = attention.in_proj_weight.detach().split(width)
        biases = attention.in_proj_bias.detach().split(width)
        self.q, self.k, self.v = (nn.Linear(width, width, device=weight.device,
                                            dtype=weight.dtype) for weight in weights)
        with torch.no_grad():
            for linear, weight, bias in zip((self.q, self.k, self.v), weights, biases,
                                            strict=True):
                linear.weight.copy_(weight)
                linear.bias.copy_(bias)
        self.out = attention.out_proj

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                need_weights: bool = False) -> tuple[torch.Tensor, None]:
        # An encoder layer calls it as self-attention without a mask or its weights.
        assert not need_weights, "SplitAttention returns no attention weights"
        batch, tokens, _ = query.shape

        def heads(x: torch.Tensor) -> torch.Tensor:  # (batch, heads, tokens, head_dim)
            return x.view(batch, tokens, -1, self.head_dim).transpose(1, 2)

        attended = F.scaled_dot_product_attention(
            heads(self.q(query)), heads(self.k(key)), heads(self.v(value)),
            dropout_p=self.dropout if self.training else 0.0)
        return self.out(attended.transpose(1, 2).reshape(batch, tokens, -1)), None


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
    tensor_parallel_refusal = None  # tensor_parallel splits each encoder layer

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
        return _in_runs(list(model.encoder.layers))

    def layer_group_names(self, block_names: Sequence[str]) -> list[list[str]]:
        """The encoder layers' names (`encoder.3`) in layer_groups' runs."""
        return _in_runs(list(block_names[1:-1]))

    def blocks(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """`embed`, every encoder layer (`encoder.5`), `head`."""
        assert isinstance(model, VisionTransformer), type(model).__name__
        layers = [(f"encoder.{index}", layer)
                  for index, layer in enumerate(model.encoder.layers)]
        return [("embed", _Embed(model)), *layers, ("head", _Head(model))]

    def tensor_parallel(self, model: nn.Module) -> list[tuple[nn.Module, dict[str, str]]]:
        """Every encoder layer, its attention swapped for the same computation with query, key
        and value apart (SplitAttention), split as torchtitan splits a transformer block."""
        assert isinstance(model, VisionTransformer), type(model).__name__
        for layer in model.encoder.layers:
            layer.self_attention = SplitAttention(layer.self_attention)
        return [(layer, dict(_LAYER_PLAN)) for layer in model.encoder.layers]

    def tensor_parallel_ways(self, model: str) -> int:
        return _HEADS[model]

    def unsplit(self, named: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
        """Each SplitAttention's query, key and value packed again into the in_proj_weight and
        in_proj_bias of nn.MultiheadAttention, which hold them in that order and come first."""
        by_name = dict(named)
        packed: list[torch.Tensor] = []
        for name, tensor in named:
            prefix, _, leaf = name.rpartition(".")
            if prefix.endswith("self_attention.q"):
                base = prefix[:-1]
                packed.append(torch.cat([by_name[f"{base}{part}.{leaf}"] for part in "qkv"]))
            elif not prefix.endswith(("self_attention.k", "self_attention.v")):
                packed.append(tensor)
        return packed
