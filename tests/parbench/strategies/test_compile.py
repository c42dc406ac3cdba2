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


@pytest.fixture
def compiled_whole(monkeypatch):
    """(module, whether FSDP2 had sharded it already, torch.compile's keywords) for each
    module compiled, through torch.compile itself (nothing runs here, so nothing compiles:
    it compiles on a module's first call)."""
    calls = []
    real = torch.compile

    def spy(fn, **kwargs):
        module = fn.__self__  # nn.Module.compile passes the module's bound _call_impl
        calls.append((module, isinstance(module, FSDPModule), kwargs))
        return real(fn, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)
    return calls


@pytest.mark.parametrize("name, devices, options", [
    ("single", (CPU,), {}),
    ("model-parallel", (CPU, CPU), {}),
    ("pipeline", (CPU, CPU), {"split_size": 2}),
    ("ddp", (CPU,), {}),
    ("fsdp", (CPU,), {}),
])
def test_scope_model_compiles_the_module_on_each_device_whole_before_it_is_wrapped(
        name, devices, options, compiled_whole, tiny_workload):
    """The whole model for single and the data-parallel strategies (before DDP or fully_shard
    takes it), each stage for the cut ones; none of their blocks on its own."""
    workload = replace(tiny_workload, compile=True, compile_scope="model",
                       compile_mode="max-autotune-no-cudagraphs")
    plan = strategies.plan(name, workload, 4, devices, options)
    with one_rank() if plan.backend else contextlib.nullcontext():
        strategy = strategies.create(plan)
        strategy.setup()
        stages = getattr(strategy, "stages", None)
        expected = ([stage.module for stage in stages] if stages
                    else [strategy.model])
        assert [module for module, _, _ in compiled_whole] == expected
        assert all(kwargs == {"dynamic": False, "mode": "max-autotune-no-cudagraphs"}
                   for _, _, kwargs in compiled_whole)
        assert not any(sharded for _, sharded, _ in compiled_whole)  # before fully_shard
        assert all(is_compiled(module) for module in expected)
        assert not any(is_compiled(inner) for module in expected
                       for inner in module.modules() if inner is not module)
        strategy.close()


# Each strategy that refuses the modes of CUDA graphs, on devices it plans for here, and the
# reason it gives; the zero-bubble schedules and data-parallel refuse --compile whatever mode.
SPLIT = {"split_size": 2}
CUDA_GRAPH_REFUSALS = [
    ("pipeline", SPLIT, "pipeline runs each stage on a thread of its own, while torch keeps its "
                     "CUDA graph trees per thread"),
    ("pipeline-gpipe", SPLIT, "each stage accumulates its gradients over the micro-batches: "
                           "torch's CUDA graph trees leave a backward's gradients in the "
                           "graph's own memory, which the next micro-batch's replay overwrites"),
    ("pipeline-1f1b", SPLIT, "each stage accumulates its gradients over the micro-batches"),
    ("pipeline-interleaved-1f1b", SPLIT, "each stage accumulates its gradients"),
    ("pipeline-looped-bfs", SPLIT, "each stage accumulates its gradients"),
    ("pipeline-fsdp", SPLIT, "FSDP2 gathers each stage's parameters into new memory every step"),
    ("ddp", {}, "DDP hands each backward's gradients to its reducer from autograd's thread"),
    ("fsdp", {}, "FSDP2 gathers each unit's parameters into new memory every step and frees "
                 "them after, while a CUDA graph replays at the addresses it captured"),
    ("hsdp", {}, "FSDP2 gathers each unit's parameters into new memory every step"),
]


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
@pytest.mark.parametrize("name, options, reason", CUDA_GRAPH_REFUSALS)
def test_a_strategy_whose_step_a_cuda_graph_cannot_replay_refuses_its_modes(
        name, options, reason, mode, tiny_workload):
    devices = (CPU,) * 4
    for scope in ("block", "model"):
        workload = replace(tiny_workload, compile=True, compile_scope=scope, compile_mode=mode)
        with pytest.raises(strategies.WorkloadRefused) as refused:
            strategies.plan(name, workload, 16, devices, options)
        assert reason in str(refused.value)
        assert str(refused.value).endswith(
            "give --compile-mode default or max-autotune-no-cudagraphs"
            + (", or use model-parallel" if name == "pipeline" else ""))
    # The modes without CUDA graphs it takes.
    for other in ("default", "max-autotune-no-cudagraphs"):
        strategies.plan(name, replace(workload, compile_mode=other), 16, devices, options)


@pytest.mark.parametrize("name", ["pipeline-1f1b", "pipeline-fsdp"])
def test_fp16_is_refused_before_cuda_graphs_whatever_layout_the_options_ask(name, tiny_workload):
    """The refusals come in one order (fp16, --compile, CUDA graphs) for every preset of a
    class: pipeline-fsdp's options change the CUDA-graph refusal, not when it is given."""
    workload = replace(tiny_workload, precision="fp16", compile=True,
                       compile_mode="reduce-overhead")
    with pytest.raises(strategies.WorkloadRefused, match="fp16 loss scaling is not coordinated"):
        strategies.plan(name, workload, 16, (CPU,) * 4, SPLIT)


@pytest.mark.parametrize("name, devices", [("single", (CPU,)), ("model-parallel", (CPU, CPU))])
def test_single_and_model_parallel_take_the_modes_of_cuda_graphs(name, devices, tiny_workload):
    for scope in ("block", "model"):
        workload = replace(tiny_workload, compile=True, compile_scope=scope,
                           compile_mode="reduce-overhead")
        assert strategies.plan(name, workload, 4, devices).workload.captures_cuda_graphs


def test_single_refuses_to_accumulate_gradients_under_cuda_graphs(tiny_workload):
    workload = replace(tiny_workload, compile=True, compile_mode="reduce-overhead")
    with pytest.raises(strategies.StrategyError, match=r"--accumulation-split 2 accumulates "
                       r"gradients over micro-batches, and under --compile-mode "
                       r"reduce-overhead .*pytorch#169545\); give --compile-mode default or "
                       r"max-autotune-no-cudagraphs, or drop --accumulation-split"):
        strategies.plan("single", workload, 4, (CPU,), {"accumulation_split": 2})
    # One micro-batch of the whole batch accumulates nothing.
    strategies.plan("single", workload, 4, (CPU,), {"accumulation_split": 4})
