import os
import threading
import time
from dataclasses import replace

import pytest
import torch

from parbench import strategies
from parbench.drive.verify import verify
from parbench.machine.devices import parse_devices
from parbench.measure.tensors import TensorMemory
from parbench.plan.config import Config
from parbench.strategies.errors import StrategyError
from parbench.strategies.stages import micro_batch_sizes
from tests.support import CPU2


def _pipeline(workload, split_size):
    return strategies.create(strategies.plan("pipeline", workload, 8, CPU2.logical,
                                             {"split_size": split_size}))


@pytest.mark.parametrize("batch, split, sizes", [
    (120, 20, [20] * 6),
    (120, 8, [8] * 15),
    (10, 3, [3, 3, 2, 2]),  # ceil(10/3) = 4 near-equal micro-batches, as torch.tensor_split
    (5, 5, [5]),
])
def test_micro_batch_sizes(batch, split, sizes):
    assert micro_batch_sizes(batch, split) == sizes


@pytest.mark.parametrize("name, options", [
    ("model-parallel", {}),
    ("pipeline", {"split_size": 2}),
    ("pipeline", {"split_size": 3}),  # uneven micro-batches: 3, 3, 2
    ("pipeline", {"split_size": 2, "stages": 3, "balance": "params"}),
])
def test_one_step_equals_the_single_device_step(tiny_workload, name, options):
    # 64 px keeps layer4 at 2x2, so BatchNorm over a micro-batch of 2 is well conditioned.
    workload = replace(tiny_workload, image_size=64)
    devices = parse_devices("cpu,cpu,cpu")
    [verdict] = verify(workload, devices, [name], 8, options, tolerance=1e-5)
    assert verdict.baseline_update > 1e-4  # the step really moved the parameters
    assert verdict.max_abs_difference <= 1e-5, verdict


def test_pipeline_reports_its_stages_micro_batches_and_cut(tiny_workload):
    pipeline = _pipeline(tiny_workload, 2)
    pipeline.setup()
    try:
        images, labels = tiny_workload.make_batch(8, "cpu")
        loss = pipeline.train_step(images, labels)
        assert torch.isfinite(loss)
        assert pipeline.micro_batches == 4 and pipeline.pipeline_stages == 2
        assert pipeline.partition == "stem..layer2.1 | layer3.0..head"
        assert len(pipeline.placed_modules()) == 2  # one module per logical device
    finally:
        pipeline.close()


def test_stage_memory_counts_activations_of_every_micro_batch(tiny_workload):
    """GPipe keeps every micro-batch's activations until backward: the first stage's saved
    activations do not shrink when the same batch is cut into more micro-batches."""
    peaks = {}
    for split in (8, 2):
        pipeline = _pipeline(tiny_workload, split)
        pipeline.setup()
        memory = TensorMemory(pipeline.placed_modules())
        images, labels = tiny_workload.make_batch(8, "cpu")
        pipeline.train_step(images, labels)
        peaks[split] = memory.saved_peak_bytes()[0]
        memory.close()
        pipeline.close()
    assert peaks[2] == pytest.approx(peaks[8], rel=0.05)
    assert peaks[8] > 0


def test_split_larger_than_the_batch_is_refused(tiny_workload):
    with pytest.raises(StrategyError, match="--split-size 16 is larger than --batch-size 8"):
        _pipeline(tiny_workload, 16)


def test_more_stages_than_devices_is_refused(tiny_workload):
    with pytest.raises(StrategyError, match="3 stages need at least 3 devices, got 2"):
        strategies.plan("pipeline", tiny_workload, 8, CPU2.logical, {"stages": 3})
    refusal = Config("pipeline", tiny_workload, 8, CPU2, options={"stages": 3}).plan.refusal
    assert refusal.kind == "devices" and "3 stages need at least 3 devices" in refusal.reason


def _cpu_time_ratio_of_a_convolution() -> float:
    """Process CPU time / this thread's CPU time for one convolution: ~1 when the calling
    thread does all the work, ~2 when OpenMP helpers join in on two cores."""
    x, conv = torch.randn(16, 128, 32, 32), torch.nn.Conv2d(128, 128, 3, padding=1)
    conv(x)
    process, thread = time.process_time(), time.thread_time()
    for _ in range(3):
        conv(x)
    return (time.process_time() - process) / (time.thread_time() - thread)


def test_each_stage_worker_sets_the_callers_thread_count_on_its_own_thread(tiny_workload,
                                                                           monkeypatch):
    """OpenMP's thread count is per thread: a new thread would otherwise run its ops on every
    core (torch.get_num_threads() still says 1 there), so each stage's worker sets the count
    the caller runs with, on the worker's own thread, before any of its work."""
    threads = torch.get_num_threads()
    set_on: dict[str, int] = {}
    real = torch.set_num_threads

    def recording(count: int) -> None:
        set_on[threading.current_thread().name] = count
        real(count)

    real(1)
    monkeypatch.setattr(torch, "set_num_threads", recording)
    pipeline = _pipeline(tiny_workload, 2)
    try:
        pipeline.setup()
        names = [worker.submit(lambda: (threading.current_thread().name, dict(set_on))).result()
                 for worker in pipeline.workers]
    finally:
        pipeline.close()
        real(threads)
    assert len(names) == 2 and len({name for name, _ in names}) == 2  # a thread per stage
    for name, seen_before_work in names:
        assert seen_before_work.get(name) == 1, (name, seen_before_work)


@pytest.mark.perf  # process CPU time: any other thread of this process, or job, moves it
@pytest.mark.skipif(os.cpu_count() < 2, reason="needs two cores to tell one thread from two")
def test_stage_workers_run_on_one_thread_each(tiny_workload):
    """One thread per logical device: a new thread would otherwise run its ops on every core
    (torch.get_num_threads() still says 1 there: OpenMP's count is per thread). Measured on a
    quiet machine only: helpers that another job keeps off the cores hide the fault, and
    another thread's CPU time counts as the workers'."""
    torch.set_num_threads(1)
    pipeline = _pipeline(tiny_workload, 2)
    pipeline.setup()
    try:
        for worker in pipeline.workers:
            assert worker.submit(_cpu_time_ratio_of_a_convolution).result() < 1.3
    finally:
        pipeline.close()
