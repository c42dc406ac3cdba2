"""Shared fixtures: a tiny workload that trains in well under a second on one CPU thread."""

import pytest
import torch

from parbench.workloads import Workload


@pytest.fixture
def tiny_workload() -> Workload:
    return Workload(model="resnet18", image_size=32, num_classes=10, learning_rate=0.05)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
