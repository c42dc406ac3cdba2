from dataclasses import replace
from unittest import mock

import pytest
import torch
from torch import nn

from parbench.families.workloads import MODELS, Workload, is_compiled


@pytest.mark.parametrize("model", MODELS)
def test_every_model_builds_with_the_requested_classes(model):
    with torch.device("meta"):  # shapes only: vit_l_16 has 300 M parameters
        network = Workload(model=model, image_size=64, num_classes=7).build_model()
        assert network(torch.empty(2, 3, 64, 64)).shape == (2, 7)


def test_resnet50_forward_gives_logits_for_the_batch():
    workload = Workload(model="resnet50", image_size=64, num_classes=5)
    images, labels = workload.make_batch(2, "cpu")
    assert workload.build_model()(images).shape == (2, 5)
    assert labels.shape == (2,) and labels.max() < 5


def test_same_seed_same_weights_and_batches():
    a, b = Workload(seed=3, image_size=32), Workload(seed=3, image_size=32)
    assert torch.equal(a.build_model().conv1.weight, b.build_model().conv1.weight)
    assert torch.equal(a.make_batch(4, "cpu")[0], b.make_batch(4, "cpu")[0])
    assert not torch.equal(a.make_batch(4, "cpu")[0], Workload(seed=4, image_size=32)
                           .make_batch(4, "cpu")[0])


def test_channels_last_applies_to_batch_and_model():
    workload = Workload(model="resnet18", image_size=32, channels_last=True)
    images, _ = workload.make_batch(2, "cpu")
    assert images.is_contiguous(memory_format=torch.channels_last)
    model = workload.prepare_model(workload.build_model())
    assert model.conv1.weight.is_contiguous(memory_format=torch.channels_last)


def test_precision_sets_autocast_and_grad_scaling():
    assert not Workload(precision="fp32").make_grad_scaler("cpu").is_enabled()
    assert Workload(precision="fp16").make_grad_scaler("cpu").is_enabled()
    with Workload(precision="bf16").autocast("cpu"):
        product = torch.ones(2, 2) @ torch.ones(2, 2)
    assert product.dtype == torch.bfloat16


@pytest.mark.parametrize("bad, message", [
    (dict(model="vgg16"), "unknown model 'vgg16'"),
    (dict(precision="fp8"), "unknown precision 'fp8'"),
    (dict(image_size=16), "at least 32"),
    (dict(num_classes=0), "at least 1"),
])
def test_bad_workloads_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        Workload(**bad)


@pytest.fixture
def compile_calls(monkeypatch):
    """Each module nn.Module.compile is called on, in order, compiling nothing: torch.compile
    made the identity, so a block compiled in place runs its own call, eager."""
    calls = []
    original = nn.Module.compile

    def compile(module, *args, **kwargs):
        calls.append(module)
        original(module, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    monkeypatch.setattr(nn.Module, "compile", compile)
    return calls


@pytest.mark.parametrize("model", ["resnet18", "vit_b_16"])
def test_compile_compiles_each_block_of_the_family_in_place_once(model, compile_calls):
    workload = Workload(model=model, image_size=32, num_classes=10, compile=True)
    with torch.device("meta"):  # shapes only
        network = workload.build_model()
    parameters = list(network.parameters())
    assert workload.compiled(network) is network
    assert workload.compiled(network) is network  # compiling again compiles nothing more
    blocks = [block for _, block in workload.family.blocks(network)]
    inside = [block for block in blocks if any(block is m for m in network.modules())]
    assert len(inside) == len(blocks) - 2  # the stem's and head's containers are made for it
    assert all(is_compiled(block) for block in inside)
    # Each block once, in order: the containers of the first call's stem and head, and the
    # model's own blocks (not again on the second call).
    assert len(compile_calls) == len(blocks)
    assert [id(m) for m in compile_calls[1:-1]] == [id(block) for block in inside]
    assert not is_compiled(network)  # the model's own modules stay as they were
    assert all(a is b for a, b in zip(network.parameters(), parameters, strict=True))


def test_a_stage_compiles_its_blocks_and_stays_the_module_it_was(compile_calls):
    workload = Workload(model="resnet18", image_size=32, num_classes=10, compile=True)
    with torch.device("meta"):
        blocks = [block for _, block in workload.family.blocks(workload.build_model())]
    stage = nn.Sequential(*blocks[:3])
    assert workload.compiled(stage) is stage
    assert compile_calls == blocks[:3] and not is_compiled(stage)


@pytest.mark.parametrize("model", ["resnet18", "vit_b_16"])
def test_a_compiled_model_computes_its_own_forward_through_its_blocks(model, compile_calls):
    """Its blocks in order, each the Sequential of the model that holds a run of them (a
    ResNet's layer1) called itself: a wrapper of that container (FSDP's layer-group unit)
    still sees its call."""
    eager = Workload(model=model, image_size=32, num_classes=10)
    images, _ = eager.make_batch(2, "cpu")
    expected = eager.build_model()(images)
    network = replace(eager, compile=True).compiled(eager.build_model())
    called = []
    container = network.layer1 if model == "resnet18" else network.encoder.layers
    container.register_forward_pre_hook(lambda module, inputs: called.append(module))
    assert torch.equal(network(images), expected)
    assert called == [container]


def test_an_eager_workload_compiles_nothing(compile_calls):
    workload = Workload(model="resnet18", image_size=32, num_classes=10)
    network = workload.build_model()
    assert workload.compiled(network) is network and compile_calls == []
    assert "forward" not in vars(network)


@pytest.mark.parametrize("bad, message", [
    (dict(compile=True, compile_scope="stage"), "unknown compile scope 'stage'; choose from "
                                                "block, model"),
    (dict(compile=True, compile_mode="fast"), "unknown compile mode 'fast'; choose from "
                                              "default, reduce-overhead"),
])
def test_a_bad_compile_scope_or_mode_is_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        Workload(**bad)


def test_an_eager_workload_is_one_whatever_scope_and_mode_were_given():
    eager = Workload(compile_scope="model", compile_mode="reduce-overhead")
    assert eager == Workload() and not eager.captures_cuda_graphs
    assert eager.describe() == Workload().describe()
    compiled = replace(eager, compile=True, compile_scope="model", compile_mode="max-autotune")
    assert replace(compiled, compile=False) == Workload()


def test_describe_names_a_scope_and_mode_only_away_from_their_defaults():
    """So that a run folder's configurations from before them keep their keys (--resume)."""
    per_block = Workload(compile=True).describe()
    assert per_block["compile"] is True
    assert "compile_scope" not in per_block and "compile_mode" not in per_block
    whole = Workload(compile=True, compile_scope="model", compile_mode="reduce-overhead")
    assert (whole.describe()["compile_scope"], whole.describe()["compile_mode"]) == (
        "model", "reduce-overhead")
    assert whole.captures_cuda_graphs


@pytest.fixture
def torch_compile(monkeypatch):
    """torch.compile itself, its calls recorded: nn.Module.compile calls it with the module's
    bound `_call_impl` (compiling only on the first call, which these tests never make)."""
    spy = mock.Mock(wraps=torch.compile)
    monkeypatch.setattr(torch, "compile", spy)
    return spy


def _compiled_by(spy) -> list[tuple[nn.Module, dict]]:
    return [(call.args[0].__self__, call.kwargs) for call in spy.call_args_list]


def test_scope_model_compiles_the_model_whole_in_the_mode_given(torch_compile):
    workload = Workload(model="resnet18", image_size=32, num_classes=10, compile=True,
                        compile_scope="model", compile_mode="max-autotune-no-cudagraphs")
    network = workload.build_model()
    assert workload.compiled(network) is network
    assert workload.compiled(network) is network  # compiling again compiles nothing more
    assert _compiled_by(torch_compile) == [
        (network, {"dynamic": False, "mode": "max-autotune-no-cudagraphs"})]
    assert is_compiled(network) and "forward" not in vars(network)  # its own forward
    assert not any(is_compiled(block) for _, block in workload.family.blocks(network))


def test_scope_model_compiles_a_stage_whole_and_block_each_block_in_the_mode_given(
        torch_compile):
    whole = Workload(model="resnet18", image_size=32, num_classes=10, compile=True,
                     compile_scope="model", compile_mode="reduce-overhead")
    blocks = [block for _, block in whole.family.blocks(whole.build_model())]
    stage = nn.Sequential(*blocks[:3])
    whole.compiled(stage)
    assert _compiled_by(torch_compile) == [(stage, {"dynamic": False, "mode": "reduce-overhead"})]
    torch_compile.reset_mock()
    per_block = replace(whole, compile_scope="block")
    other = nn.Sequential(*blocks[3:6])
    per_block.compiled(other)
    assert _compiled_by(torch_compile) == [
        (block, {"dynamic": False, "mode": "reduce-overhead"}) for block in blocks[3:6]]
    assert not is_compiled(other)


def test_on_a_cpu_torch_skips_the_cuda_graphs_a_mode_asks_for():
    """What a record's `cuda_graphs` says of a CPU: inductor compiles the head under
    reduce-overhead and runs it without a CUDA graph (its forward only: quick)."""
    import torch._dynamo
    import torch._inductor.config
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    workload = Workload(model="resnet18", image_size=32, num_classes=10, compile=True,
                        compile_scope="model", compile_mode="reduce-overhead")
    head = dict(workload.family.blocks(workload.build_model()))["head"]
    skips = counters["inductor"]["cudagraph_skips"]
    features = torch.randn(2, 512, 1, 1)
    try:  # inductor's own patch: no pool of compile workers left behind
        with torch._inductor.config.patch(compile_threads=1):
            assert torch.allclose(workload.compiled(head)(features), head._call_impl(features),
                                  atol=1e-5)
    finally:
        torch._dynamo.reset()
    assert counters["inductor"]["cudagraph_skips"] > skips
