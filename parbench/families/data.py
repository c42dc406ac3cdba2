"""The batches each process trains on: synthetic tensors, or an image folder read through
DistributedSampler and DataLoader workers."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from parbench.families.workloads import Workload

__all__ = ["BatchSource", "DataError", "open_image_folder", "shard"]

# ImageNet's channel statistics: what a torchvision ResNet is normally trained with.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DataError(ValueError):
    """An image folder that cannot feed this configuration."""


def shard(tensors: tuple[torch.Tensor, ...], index: int,
          count: int) -> tuple[torch.Tensor, ...]:
    """Part `index` of each tensor cut into `count` near-equal parts along the batch."""
    if count == 1:
        return tensors
    return tuple(t.tensor_split(count)[index] for t in tensors)


def open_image_folder(workload: Workload, global_batch: int,
                      replicas: int = 1) -> datasets.ImageFolder:
    """The workload's image folder as a dataset, checked against the batch and model."""
    assert workload.data_dir is not None
    root = Path(workload.data_dir)
    if not root.is_dir():
        raise DataError(f"--data {root}: no such folder; give a folder with one subfolder of "
                        "images per class (torchvision ImageFolder layout)")
    size = workload.image_size
    transform = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size),
                                    transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    try:
        dataset = datasets.ImageFolder(root, transform=transform)
    except (FileNotFoundError, RuntimeError) as error:
        raise DataError(f"--data {root}: {error}; use one subfolder of images per class") \
            from None
    if len(dataset.classes) > workload.num_classes:
        raise DataError(f"--data {root} has {len(dataset.classes)} classes but the model "
                        f"predicts {workload.num_classes}; pass --num-classes "
                        f"{len(dataset.classes)}")
    if len(dataset) // replicas < global_batch // replicas:
        raise DataError(f"--data {root} has {len(dataset)} images, fewer than one global "
                        f"batch of {global_batch}; add images or lower --batch-size")
    return dataset


class BatchSource:
    """An endless stream of (images, labels) on `device`: this process's part `index` of
    `count` of each global batch.

    Synthetic data is one fixed batch made from the workload's seed (no input cost, so the
    strategies alone are compared); an image folder is read, decoded and transformed by
    `loader_workers` DataLoader processes, each rank sampling its own part of every epoch.
    """

    def __init__(self, workload: Workload, global_batch: int, device: torch.device,
                 index: int = 0, count: int = 1, loader_workers: int = 0) -> None:
        self.device = torch.device(device)
        self._loader: DataLoader | None = None
        if workload.data_dir is None:
            images, labels = workload.make_batch(global_batch, "cpu")
            images, labels = shard((images, labels), index, count)
            self._fixed = images.to(self.device), labels.to(self.device)
            return
        dataset = open_image_folder(workload, global_batch, count)
        self._sampler: DistributedSampler = DistributedSampler(
            dataset, num_replicas=count, rank=index, shuffle=True, seed=workload.seed,
            drop_last=True)
        self._loader = DataLoader(dataset, batch_size=global_batch // count,
                                  sampler=self._sampler, num_workers=loader_workers,
                                  pin_memory=self.device.type == "cuda", drop_last=True)
        self._memory_format = (torch.channels_last if workload.channels_last
                               else torch.contiguous_format)
        self._batches = self._epochs()

    def _epochs(self) -> Generator[tuple[torch.Tensor, torch.Tensor], None, None]:
        assert self._loader is not None
        epoch = 0
        while True:
            self._sampler.set_epoch(epoch)
            self._epoch: Iterator | None = iter(self._loader)
            for images, labels in self._epoch:
                yield (images.to(self.device, non_blocking=True,
                                 memory_format=self._memory_format),
                       labels.to(self.device, non_blocking=True))
            epoch += 1

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._loader is None:
            return self._fixed
        return next(self._batches)

    def close(self) -> None:
        """Stop the DataLoader's worker processes now (not whenever the iterator happens to be
        garbage collected: a worker left behind outlives the configuration)."""
        if self._loader is not None:
            self._batches.close()
            shutdown = getattr(getattr(self, "_epoch", None), "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self._epoch = None
            self._loader = None
