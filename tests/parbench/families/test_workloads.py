import pytest
import torch

from parbench.families.workloads import MODELS, Workload


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
