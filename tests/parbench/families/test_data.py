"""Batches: synthetic shards, and an image folder read through DistributedSampler."""

from dataclasses import replace

import pytest
import torch

from parbench.families.data import BatchSource, DataError, open_image_folder, shard


def _image_ids(images: torch.Tensor) -> set[int]:
    # Undo Normalize on the red channel: value = (x * std + mean) * 255.
    red = images[:, 0].mean(dim=(1, 2)) * 0.229 + 0.485
    return {round(float(v) * 255 / 10) for v in red}


def test_synthetic_shards_are_the_global_batch_cut_in_order(tiny_workload):
    images, labels = tiny_workload.make_batch(6, "cpu")
    parts = [BatchSource(tiny_workload, 6, "cpu", index, 3).next() for index in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), images)
    assert torch.equal(torch.cat([p[1] for p in parts]), labels)
    assert [len(p[1]) for p in parts] == [2, 2, 2]
    assert shard((images,), 0, 1)[0] is images


def test_ranks_read_disjoint_parts_of_each_epoch(image_folder, tiny_workload):
    workload = replace(tiny_workload, data_dir=str(image_folder()))
    seen = []
    for rank in range(2):
        source = BatchSource(workload, 4, "cpu", rank, 2)
        batches = [source.next() for _ in range(3)]  # 12 images / 2 ranks / 2 per batch
        source.close()
        assert all(images.shape == (2, 3, 32, 32) for images, _ in batches)
        seen.append(set().union(*(_image_ids(images) for images, _ in batches)))
    assert seen[0].isdisjoint(seen[1])
    assert seen[0] | seen[1] == set(range(12))


def test_loader_workers_deliver_the_same_batches(image_folder, tiny_workload, child_pids):
    workload = replace(tiny_workload, data_dir=str(image_folder()))
    in_process, with_workers = (BatchSource(workload, 4, "cpu", loader_workers=n)
                                for n in (0, 2))
    for _ in range(4):  # crosses into the second epoch
        a, b = in_process.next(), with_workers.next()
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    in_process.close()
    with_workers.close()
    assert child_pids() == []  # the loader's workers are stopped, not left to the collector


@pytest.mark.parametrize("classes, per_class, batch, num_classes, message", [
    (3, 2, 4, 2, "has 3 classes but the model predicts 2; pass --num-classes 3"),
    (2, 2, 8, 10, "has 4 images, fewer than one global batch of 8"),
    (0, 0, 4, 10, "use one subfolder of images per class"),
])
def test_an_unusable_folder_is_refused_with_the_fix(image_folder, tiny_workload, classes,
                                                    per_class, batch, num_classes, message):
    root = image_folder(classes, per_class)
    workload = replace(tiny_workload, data_dir=str(root), num_classes=num_classes)
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        open_image_folder(workload, batch)
