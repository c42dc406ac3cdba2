"""The input-pipeline measurement: the synthetic folder ImageFolder reads, the per-core rate as
images over measured time, DataLoader epochs that deliver every image once, and rounds that
time every measurement once each."""

import itertools

import pytest
import torch
from PIL import Image
from torchvision import datasets

from parbench.measure.image_folder import describe_folder, write_image_folder
from parbench.measure.loader import (
    describe_transforms,
    measure_in_rounds,
    open_dataset,
    training_transforms,
)

NOMINAL = (64, 48)


@pytest.fixture(scope="module")
def six_classes(tmp_path_factory):
    """Six tiny JPEGs, each its own class: a label names one image."""
    root = tmp_path_factory.mktemp("images")
    write_image_folder(root, 6, 6, NOMINAL)
    return root


def test_the_folder_written_is_what_image_folder_reads(tmp_path):
    facts = write_image_folder(tmp_path, 7, 3, NOMINAL, quality=90)
    dataset = datasets.ImageFolder(tmp_path)
    assert dataset.classes == ["class_0", "class_1", "class_2"]
    assert len(dataset) == 7 and sorted(dataset.targets) == [0, 0, 0, 1, 1, 2, 2]
    for path, _ in dataset.samples:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            width, height = sorted(image.size, reverse=True)  # a portrait one turned back
            assert 0.9 * 64 - 1 <= width <= 1.1 * 64 + 1 and 0.9 * 48 - 1 <= height <= 1.1 * 48 + 1
    assert (facts.images, facts.classes, facts.formats) == (7, 3, {"JPEG": 7})
    again = write_image_folder(tmp_path / "again", 7, 3, NOMINAL, quality=90)
    assert again.mean_file_bytes == facts.mean_file_bytes  # the same seed, the same files


def test_the_transforms_are_the_reference_ones_in_either_api():
    v1 = describe_transforms(training_transforms(224, "v1"))
    assert [text.split("(")[0] for text in v1] == [
        "RandomResizedCrop", "RandomHorizontalFlip", "PILToTensor", "ConvertImageDtype",
        "Normalize"]
    assert "interpolation=bilinear, antialias=True" in v1[0] and "p=0.5" in v1[1]
    assert v1[3] == "ConvertImageDtype(torch.float32)"
    v2 = describe_transforms(training_transforms(224, "v2"))
    assert [text.split("(")[0] for text in v2][2:] == [
        "ToImage", "ToDtype", "Normalize", "ToPureTensor"]


def test_the_per_core_rate_is_the_images_transformed_over_the_time_measured(six_classes):
    seen = []
    pipeline = training_transforms(16)

    def counted(image):
        seen.append(torch.get_num_threads())
        return pipeline(image)

    dataset = open_dataset(six_classes, counted)
    ticks = itertools.count(step=0.25)  # a clock that moves a quarter second a reading
    threads = torch.get_num_threads()
    rates, loaders = measure_in_rounds(dataset, [], batch_size=2, repeats=2, seconds=1.0,
                                       warmup=3, clock=lambda: next(ticks))
    assert [(r.images, r.seconds, r.images_per_s) for r in rates.repeats] == [(4, 1.0, 4.0)] * 2
    assert len(seen) == 3 + 4 + 4 and set(seen) == {1}  # one thread while measuring
    assert torch.get_num_threads() == threads and loaders == []
    assert rates.median == 4.0 and rates.spread == (4.0, 4.0)


def test_each_round_times_every_measurement_once_and_every_epoch_sees_every_image(six_classes):
    dataset = open_dataset(six_classes, training_transforms(16))
    shown = []
    per_core, (one, two) = measure_in_rounds(
        dataset, [1, 2], batch_size=4, repeats=2, seconds=0.01, warmup=0,
        on_repeat=lambda k, name, repeat: shown.append((k, name, repeat)))
    assert [sorted(name for k, name, _ in shown if k == r) for r in (1, 2)] == [
        ["DataLoader 1 worker", "DataLoader 2 workers", "per core"]] * 2
    assert [r.images for r in one.repeats + two.repeats] == [6] * 4  # the folder, each epoch
    assert one.every_image_once and two.every_image_once  # a label is an image here
    assert (one.workers, two.workers, len(per_core.repeats)) == (1, 2, 2)
    assert [repeat for *_, repeat in shown if repeat in two.repeats] == two.repeats
    assert two.as_dict()["images_per_s_median"] == two.median > 0


def test_describe_folder_reads_sizes_and_bytes_of_any_image_folder(tmp_path):
    (tmp_path / "cats").mkdir()
    Image.new("RGB", (30, 20), "red").save(tmp_path / "cats" / "a.png")
    Image.new("RGB", (10, 40), "blue").save(tmp_path / "cats" / "b.jpg", quality=90)
    (tmp_path / "cats" / "notes.txt").write_text("not an image")
    facts = describe_folder(tmp_path)
    assert (facts.images, facts.classes) == (2, 1)
    assert facts.width_px == {"min": 10, "mean": 20.0, "max": 30}
    assert facts.formats == {"PNG": 1, "JPEG": 1}
