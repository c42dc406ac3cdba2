"""What tensor parallelism asks of the ViT family: its attention split apart computes the
same, and the split model's parameters pack back into the built model's."""

import copy

import torch
from torch import nn

from parbench.families.vit import SplitAttention, VisionTransformerFamily
from parbench.families.workloads import Workload


def test_split_attention_computes_what_multihead_attention_does():
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(64, 4, batch_first=True)
    split = SplitAttention(copy.deepcopy(attention))
    x = torch.randn(3, 5, 64)
    expected, _ = attention(x, x, x, need_weights=False)
    got, weights = split(x, x, x, need_weights=False)
    assert weights is None
    torch.testing.assert_close(got, expected)


def test_the_split_model_computes_the_same_and_its_parameters_pack_back():
    family = VisionTransformerFamily()
    model = Workload(model="vit_b_16", image_size=16, num_classes=10).build_model()
    split = copy.deepcopy(model)
    plans = family.tensor_parallel(split)
    assert len(plans) == 12 and plans[0][1] == {
        "self_attention.q": "colwise", "self_attention.k": "colwise",
        "self_attention.v": "colwise", "self_attention.out": "rowwise",
        "mlp.0": "colwise", "mlp.3": "rowwise"}
    assert all(isinstance(block.get_submodule(name), nn.Linear)
               for block, plan in plans for name in plan)
    images = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(split(images), model(images))
    packed = family.unsplit([(name, p.detach()) for name, p in split.named_parameters()])
    original = [p.detach() for p in model.parameters()]
    assert len(packed) == len(original)
    assert all(torch.equal(a, b) for a, b in zip(packed, original, strict=True))
    assert family.tensor_parallel_ways("vit_b_16") == 12
