"""pipeline-fsdp: P 1F1B pipelines side by side, each stage sharded over its copies with FSDP2;
its refusals, and its record on 4 emulated CPU devices: the first pipeline's timeline, the step
split into compute and the communication across the pipelines it leaves exposed (its step
against the baseline's: test_conformance.py, on 4 devices)."""

import pytest
import torch

from parbench import strategies
from parbench.drive.runner import run_config
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config

CPU4 = parse_devices("cpu,cpu,cpu,cpu")


def _plan(devices: int, batch: int, workload, **options):
    return strategies.plan("pipeline-fsdp", workload, batch, (torch.device("cpu"),) * devices,
                           options)


def test_devices_make_pipelines_of_two_stages_or_more_and_the_batch_divides(tiny_workload):
    plan = _plan(6, 12, tiny_workload, split_size=2)
    assert (plan.options.pipelines, plan.options.stages) == (2, 3)
    assert _plan(6, 12, tiny_workload, pipelines=3, split_size=2).options.stages == 2
    with pytest.raises(strategies.StrategyError, match="6 devices do not make 4 pipelines of 2 "
                                                       "stages or more"):
        _plan(6, 12, tiny_workload, pipelines=4)
    with pytest.raises(strategies.StrategyError, match="batch 10 does not divide over 4 "
                                                       "pipelines; use a multiple of 4"):
        _plan(8, 10, tiny_workload, pipelines=4)
    with pytest.raises(strategies.StrategyError, match="needs at least 4 devices, got 2"):
        _plan(2, 8, tiny_workload)


@pytest.mark.timeout(240)
def test_its_record_has_the_first_pipelines_timeline_and_its_communication(tiny_workload,
                                                                          child_pids):
    record = run_config(Config("pipeline-fsdp", tiny_workload, 8, CPU4, warmup=1, steps=1,
                               options={"split_size": 2}))
    assert record.status == "ok", record.reason
    assert (record.stages, record.world_size, record.micro_batches) == (2, 4, 2)
    assert record.strategy_options["pipelines"] == 2
    # Each of the first pipeline's 2 stages runs 2 micro-batches forward and backward; the
    # second pipeline runs the same schedule, left out.
    assert sorted({span[0] for span in record.timeline}) == [0, 1]
    assert len(record.timeline) == 2 * 2 * 2
    assert record.exposed_comm_time_s == pytest.approx(
        record.step_time_median_s - record.compute_time_s)
    # The largest stage's gradient and parameters, in fp32: the tutorial's cut puts layer3
    # and layer4 last.
    model = tiny_workload.build_model()
    second = sum(p.numel() for name, p in model.named_parameters()
                 if name.startswith(("layer3", "layer4", "fc")))
    assert record.allreduce_bytes == record.allgather_bytes == 4 * second
    assert child_pids() == []
