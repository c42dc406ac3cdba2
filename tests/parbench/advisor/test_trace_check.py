"""The schedule model checked on its own: a timeline's own compute times read back, and
replayed in torch's order to the step that timeline shows."""

from dataclasses import replace

import pytest

from parbench.advisor.models import models
from parbench.advisor.models.links import Link
from parbench.advisor.models.schedule_replay import StageTimes
from parbench.advisor.models.trace_check import replayed_trace, trace_stage_times
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.strategies.partition import Partition

NAMES = ("stem", "a", "b", "head")
BLOCKS = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=2**20, parameter_sizes=(1,),
                            saved_bytes=1) for name in NAMES)
# The second half twice as slow as the first: forward 2 s and backward 4 s against 4 s and 8 s.
SLOW_END = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 4, 1,
                   BLOCKS[:2] + tuple(replace(b, forward_s=2.0, input_grad_s=2.0,
                                              weight_grad_s=2.0) for b in BLOCKS[2:]))
HALVES = Partition(NAMES, (0, 2), "tutorial")
LINK = Link("1 MiB in 0.5 s", 2**20 / 1e9 / 0.5)


def _record(schedule: str, predicted: models.Prediction, micro_batches: int) -> dict:
    return dict(strategy=f"pipeline-{schedule}", world_size=2, micro_batches=micro_batches,
                timeline=[list(span) for span in predicted.spans])


def test_a_timeline_gives_back_each_stages_compute_times():
    predicted = models.pipeline("gpipe", SLOW_END, HALVES, 2, 4, LINK)
    assert trace_stage_times(_record("gpipe", predicted, 4)["timeline"]) == [
        StageTimes(2.0, 4.0, 0.0), StageTimes(4.0, 8.0, 0.0)]  # B counted as I: no split seen


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_schedule_replayed_with_its_own_traced_times_gives_its_traced_step(schedule):
    predicted = models.pipeline(schedule, SLOW_END, HALVES, 2, 4, LINK)
    replayed, traced = replayed_trace(_record(schedule, predicted, 4), [2**20], LINK)
    assert replayed == pytest.approx(traced) and traced == pytest.approx(
        predicted.step_time_s)
    # Told a slower link than the trace ran on, the replay comes out longer than the trace.
    slower, _ = replayed_trace(_record(schedule, predicted, 4), [4 * 2**20], LINK)
    assert slower > traced


def test_a_record_without_a_timeline_or_not_a_pipeline_is_not_checked():
    assert replayed_trace(dict(strategy="pipeline-gpipe", timeline=None), [1], LINK) is None
    assert replayed_trace(dict(strategy="ddp", timeline=[[0, 0, "F", 0.0, 1.0]]), [1],
                          LINK) is None
