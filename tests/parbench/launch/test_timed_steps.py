"""Nothing of the harness runs inside a timed step: the tensor count and the pipeline's trace
happen in extra steps of their own, and what they measure is what they measured inside the
timed steps before."""

from __future__ import annotations

import contextlib

import pytest

from parbench import strategies
from parbench.launch import worker
from parbench.machine.devices import parse_devices
from parbench.measure import timeline as timeline_module
from parbench.measure import timing
from parbench.measure.tensors import TensorMemory, _SavedTensors
from parbench.plan.config import Config

STEPS, WARMUP = 3, 1


@pytest.fixture
def spied(monkeypatch):
    """Whether each saved-tensor pack and each trace began inside a timed step's body; and
    what each timing returned to the worker."""
    inside = [False]
    seen: dict[str, list] = {"pack": [], "trace": [], "timing": []}

    def time_steps(step, synchronize, warmup, steps, *args, **kwargs):
        def timed(i):
            inside[0] = True
            try:
                return step(i)
            finally:
                inside[0] = False
        result = timing.time_steps(timed, synchronize, warmup, steps, *args, **kwargs)
        seen["timing"].append(result)
        return result

    pack, start = _SavedTensors._pack, timeline_module.Timeline.start
    monkeypatch.setattr(worker, "time_steps", time_steps)
    monkeypatch.setattr(_SavedTensors, "_pack", lambda self, tensor: (
        seen["pack"].append(inside[0]), pack(self, tensor))[1])
    monkeypatch.setattr(timeline_module.Timeline, "start", lambda self: (
        seen["trace"].append(inside[0]), start(self))[1])
    return seen


def _config(workload, strategy: str, devices: str, **options) -> Config:
    return Config(strategy=strategy, workload=workload, global_batch=8,
                  devices=parse_devices(devices), warmup=WARMUP, steps=STEPS,
                  options=options)


def _counted_inside_the_steps(config: Config) -> list[float]:
    """The count as the harness took it before: hooks on through the warm-up and the measured
    steps, peaks from the first measured step."""
    strategy = strategies.create(config.plan.training_plan)
    strategy.setup()
    tensors = TensorMemory(strategy.placed_modules())
    try:
        for i in range(WARMUP + STEPS):
            if i == WARMUP:
                tensors.reset()
            strategy.train_step(*config.workload.make_batch(8, "cpu"))
            tensors.after_step()
        return tensors.read_mib(strategy.optimizer, strategy.buffer_bytes())
    finally:
        tensors.close()
        strategy.close()


@pytest.mark.parametrize("strategy, devices", [("single", "cpu"),
                                               ("model-parallel", "cpu,cpu")])
def test_tensors_are_counted_after_the_timed_steps_and_count_the_same(
        tiny_workload, spied, strategy, devices):
    config = _config(tiny_workload, strategy, devices)
    measured = worker.measure_worker(config, lambda s: config.used_devices)
    assert spied["pack"] and not any(spied["pack"])  # counted, never inside a timed step
    assert measured.peak_memory_mib == _counted_inside_the_steps(config)
    assert "counted in a step after the measured ones" in measured.memory_source
    # The record carries the timed steps' own readings, each in its place (the readings'
    # order within a step: test_nothing_runs_between_a_steps_clocks_but_the_step).
    timed = spied["timing"][0]  # the measured steps' (any later: without communication)
    assert len(timed.step_times_s) == STEPS
    assert measured.step_times_s == list(timed.step_times_s)
    assert measured.host_step_times_s == list(timed.host_times_s)
    assert measured.total_s == timed.total_s
    # A monotonic clock read at the start, once queued, once synchronised: 0 < host <= step.
    assert all(0 < host <= step for host, step in
               zip(measured.host_step_times_s, measured.step_times_s, strict=True))


def test_a_pipeline_is_traced_in_a_step_of_its_own(tiny_workload, spied):
    config = _config(tiny_workload, "pipeline", "cpu,cpu", split_size=4)
    measured = worker.measure_worker(config, lambda s: config.used_devices)
    assert spied["trace"] == [False]  # one traced step, outside the timed ones
    assert not any(spied["pack"])
    assert measured.traced_step_s > 0
    stages = {span[0] for span in measured.timeline}
    assert stages == {0, 1}
    assert max(span[4] for span in measured.timeline) <= measured.traced_step_s


def test_a_device_that_runs_out_does_so_before_the_timed_steps(tiny_workload, monkeypatch):
    timed = []
    monkeypatch.setattr(worker, "time_steps", lambda *args, **kwargs: timed.append(1))
    config = Config(strategy="single", workload=tiny_workload, global_batch=8,
                    devices=parse_devices("cpu,cpu"), warmup=WARMUP, steps=STEPS,
                    device_memory_mib=1)
    with pytest.raises(Exception, match="device memory"):
        worker.measure_worker(config, lambda s: config.used_devices)
    assert not timed


@pytest.mark.parametrize("host, step, kind, precision, backend, bound", [
    (0.0095, 0.010, "cuda", "bf16", "nccl", True),  # the GPU waited for the host's launches
    (0.002, 0.010, "cuda", "fp32", None, False),  # queued early, then waited for the GPU
    (0.010, 0.010, "cpu", "fp32", None, None),  # a CPU computes as it goes: no queue to judge
    (0.0095, 0.010, "cuda", "fp16", None, None),  # the scaler waits inside every step
    (0.0095, 0.010, "cuda", "fp32", "gloo", None),  # ranks sharing a GPU copy through the host
])
def test_host_bound_is_judged_where_the_host_only_queues(host, step, kind, precision, backend,
                                                         bound):
    assert timing.host_bound(host, step, kind, precision, backend) is bound


def test_nothing_runs_between_a_steps_clocks_but_the_step(monkeypatch):
    events = []
    clock = iter(range(100))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(clock)))
    result = timing.time_steps(lambda i: events.append(("step", i)),
                               lambda: events.append(("sync",)), warmup=1, steps=2,
                               pace=lambda i: contextlib.nullcontext(),
                               start_measuring=lambda: events.append(("start",)),
                               after_step=lambda i: events.append(("after", i)))
    assert events == [("sync",), ("step", 0), ("sync",), ("after", 0), ("start",),
                      ("sync",), ("step", 1), ("sync",), ("after", 1),
                      ("sync",), ("step", 2), ("sync",), ("after", 2)]
    # Each step three readings: start, queued, synchronised; the measured ones 3 apart.
    assert result.step_times_s == (2.0, 2.0) and result.host_times_s == (1.0, 1.0)
    assert result.total_s == 4.0

