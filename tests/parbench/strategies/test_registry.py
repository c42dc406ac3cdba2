import pytest
import torch

from parbench import strategies
from parbench.strategies.base import Strategy
from parbench.strategies.single import SingleDevice


def test_single_is_registered_as_a_strategy():
    assert "single" in strategies.names()
    assert strategies.lookup("single").cls is SingleDevice
    assert issubclass(SingleDevice, Strategy)


def test_unknown_name_is_refused_with_the_available_names():
    with pytest.raises(strategies.StrategyError) as error:
        strategies.lookup("magic")
    assert "unknown strategy 'magic'" in str(error.value)
    for name in strategies.names():
        assert name in str(error.value)


def test_create_builds_what_the_plan_says(tiny_workload):
    cpu = torch.device("cpu")
    plan = strategies.plan("single", tiny_workload, 8, (cpu, cpu))
    strategy = strategies.create(plan)
    assert strategy.workload is tiny_workload
    assert strategy.devices == plan.devices == (cpu,)


def test_a_plan_resolves_the_defaults_that_depend_on_batch_and_devices(tiny_workload):
    cpu = torch.device("cpu")
    plan = strategies.plan("pipeline", tiny_workload, 24, (cpu, cpu, cpu), {"stages": 2})
    assert plan.devices == (cpu, cpu)
    # 4 micro-batches per stage: split 24 / 8 = 3; the tutorial's cut for 2 stages.
    assert plan.options.given() == {"stages": 2, "balance": "tutorial", "split_size": 3}
    assert plan.reference_micro_batch == 3


def test_options_a_strategy_does_not_take_are_ignored(tiny_workload):
    cpu = torch.device("cpu")
    plan = strategies.plan("single", tiny_workload, 8, (cpu,), {"split_size": 2})
    assert plan.options.given() == {}


def test_every_option_is_defined_once_for_every_strategy_that_takes_it():
    specs = strategies.option_specs()
    assert set(specs) == {spec.name for name in strategies.names()
                          for spec in strategies.lookup(name).Options.specs()
                          if not spec.preset}  # a preset (the schedule) comes with the name
    assert strategies.takers("world_size") == ["data-parallel", "ddp", "fsdp", "hsdp", "tp",
                                               "fsdp-tp"]


def test_too_few_devices_is_refused_with_the_numbers():
    class NeedsTwo(SingleDevice):
        min_devices = 2

    with pytest.raises(strategies.StrategyError, match=r"at least 2 devices, got 1 \(cpu\)"):
        NeedsTwo.select_devices((torch.device("cpu"),), NeedsTwo.Options())


def test_a_workload_a_strategy_cannot_train_is_refused_by_its_plan(tiny_workload):
    from dataclasses import replace

    fp16 = replace(tiny_workload, precision="fp16")
    cpu = torch.device("cpu")
    with pytest.raises(strategies.WorkloadRefused, match="fp16 loss scaling"):
        strategies.plan("pipeline-1f1b", fp16, 8, (cpu, cpu))
    with pytest.raises(strategies.Unavailable, match="CUDA devices only"):
        strategies.plan("data-parallel", tiny_workload, 8, (cpu, cpu))


def test_process_per_stage_pipelines_are_unavailable_on_gpus_over_gloo(tiny_workload):
    gpu0, gpu1 = torch.device("cuda:0"), torch.device("cuda:1")
    for name in ("pipeline-gpipe", "pipeline-1f1b"):
        with pytest.raises(strategies.Unavailable, match="cannot send CUDA tensors"):
            strategies.plan(name, tiny_workload, 8, (gpu0, gpu0))  # shared: gloo
        with pytest.raises(strategies.Unavailable, match="cannot send CUDA tensors"):
            strategies.plan(name, tiny_workload, 8, (gpu0, gpu1), backend="gloo")
        # 16: at 8 the default split, 1 image, is refused at 32 px
        assert strategies.plan(name, tiny_workload, 16, (gpu0, gpu1)).backend == "nccl"
    assert strategies.plan("pipeline", tiny_workload, 16, (gpu0, gpu0)).backend is None


@pytest.mark.parametrize("name, options, batch, message", [
    ("pipeline-zbv", {"stages_per_rank": 3, "split_size": 2}, 8,
     "holds exactly 2 stages per rank (a V), got --stages-per-rank 3"),
    ("pipeline-interleaved-1f1b", {"split_size": 8}, 120,
     "needs the micro-batch count M to be a multiple of max(1, M // K) = 7, got M = 15"),
    ("pipeline-dualpipev", {"split_size": 4}, 8,
     "needs at least as many micro-batches as stages (4), got 2"),
    # torch's 1F1B raised this on rank 0 once launched: a held-out draw measured it as an error
    ("pipeline-1f1b", {"split_size": 8}, 8,
     "needs at least as many micro-batches as stages (2), got 1"),
    ("pipeline-looped-bfs", {"balance": "tutorial"}, 8,
     "--balance tutorial cuts into 2 stages only, not 4"),
])
def test_a_schedule_refuses_what_it_cannot_run_before_it_starts(name, options, batch, message,
                                                                 tiny_workload):
    cpu = torch.device("cpu")
    with pytest.raises(strategies.StrategyError, match=message.replace("(", r"\(").replace(
            ")", r"\)")):
        strategies.plan(name, tiny_workload, batch, (cpu, cpu), options)


def test_replicated_pipelines_refuse_fewer_micro_batches_than_stages_in_each(tiny_workload):
    # two pipelines of 2 stages on 4 devices: each pipeline's 8 images in one micro-batch,
    # which torch's 1F1B refuses on every rank once launched
    cpu = torch.device("cpu")
    with pytest.raises(strategies.StrategyError, match=r"Schedule1F1B needs at least as many "
                       r"micro-batches as stages \(2\), got 1"):
        strategies.plan("pipeline-fsdp", tiny_workload, 16, (cpu,) * 4,
                        {"split_size": 8, "pipelines": 2})


def test_a_schedule_that_splits_backward_refuses_compile(tiny_workload):
    from dataclasses import replace

    cpu = torch.device("cpu")
    with pytest.raises(strategies.WorkloadRefused, match="torch.compile does not support"):
        strategies.plan("pipeline-zbv", replace(tiny_workload, compile=True), 8, (cpu, cpu))
    plan = strategies.plan("pipeline-interleaved-1f1b", tiny_workload, 32, (cpu, cpu))
    assert plan.options.given() == {"stages": 2, "balance": "time", "split_size": 4,
                                    "stages_per_rank": 2}  # K x V = 4 stages, cut by time


@pytest.mark.parametrize("name, batch, options, fine", [
    ("single", 4, {"accumulation_split": 1}, {"accumulation_split": 2}),  # micro-batches of 1
    ("pipeline", 7, {"split_size": 2}, {"split_size": 3}),  # 2, 2, 2 and a last one of 1
    ("ddp", 2, {}, None),  # 1 image per replica
])
def test_a_forward_pass_on_fewer_images_than_the_family_trains_on_is_refused(
        tiny_workload, name, batch, options, fine):
    """resnet18 at 32 px ends on one value per channel, which BatchNorm cannot train on: the
    plan refuses it in one line (recorded as skipped in a comparison), where every process
    used to fail with torch's error."""
    cpu = torch.device("cpu")
    with pytest.raises(strategies.WorkloadRefused,
                       match=r"a forward pass on 1 image\(s\) at 32 px: resnet18 trains on at "
                             "least 2 there"):
        strategies.plan(name, tiny_workload, batch, (cpu, cpu), options)
    if fine is None:  # the batch is what is too small
        assert strategies.plan(name, tiny_workload, 2 * batch, (cpu, cpu), options)
    else:
        assert strategies.plan(name, tiny_workload, batch, (cpu, cpu), fine)


def test_every_strategy_class_sits_one_level_under_the_base():
    """A name's layout is a preset of one class (hsdp is fsdp on a 2-D mesh, pipeline-fsdp a
    schedule over pipelines side by side): no strategy class derives from another."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(strategies.__path__):
        importlib.import_module(f"parbench.strategies.{module.name}")

    def below(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    ours = [c for c in below(Strategy) if c.__module__.startswith("parbench.")]
    unseen = {entry.cls for entry in strategies.REGISTRY.values()} - set(ours)
    assert not unseen, f"registered classes outside parbench.strategies: {unseen}"
    deeper = [c.__qualname__ for c in ours if c.__bases__ != (Strategy,)]
    assert not deeper, f"derive from Strategy alone, not from another strategy: {deeper}"
