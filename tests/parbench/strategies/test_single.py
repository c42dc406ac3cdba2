import torch

from parbench import strategies


def _single(workload):
    return strategies.create(strategies.plan("single", workload, 8, (torch.device("cpu"),)))


def _trained(workload, steps: int):
    strategy = _single(workload)
    strategy.setup()
    images, labels = workload.make_batch(8, strategy.input_device)
    losses = [strategy.train_step(images, labels).item() for _ in range(steps)]
    return strategy, losses


def test_one_step_changes_every_trainable_parameter(tiny_workload):
    strategy = _single(tiny_workload)
    strategy.setup()
    before = {n: p.detach().clone() for n, p in strategy.model.named_parameters()}
    images, labels = tiny_workload.make_batch(8, "cpu")
    strategy.train_step(images, labels)
    unchanged = [n for n, p in strategy.model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def test_loss_falls_on_a_fixed_batch(tiny_workload):
    _, losses = _trained(tiny_workload, steps=8)
    assert losses[-1] < 0.5 * losses[0]


def test_same_seed_gives_the_same_parameters(tiny_workload):
    first, _ = _trained(tiny_workload, steps=2)
    second, _ = _trained(tiny_workload, steps=2)
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bf16_autocast_trains(tiny_workload):
    from dataclasses import replace

    _, losses = _trained(replace(tiny_workload, precision="bf16"), steps=6)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
