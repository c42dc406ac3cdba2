"""PacedRun: steps driven by an external timer, the same measurement as `parbench run`."""

import time

import pytest

from parbench.launch.paced import PacedRun
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy, devices", [("single", "cpu"), ("pipeline", "cpu,cpu"),
                                               ("ddp", "cpu,cpu")])
def test_each_call_is_one_synchronised_step_and_parbench_measures_the_same(
        tiny_workload, child_pids, strategy, devices):
    config = Config(strategy, tiny_workload, 16, parse_devices(devices), warmup=1, steps=3,
                    timeout_s=120)
    run = PacedRun(config)
    called = []
    for _ in range(run.calls_needed):
        t0 = time.perf_counter()
        run.step()
        called.append(time.perf_counter() - t0)
    measured = run.finish()
    assert len(measured.step_times_s) == 3
    # The warm-up calls come first (ddp takes two whatever --warmup asks).
    assert run.calls_needed == config.warmup_steps + 3
    # This process's own clock (rank 0's, or the only one) runs inside each call: a call
    # returns only once its step is synchronised, so it lasts at least that step. Nothing more
    # is guaranteed: the thread hand-offs around it, and another rank's clock (which also
    # counts its wake-up after the barrier), take what a busy machine gives them.
    here = measured.rank_step_times_s[0] if measured.rank_step_times_s else measured.step_times_s
    for outside, inside in zip(called[config.warmup_steps:], here, strict=True):
        assert 0 < inside <= outside
    if measured.rank_step_times_s:  # the recorded step is the slowest rank's
        assert len(measured.rank_step_times_s) == 2
        assert measured.step_times_s == [max(times) for times in
                                         zip(*measured.rank_step_times_s, strict=True)]
    assert child_pids() == []


def test_calling_more_steps_than_configured_is_refused(tiny_workload):
    run = PacedRun(Config("single", tiny_workload, 4, parse_devices("cpu"), warmup=0,
                          steps=1))
    run.step()
    run.finish()
    with pytest.raises(RuntimeError, match="no step left"):
        run.step()


def test_a_failed_run_hands_its_error_over_and_keeps_nothing(tiny_workload, monkeypatch):
    """The error's traceback holds the failed strategy and its tensors: once finish() has
    raised it, the run no longer keeps it, so the runner's release frees them."""
    from parbench import strategies

    def explode(self, images, labels):
        raise RuntimeError("stage exploded")

    monkeypatch.setattr(strategies.single.SingleDevice, "train_step", explode)
    run = PacedRun(Config("single", tiny_workload, 4, parse_devices("cpu"), warmup=0,
                          steps=1))
    with pytest.raises(RuntimeError, match="stage exploded"):
        run.step()
    with pytest.raises(RuntimeError, match="stage exploded"):
        run.finish()
    assert run._error is None
