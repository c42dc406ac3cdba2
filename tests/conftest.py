"""Shared fixtures: a tiny workload that trains in well under a second on one CPU thread, this
process's children (to check none is left behind), and a small image folder."""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from parbench.families.workloads import Workload
from tests import support


@pytest.fixture
def tiny_workload() -> Workload:
    return Workload(model="resnet18", image_size=32, num_classes=10, learning_rate=0.05)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def child_pids():
    return support.child_pids


def _make_image_folder(root: Path, classes: int = 2, per_class: int = 6,
                       size: int = 40) -> Path:
    """`classes` subfolders of PNGs; image i is a flat grey of value 10*i (so each is known)."""
    root.mkdir(parents=True, exist_ok=True)
    for c in range(classes):
        (root / f"class{c}").mkdir()
        for i in range(per_class):
            value = 10 * (c * per_class + i)
            pixels = np.full((size, size, 3), value, dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.png")
    return root


@pytest.fixture
def image_folder(tmp_path):
    """make(classes, per_class) -> a folder of images in ImageFolder layout."""
    return lambda classes=2, per_class=6: _make_image_folder(tmp_path / "data", classes,
                                                             per_class)


def pytest_configure(config):
    """Under pytest-xdist, each worker computes on its share of the cores: OpenMP threads that
    outnumber their cores spin waiting for each other (a 3-step resnet18 test took 25 s beside
    the other worker's processes, 0.4 s alone)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need CUDA: skipped, saying so, where there is none."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False); "
                                   "run `pytest -m gpu` on a GPU host")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def load_harness():
    """A harness module by its path from the repository's root (benchmarks/ is not an
    installed package)."""
    return support.script
