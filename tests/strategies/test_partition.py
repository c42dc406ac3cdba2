import pytest
import torch

from parbench.workloads import Workload
from strategies.base import StrategyError
from strategies.partition import _balanced_bounds, cut_resnet, plan_cut, resnet_blocks


def _model(name="resnet50"):
    return Workload(model=name, image_size=32, num_classes=10).build_model()


def test_blocks_are_stem_every_residual_block_and_head():
    names = [name for name, _ in resnet_blocks(_model("resnet50"))]
    assert names[0] == "stem" and names[-1] == "head"
    assert len(names) == 1 + (3 + 4 + 6 + 3) + 1


def test_the_tutorial_cut_is_after_layer2():
    partition = plan_cut(_model("resnet50"), 2, "tutorial")
    assert partition.describe() == "stem..layer2.3 | layer3.0..head"


def test_stages_compose_to_the_whole_model():
    model = _model("resnet18").eval()
    _, stages = cut_resnet(model, 3, "params")
    images = torch.randn(2, 3, 32, 32)
    x = images
    for stage in stages:
        x = stage(x)
    assert torch.equal(x, model(images))
    assert sum(p.numel() for s in stages for p in s.parameters()) == sum(
        p.numel() for p in model.parameters())


def test_balanced_bounds_minimise_the_largest_stage():
    assert _balanced_bounds([1, 1, 1, 1], 2) == (0, 2)
    assert _balanced_bounds([5, 1, 1, 1, 1, 1], 2) == (0, 1)
    assert _balanced_bounds([1, 2, 3, 4, 5, 6, 7, 8, 9], 3) == (0, 5, 7)  # 15 | 13 | 17


def test_balance_by_params_and_by_time_give_valid_cuts():
    model = _model("resnet18")
    by_params = plan_cut(model, 4, "params")
    by_time = plan_cut(model, 4, "time", sample=torch.randn(2, 3, 32, 32))
    for partition in (by_params, by_time):
        assert partition.stages == 4
        assert all(len(r) >= 1 for r in partition.stage_ranges())


def test_timing_blocks_leaves_batchnorm_statistics_alone():
    model = _model("resnet18")
    before = model.bn1.running_mean.clone()
    plan_cut(model, 2, "time", sample=torch.randn(2, 3, 32, 32))
    assert torch.equal(model.bn1.running_mean, before)


@pytest.mark.parametrize("stages, balance, message", [
    (11, "params", "cannot cut 10 blocks into 11 stages"),
    (1, "params", "at least 2 stages"),
    (3, "tutorial", "the tutorial's cut has 2 stages"),
    (2, "random", "unknown balance 'random'"),
])
def test_impossible_cuts_are_refused(stages, balance, message):
    with pytest.raises(StrategyError, match=message):
        plan_cut(_model("resnet18"), stages, balance)
