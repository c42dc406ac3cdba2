import pytest
import torch

import strategies
from strategies.base import Strategy
from strategies.single import SingleDevice


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


def test_every_strategy_reports_availability_on_cpu():
    reasons = strategies.available((torch.device("cpu"),))
    assert set(reasons) == set(strategies.names())
    assert reasons["single"] is None


def test_create_passes_the_workload_and_takes_the_devices_it_uses(tiny_workload):
    cpu = torch.device("cpu")
    strategy = strategies.create("single", tiny_workload, (cpu, cpu))
    assert strategy.workload is tiny_workload
    assert strategy.devices == (cpu,)


def test_too_few_devices_is_refused_with_the_numbers():
    class NeedsTwo(SingleDevice):
        name = "needs-two"
        min_devices = 2

    with pytest.raises(strategies.StrategyError, match=r"at least 2 devices, got 1 \(cpu\)"):
        NeedsTwo.select_devices((torch.device("cpu"),))


def test_process_per_stage_pipelines_are_unavailable_on_one_shared_gpu():
    gpu = torch.device("cuda:0")
    reasons = strategies.available((gpu, gpu))
    for name in ("pipeline-gpipe", "pipeline-1f1b"):
        assert "gloo cannot send CUDA tensors" in reasons[name]
    assert reasons["pipeline"] is None
