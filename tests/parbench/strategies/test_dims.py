"""Every registered name plans its parallel degrees once, and they take exactly the devices
it uses."""

import pytest
import torch

from parbench import strategies
from parbench.families.workloads import Workload
from parbench.strategies.dims import ParallelDims

CPU4 = (torch.device("cpu"),) * 4
RESNET = Workload(model="resnet18", image_size=64, num_classes=10)
VIT = Workload(model="vit_b_16", image_size=16, num_classes=10)
# name -> (replicas, shards, tensor_parallel, stages, stages_per_rank, schedule, micro_batch)
# on 4 CPU devices at batch 16 with --split-size 2 (--accumulation-split 2 for single).
EXPECTED = {
    "single": (1, 1, 1, 1, 1, None, 2),
    "model-parallel": (1, 1, 1, 4, 1, None, None),
    "pipeline": (1, 1, 1, 4, 1, "fill-drain", 2),
    "pipeline-gpipe": (1, 1, 1, 4, 1, "gpipe", 2),
    "pipeline-1f1b": (1, 1, 1, 4, 1, "1f1b", 2),
    "pipeline-interleaved-1f1b": (1, 1, 1, 4, 2, "interleaved-1f1b", 2),
    "pipeline-looped-bfs": (1, 1, 1, 4, 2, "looped-bfs", 2),
    "pipeline-zero-bubble": (1, 1, 1, 4, 2, "zero-bubble", 2),
    "pipeline-zbv": (1, 1, 1, 4, 2, "zbv", 2),
    "pipeline-dualpipev": (1, 1, 1, 4, 2, "dualpipev", 2),
    "pipeline-fsdp": (1, 2, 1, 2, 1, "1f1b", 2),
    "ddp": (4, 1, 1, 1, 1, None, None),
    "fsdp": (1, 4, 1, 1, 1, None, None),
    "hsdp": (2, 2, 1, 1, 1, None, None),
    "tp": (1, 1, 4, 1, 1, None, None),
    "fsdp-tp": (1, 2, 2, 1, 1, None, None),
}


@pytest.mark.parametrize("name", [n for n in strategies.names() if n != "data-parallel"])
def test_each_name_plans_its_degrees_once(name):
    workload = VIT if strategies.layout_of(name).splits_layers else RESNET
    plan = strategies.plan(name, workload, 16, CPU4,
                           {"split_size": 2, "accumulation_split": 2})
    assert plan.dims == ParallelDims(*EXPECTED[name])
    assert plan.dims.devices == len(plan.devices)


def test_nn_data_parallel_replicates_over_its_gpus():
    options = strategies.options_of("data-parallel", {})
    gpus = tuple(torch.device(f"cuda:{k}") for k in range(3))
    assert options.parallel_dims(gpus) == ParallelDims(replicas=3)


def test_degrees_that_do_not_take_the_devices_are_a_defect():
    with pytest.raises(ValueError, match="takes 4 devices, not the 2 planned"):
        ParallelDims(replicas=2, shards=2).checked(2)
    with pytest.raises(ValueError, match="at least 1"):
        ParallelDims(stages=0)
