"""Shared fixtures: a tiny workload that trains in well under a second on one CPU thread, this
process's children (to check none is left behind), and a small image folder."""

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from parbench.families.workloads import Workload


@pytest.fixture
def tiny_workload() -> Workload:
    return Workload(model="resnet18", image_size=32, num_classes=10, learning_rate=0.05)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _children(parent: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of each child of `parent`."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent:
            children.append((int(stat.parent.name), command))
    return children


def _child_pids() -> list[int]:
    """The processes this one started, less multiprocessing's resource tracker and fork server
    (each started with the first worker, they live exactly as long as this process), but with
    the fork server's children: the workers it forked for this process."""
    pids = []
    for pid, command in _children(os.getpid()):
        if b"forkserver" in command:
            pids += [child for child, _ in _children(pid)]
        elif b"resource_tracker" not in command:
            pids.append(pid)
    return pids


@pytest.fixture
def child_pids():
    return _child_pids


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
    def load(path: str):
        spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
