import contextlib
import itertools

import pytest
import torch

from parbench import strategies
from parbench.families.workloads import Workload
from parbench.machine.devices import parse_devices
from parbench.strategies.base import StrategyError
from parbench.strategies.device_timer import StepClock
from parbench.strategies.partition import _balanced_bounds, cut_model, plan_cut
from parbench.strategies.stages import MAX_TIMING_BATCH, timing_batch


def _workload(name="resnet50"):
    return Workload(model=name, image_size=32, num_classes=10)


def _model(name="resnet50"):
    return _workload(name).build_model()


def test_the_tutorial_cut_is_after_layer2():
    partition = plan_cut(_workload("resnet50"), _model("resnet50"), 2, "tutorial")
    assert partition.describe() == "stem..layer2.3 | layer3.0..head"


def test_stages_compose_to_the_whole_model():
    model = _model("resnet18").eval()
    _, stages = cut_model(_workload("resnet18"), model, 3, "params")
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
    model, workload = _model("resnet18"), _workload("resnet18")
    by_params = plan_cut(workload, model, 4, "params")
    by_time = plan_cut(workload, model, 4, "time", sample=torch.randn(2, 3, 32, 32))
    for partition in (by_params, by_time):
        assert partition.stages == 4
        assert all(len(r) >= 1 for r in partition.stage_ranges())


def test_timing_blocks_leaves_batchnorm_statistics_alone():
    model = _model("resnet18")
    before = model.bn1.running_mean.clone()
    plan_cut(_workload("resnet18"), model, 2, "time", sample=torch.randn(2, 3, 32, 32))
    assert torch.equal(model.bn1.running_mean, before)


@contextlib.contextmanager
def _conv_inputs():
    """What every convolution run inside the block receives and gives: (batch, channels last,
    output dtype)."""
    seen = []

    def record(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            x = inputs[0]
            seen.append((len(x), x.is_contiguous(memory_format=torch.channels_last),
                         output.dtype))

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        yield seen
    finally:
        handle.remove()


def test_timing_blocks_runs_them_at_the_workloads_precision_and_memory_format():
    workload = Workload(model="resnet18", image_size=64, num_classes=10, precision="bf16",
                        channels_last=True)
    model = workload.build_model()
    sample, _ = workload.make_batch(3, "cpu")
    with _conv_inputs() as seen:
        plan_cut(workload, model, 3, "time", sample)
    assert len(seen) == 2 * 20  # resnet18's 20 convolutions, in each of 2 repeats
    assert {batch for batch, _, _ in seen} == {3}
    assert all(channels_last for _, channels_last, _ in seen)
    assert {dtype for _, _, dtype in seen} == {torch.bfloat16}
    assert model.conv1.weight.is_contiguous()  # the copy was timed, the model left as it was


def test_timing_blocks_of_an_fp32_workload_runs_them_in_fp32_as_they_are():
    with _conv_inputs() as seen:
        plan_cut(_workload("resnet18"), _model("resnet18"), 3, "time",
                 sample=torch.randn(2, 3, 32, 32))
    assert {dtype for _, _, dtype in seen} == {torch.float32}
    assert not seen[0][1]  # the stem's input as given


def test_the_step_clock_on_a_cpu_is_the_host_clock(monkeypatch):
    ticks = itertools.count()
    monkeypatch.setattr("time.perf_counter", lambda: float(next(ticks)))
    clock = StepClock(torch.device("cpu"))
    for key in ("a", "b", "c", "b"):
        clock.mark(key)
    clock.synchronize()
    assert (clock.seconds("a", "c"), clock.seconds("a", "b")) == (2.0, 3.0)  # the latest "b"


@pytest.mark.parametrize("micro_batch, global_batch, timed", [
    (None, 6, 6), (2, 8, 2), (30, 240, 30), (None, 512, MAX_TIMING_BATCH),
    (100, 400, MAX_TIMING_BATCH)])
def test_the_time_balance_times_the_batch_the_run_trains_on(micro_batch, global_batch, timed):
    assert timing_batch(micro_batch, global_batch) == timed


@pytest.mark.parametrize("name, options, batch", [
    ("model-parallel", {}, 6),  # the whole batch through every stage
    ("pipeline", {"stages": 3, "split_size": 2}, 2),  # its micro-batches
])
def test_a_strategy_cut_by_time_times_its_blocks_at_its_own_batch(tiny_workload, name, options,
                                                                  batch):
    devices = parse_devices("cpu,cpu,cpu").logical
    strategy = strategies.create(strategies.plan(name, tiny_workload, 6, devices, options))
    with _conv_inputs() as seen:
        strategy.setup()
    getattr(strategy, "close", lambda: None)()
    assert strategy.options.balance == "time"
    assert seen and {size for size, _, _ in seen} == {batch}


@pytest.mark.parametrize("stages, balance, message", [
    (11, "params", "cannot cut 10 blocks into 11 stages"),
    (1, "params", "at least 2 stages"),
    (3, "tutorial", "the tutorial's cut has 2 stages"),
    (2, "random", "unknown balance 'random'"),
])
def test_impossible_cuts_are_refused(stages, balance, message):
    with pytest.raises(StrategyError, match=message):
        plan_cut(_workload("resnet18"), _model("resnet18"), stages, balance)
