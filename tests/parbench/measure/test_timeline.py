"""A pipeline step's measured timeline: spans, idle share per stage, the Chrome trace."""

import contextlib
import json
import time

import pytest
import torch

from parbench.measure.timeline import Timeline, bubble_fractions, chrome_trace

# Two stages, two micro-batches, GPipe's fill and drain with unit-time actions: each stage is
# busy 4 of the step's 6 units, idle 1/3 = (K-1)/(M+K-1).
GPIPE = [[0, 0, "F", 0, 1], [0, 1, "F", 1, 2], [1, 0, "F", 1, 2], [1, 1, "F", 2, 3],
         [1, 1, "B", 3, 4], [1, 0, "B", 4, 5], [0, 1, "B", 4, 5], [0, 0, "B", 5, 6]]


def test_idle_share_per_stage_is_what_its_spans_leave_of_the_step():
    assert bubble_fractions(GPIPE, stages=2, step_s=6) == pytest.approx([1 / 3, 1 / 3])
    assert bubble_fractions(GPIPE[:1], stages=2, step_s=2) == pytest.approx([0.5, 1.0])


def test_spans_are_seconds_from_the_start_in_order():
    timeline = Timeline([torch.device("cpu")])
    timeline.start()
    with timeline.span(1, 0, "F"):
        time.sleep(0.01)
    with timeline.span(0, 0, "B"):
        pass
    [first, second] = timeline.spans()
    assert first[:3] == [0, 0, "B"] and second[:3] == [1, 0, "F"]  # sorted by stage
    assert 0 <= second[3] < second[4] and second[4] - second[3] >= 0.01
    timeline.start()  # a new step forgets the last
    assert timeline.spans() == []


def test_the_chrome_trace_has_a_row_per_stage_and_microsecond_durations():
    trace = json.loads(chrome_trace(GPIPE, "pipeline (split=4)"))
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 8 and {e["tid"] for e in spans} == {0, 1}
    assert spans[0]["name"] == "F0" and spans[0]["dur"] == 1e6
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"stage 0", "stage 1", "pipeline (split=4)"}


def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_k():
    from parbench.measure.timeline import in_flight

    assert in_flight(GPIPE, stages=2) == [2, 2]
    # 1F1B on the first stage with 3 micro-batches and K = 2: F0 F1 B0 F2 B1 B2.
    one_f_one_b = [[0, 0, "F", 0, 1], [0, 1, "F", 1, 2], [0, 0, "B", 3, 4],
                   [0, 2, "F", 4, 5], [0, 1, "B", 6, 7], [0, 2, "I", 8, 9]]
    assert in_flight(one_f_one_b, stages=1) == [2]


def test_a_rank_holding_several_model_stages_names_the_one_each_span_ran():
    timeline = Timeline([torch.device("cpu")])
    timeline.start()
    with timeline.span(0, 1, "I", model_stage=3):
        pass
    with timeline.span(0, 0, "F"):
        pass
    [plain, marked] = timeline.spans()
    assert len(plain) == 5 and marked[:3] + marked[5:] == [0, 1, "I", 3]
    [event] = [e for e in json.loads(chrome_trace([marked], "zbv"))["traceEvents"]
               if e["ph"] == "X"]
    assert event["name"] == "I1 s3" and event["args"]["model_stage"] == 3


class _FakeEvent:
    """A CUDA event as the timeline uses one: recorded on a stream of one device at the fake
    clock's time; `elapsed_time` refuses an event of another device, as CUDA does."""

    clock = [0.0]

    def __init__(self, enable_timing: bool = False) -> None:
        self.device = self.at_ms = None

    def record(self, stream) -> None:
        self.device, self.at_ms = stream.device, self.clock[0]

    def elapsed_time(self, end: "_FakeEvent") -> float:
        if end.device != self.device:
            raise RuntimeError("events on different devices")
        return end.at_ms - self.at_ms


class _FakeStream:
    def __init__(self, device) -> None:
        self.device = device


def test_each_span_is_timed_on_its_own_gpu_against_that_gpu_origin(monkeypatch):
    """Stages on two GPUs: each span recorded on its stage's device stream, measured from that
    device's origin (recorded on the current device alone, every span was on cuda:0)."""
    from parbench.measure import timeline as module

    monkeypatch.setattr(module.torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(module.torch.cuda, "current_stream", _FakeStream)
    gpus = [torch.device("cuda:0"), torch.device("cuda:1")]
    timeline = Timeline(gpus)
    _FakeEvent.clock[0] = 100.0
    timeline.start()
    for stage, (begin_ms, end_ms) in enumerate([(100.0, 110.0), (110.0, 130.0)]):
        _FakeEvent.clock[0] = begin_ms
        with timeline.span(stage, 0, "F", device=gpus[stage]):
            _FakeEvent.clock[0] = end_ms
    assert timeline.spans() == [[0, 0, "F", 0.0, 0.01], [1, 0, "F", 0.01, 0.03]]
    assert [p[3] for p in timeline._pending] == gpus  # each span on its own device
    with pytest.raises(ValueError, match="a span on cuda:2, which this timeline does not"):
        with timeline.span(0, 1, "F", device=torch.device("cuda:2")):
            pass


@pytest.mark.parametrize("name", ["model-parallel", "pipeline", "pipeline-1f1b"])
def test_a_strategy_times_each_action_on_its_stage_device(name, tiny_workload):
    """Stage k's actions (rank k's, one process per stage) on devices[k]."""
    from parbench import strategies
    from parbench.strategies.base import TrainingPlan

    gpus = (torch.device("cuda:0"), torch.device("cuda:1"))
    entry = strategies.lookup(name)
    options = entry.Options.from_values({"split_size": 2, **entry.preset})
    strategy = entry.cls(TrainingPlan(name, tiny_workload, 4, gpus, options))

    class Recorder:
        seen: list = []

        def span(self, stage, micro_batch, phase, model_stage=None, device=None):
            self.seen.append((stage, device))
            return contextlib.nullcontext()

    strategy.timeline = Recorder()
    for stage in (0, 1):
        with strategy.action(stage, 0, "F"):
            pass
    assert Recorder.seen == [(0, gpus[0]), (1, gpus[1])]
