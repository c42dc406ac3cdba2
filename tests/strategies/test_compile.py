"""--compile for every strategy: each block of the model family compiled in place, once, and
before a wrapper (DDP, FSDP2) takes it, as torchtitan compiles. torch.compile is made the
identity here: these check where compilation is applied, not what inductor makes of it (the
CLI's compiled run and `parbench verify --compile` do that)."""

import contextlib
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from parbench import strategies
from parbench.families.workloads import is_compiled
from tests.support import one_rank

CPU = torch.device("cpu")


@pytest.fixture
def compiled(monkeypatch):
    """(module, whether FSDP2 had sharded it already) for each nn.Module.compile call."""
    calls = []
    original = nn.Module.compile

    def compile(module, *args, **kwargs):
        calls.append((module, isinstance(module, FSDPModule)))
        original(module, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    monkeypatch.setattr(nn.Module, "compile", compile)
    return calls


@pytest.mark.parametrize("name, devices, options", [
    ("single", (CPU,), {"accumulation_split": 2}),
    ("model-parallel", (CPU, CPU), {}),
    ("pipeline", (CPU, CPU), {"split_size": 2}),
    ("ddp", (CPU,), {}),
    ("fsdp", (CPU,), {}),
])
def test_every_strategy_runs_each_block_compiled_once_before_it_is_wrapped(
        name, devices, options, compiled, tiny_workload):
    workload = replace(tiny_workload, compile=True)
    plan = strategies.plan(name, workload, 4, devices, options)
    with one_rank() if plan.backend else contextlib.nullcontext():
        strategy = strategies.create(plan)
        strategy.setup()
        blocks = [module for module, _ in compiled]
        assert len(blocks) == len(workload.family.blocks(workload.build_model()))
        assert len({id(block) for block in blocks}) == len(blocks)  # each once
        assert not any(sharded for _, sharded in compiled)  # before fully_shard
        # Every parameter the strategy trains is in a compiled block.
        assert ({id(p) for block in blocks for p in block.parameters()}
                == {id(p) for p in strategy.model.parameters()})
        images, labels = workload.make_batch(4, CPU)
        assert torch.isfinite(strategy.train_step(images, labels))
        strategy.close()


def test_fsdp_shards_each_encoder_layer_compiled_first(compiled):
    """A ViT's FSDP units are its encoder layers, the blocks compiled in place: fully_shard
    takes each compiled block, as torchtitan shards its compiled transformer blocks."""
    from parbench.families.workloads import Workload

    workload = Workload(model="vit_b_16", image_size=32, num_classes=10, compile=True)
    with one_rank():
        fsdp = strategies.create(strategies.plan("fsdp", workload, 2, (CPU,), {}))
        fsdp.setup()
        layers = list(fsdp.model.encoder.layers)
        assert all(is_compiled(layer) and isinstance(layer, FSDPModule) for layer in layers)
        assert not any(sharded for _, sharded in compiled)
        images, labels = workload.make_batch(2, CPU)
        assert torch.isfinite(fsdp.train_step(images, labels))
        fsdp.close()


def test_data_parallel_refuses_compile_saying_why_and_what_to_use(tiny_workload):
    gpus = (torch.device("cuda:0"), torch.device("cuda:1"))
    with pytest.raises(strategies.WorkloadRefused, match="copies each compiled block into its "
                       "replicas still bound to the original on the first GPU; drop "
                       "--compile, or use ddp"):
        strategies.plan("data-parallel", replace(tiny_workload, compile=True), 4, gpus)
