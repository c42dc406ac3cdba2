"""Every model family keeps the promises strategies rely on: its blocks compute its forward pass,
hold its parameters in order, and its cuts and image sizes are checked."""

import pytest
import torch

from parbench import strategies
from parbench.drive.verify import verify
from parbench.families import FAMILIES, MODELS, family_of
from parbench.families.workloads import Workload
from parbench.strategies.partition import plan_cut
from tests.support import CPU2

# The smallest member of each family, at a small size it trains on.
SMALLEST = [("resnet18", 32), ("vit_b_16", 32)]


def test_every_family_is_tested_and_every_model_has_one_family():
    assert {family_of(model) for model, _ in SMALLEST} == set(FAMILIES)
    assert len(MODELS) == len(set(MODELS))


@pytest.mark.parametrize("model, size", SMALLEST)
def test_blocks_called_in_order_compute_the_model_and_hold_its_parameters(model, size):
    workload = Workload(model=model, image_size=size, num_classes=10)
    network = workload.build_model().eval()
    blocks = workload.family.blocks(network)
    images, _ = workload.make_batch(2, "cpu")
    x = images
    with torch.no_grad():
        for _, block in blocks:
            x = block(x)
        assert torch.equal(x, network(images))
    held = [p for _, block in blocks for p in block.parameters()]
    assert [id(p) for p in held] == [id(p) for p in network.parameters()]  # verify's order


@pytest.mark.parametrize("model, cut", [
    ("resnet50", "stem..layer2.3 | layer3.0..head"),
    ("vit_b_16", "embed..encoder.5 | encoder.6..head"),
])
def test_the_tutorial_cut_is_the_familys(model, cut):
    workload = Workload(model=model, image_size=32)
    with torch.device("meta"):
        network = workload.build_model()
    assert plan_cut(workload, network, 2, "tutorial").describe() == cut


@pytest.mark.parametrize("model, reference", [("resnet18", 2), ("vit_b_16", None)])
def test_normalisation_decides_the_reference_of_a_split_step(model, reference):
    """BatchNorm normalises per micro-batch: the baseline accumulating over the same 2-image
    micro-batches; LayerNorm per sample: the whole-batch step."""
    workload = Workload(model=model, image_size=32)
    plan = strategies.plan("pipeline", workload, 4, CPU2.logical, {"split_size": 2})
    assert plan.reference_micro_batch == reference


@pytest.mark.parametrize("model, size, message", [
    ("resnet18", 16, "resnet18 cannot train on images of 16 px; use at least 32"),
    ("vit_b_16", 40, "vit_b_16 cannot train on images of 40 px; use a multiple of 16 (e.g. 32)"),
    ("vit_b_16", 8, "use at least 16"),
    ("alexnet", 64, "unknown model 'alexnet'; choose from resnet18, "),
])
def test_a_size_or_model_no_family_trains_is_refused(model, size, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Workload(model=model, image_size=size)


def test_a_resnet_at_32_px_needs_two_images_per_batch():
    assert family_of("resnet18").smallest_batch(32) == 2
    assert family_of("resnet18").smallest_batch(64) == 1
    assert family_of("vit_b_16").smallest_batch(32) == 1


@pytest.mark.slow  # a ViT trained by every strategy that uses its blocks
def test_a_vit_trains_as_the_baseline_does_where_strategies_use_its_blocks():
    """The paths that ask the family (stages cut at its blocks, as every pipeline cuts them;
    FSDP's units) make the whole-batch step: LayerNorm needs no accumulating reference. The
    one-process pipeline cuts as the scheduled ones do (build_stages), without their spawned
    ranks each building 86 M parameters."""
    workload = Workload(model="vit_b_16", image_size=32, num_classes=10)
    names = ["pipeline", "fsdp"]
    verdicts = verify(workload, CPU2, names, 4, {"split_size": 2}, 1e-5)
    assert [(v.strategy, v.ok) for v in verdicts] == [(name, True) for name in names], verdicts


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "vit_b_16"])
def test_layer_group_names_hold_the_parameters_of_the_layer_groups_fsdp_shards(model):
    """The timing models gather a profile's blocks by layer_group_names, the strategy
    fully_shards layer_groups: each group named holds the same parameters as the unit."""
    family = family_of(model)
    with torch.device("meta"):
        network = family.build(model, 32, 10)
    blocks = dict(family.blocks(network))
    named = family.layer_group_names(list(blocks))
    assert [sorted(id(p) for name in group for p in blocks[name].parameters())
            for group in named] == [sorted(id(p) for module in group for p in module.parameters())
                                    for group in family.layer_groups(network)]
    assert len(named) == 4
