"""The host's input pipeline measured: the images a second that torchvision's reference
ImageNet training transforms make from image files, on one core and through DataLoader
workers, with what decoded them."""

from __future__ import annotations

import functools
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import PIL
import torch
import torchvision
from PIL import features
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from torchvision.transforms import v2

from parbench.families.data import MEAN, STD

__all__ = ["APIS", "DECODE", "LoaderError", "LoaderRates", "PerCore", "Rates", "Repeat",
           "TimedLoader", "decoder_provenance", "describe_transforms", "measure_in_rounds",
           "open_dataset", "training_transforms"]

Clock = Callable[[], float]
# ClassificationPresetTrain's default is use_v2=False: the v1 transforms on PIL images.
APIS = {"v1": "torchvision.transforms", "v2": "torchvision.transforms.v2"}
DECODE = ("PIL.Image.open + convert('RGB') (torchvision.datasets.ImageFolder's default "
          "loader), the file read from the page cache")


class LoaderError(ValueError):
    """An image folder or setting the measurement cannot use."""


def training_transforms(crop_size: int, api: str = "v1") -> Callable:
    """torchvision's reference ImageNet training transforms (references/classification/
    presets.py, ClassificationPresetTrain with its defaults: bilinear, flip probability 0.5,
    no auto-augment, no random erasing) on a decoded PIL image."""
    if api == "v1":
        return transforms.Compose([
            transforms.RandomResizedCrop(crop_size, antialias=True),
            transforms.RandomHorizontalFlip(0.5),
            transforms.PILToTensor(),
            transforms.ConvertImageDtype(torch.float32),
            transforms.Normalize(MEAN, STD)])
    return v2.Compose([
        v2.RandomResizedCrop(crop_size, antialias=True),
        v2.RandomHorizontalFlip(0.5),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
        v2.ToPureTensor()])


def describe_transforms(pipeline) -> list[str]:
    """Each transform as torchvision writes it, with the dtype its repr leaves out."""
    described = []
    for transform in pipeline.transforms:
        text = repr(transform)
        dtype = getattr(transform, "dtype", None)
        if dtype is not None:
            scale = getattr(transform, "scale", None)
            text = f"{type(transform).__name__}({dtype}" + (
                f", scale={scale})" if scale is not None else ")")
        described.append(text)
    return described


def open_dataset(root: Path, pipeline: Callable | None) -> datasets.ImageFolder:
    """`root` read as ImageFolder does (one subfolder per class), or one line saying why not."""
    if not root.is_dir():
        raise LoaderError(f"--data {root}: no such folder; give a folder with one subfolder of "
                          "images per class (torchvision ImageFolder layout)")
    try:
        return datasets.ImageFolder(root, transform=pipeline)
    except (FileNotFoundError, RuntimeError) as error:
        raise LoaderError(f"--data {root}: {str(error).rstrip('.')}; give a folder with one "
                          "subfolder of images per class") from None


@dataclass(frozen=True)
class Repeat:
    """One timed stretch: images made in seconds."""

    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds


@dataclass
class Rates:
    """Repeats of one measurement, summarised by their median and range."""

    repeats: list[Repeat] = field(default_factory=list)

    def _rates(self) -> list[float]:
        return [repeat.images_per_s for repeat in self.repeats]

    @property
    def median(self) -> float:
        return statistics.median(self._rates())

    @property
    def spread(self) -> tuple[float, float]:
        return min(self._rates()), max(self._rates())

    def as_dict(self) -> dict:
        low, high = self.spread
        return {"images_per_s_median": self.median, "images_per_s_min": low,
                "images_per_s_max": high,
                "repeats": [{"images": r.images, "seconds": r.seconds,
                             "images_per_s": r.images_per_s} for r in self.repeats]}


def _endless_order(count: int, seed: int) -> Iterator[int]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield from torch.randperm(count, generator=generator).tolist()


class PerCore:
    """One process on one thread (torch.set_num_threads(1) while it measures) decoding and
    transforming the folder's images in a shuffled order, endlessly."""

    def __init__(self, dataset, warmup: int, seed: int = 0) -> None:
        self.dataset, self.rates = dataset, Rates()
        self._order = _endless_order(len(dataset), seed)
        torch.manual_seed(seed)  # the random crops and flips
        self._one_thread(lambda: [dataset[next(self._order)] for _ in range(warmup)])

    def _one_thread(self, work: Callable):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return work()
        finally:
            torch.set_num_threads(threads)

    def repeat(self, seconds: float, clock: Clock) -> Repeat:
        """Images made until `seconds` have passed, and the time they took."""
        def timed() -> Repeat:
            images, start = 0, clock()
            while True:
                self.dataset[next(self._order)]
                images += 1
                elapsed = clock() - start
                if elapsed >= seconds:
                    return Repeat(images, elapsed)
        self.rates.repeats.append(self._one_thread(timed))
        return self.rates.repeats[-1]


@dataclass
class LoaderRates(Rates):
    """DataLoader epochs with `workers` workers, and whether each delivered every image once
    (its labels counted against the folder's)."""

    workers: int = 0
    every_image_once: bool = True

    def as_dict(self) -> dict:
        return {"workers": self.workers, **super().as_dict(),
                "every_image_once": self.every_image_once}


class TimedLoader:
    """A shuffled DataLoader with persistent workers that collates batches as training has
    them, started and warmed by one untimed batch from every worker."""

    def __init__(self, dataset: datasets.ImageFolder, workers: int, batch_size: int,
                 seed: int = 0) -> None:
        self.loader = DataLoader(
            dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
            persistent_workers=workers > 0, pin_memory=torch.cuda.is_available(),
            generator=torch.Generator().manual_seed(seed))
        self.rates = LoaderRates(workers=workers)
        self._expected = Counter(dataset.targets)
        warming = iter(self.loader)
        for _ in range(min(max(workers, 1), len(self.loader))):
            next(warming)

    def epoch(self, clock: Clock) -> Repeat:
        """One epoch, timed from its first request to its last batch."""
        batches = iter(self.loader)  # with persistent workers, drains what is in flight first
        seen: Counter = Counter()
        start = clock()
        for _images, labels in batches:
            seen.update(labels.tolist())
        self.rates.repeats.append(Repeat(sum(seen.values()), clock() - start))
        self.rates.every_image_once &= seen == self._expected
        return self.rates.repeats[-1]

    def close(self) -> None:
        """Stop the workers now, not whenever the loader is garbage collected."""
        shutdown = getattr(getattr(self.loader, "_iterator", None), "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def measure_in_rounds(dataset: datasets.ImageFolder, workers: list[int], batch_size: int,
                      repeats: int, seconds: float, warmup: int,
                      on_repeat: Callable[[int, str, Repeat], None] = lambda *shown: None,
                      clock: Clock = time.perf_counter,
                      seed: int = 0) -> tuple[Rates, list[LoaderRates]]:
    """The per-core rate and each worker count's, in `repeats` rounds: every measurement once
    a round in a shuffled order, so that the host's drift (other work) falls on all alike."""
    per_core, loaders = PerCore(dataset, warmup, seed), []
    try:
        for count in workers:
            loaders.append(TimedLoader(dataset, count, batch_size, seed))
        measurements: list[tuple[str, functools.partial[Repeat]]] = [
            ("per core", functools.partial(per_core.repeat, seconds, clock))] + [
            (f"DataLoader {loader.rates.workers} worker{'s' * (loader.rates.workers != 1)}",
             functools.partial(loader.epoch, clock)) for loader in loaders]
        shuffler = random.Random(seed)
        for round_index in range(1, repeats + 1):
            for name, measure in shuffler.sample(measurements, len(measurements)):
                on_repeat(round_index, name, measure())
    finally:
        for loader in loaders:
            loader.close()
    return per_core.rates, [loader.rates for loader in loaders]


def decoder_provenance() -> dict:
    """What decodes and transforms the images: Pillow (or PIL-SIMD, whose versions end in
    .postN), its JPEG library and whether it is libjpeg-turbo, torchvision and torch."""
    return {"pil_version": PIL.__version__, "pil_simd": ".post" in PIL.__version__,
            "jpeg_library_version": features.version("jpg"),
            "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo")),
            "libjpeg_turbo_version": features.version_feature("libjpeg_turbo"),
            "torchvision_version": torchvision.__version__, "torch_version": torch.__version__}
