"""The schedule replay predicts what the closed forms say where they hold, from torch's own
action lists."""

import pytest

from parbench.advisor.models.schedule_replay import StageTimes, replay, schedule_actions
from parbench.strategies.schedules import SCHEDULES

EQUAL = StageTimes(forward_s=1.0, input_grad_s=1.0, weight_grad_s=1.0)


def _replayed(schedule: str, ranks: int, micro_batches: int, times=EQUAL, **kwargs):
    chosen = SCHEDULES[schedule]
    per_rank = 2 if chosen.multi_stage else 1
    actions = schedule_actions(chosen.torch_class, ranks, micro_batches, per_rank)
    return replay(actions, [times] * (ranks * per_rank), **kwargs), per_rank


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs",
                                      "zero-bubble"])
@pytest.mark.parametrize(("ranks", "micro_batches"), [(2, 4), (2, 24), (4, 8)])
def test_equal_stages_give_the_closed_form_bubble(schedule, ranks, micro_batches):
    """GPipe's and 1F1B's (K-1)/(M+K-1); interleaved over V stages per rank, (K-1)/(VM+K-1);
    ZB-H1's a third of 1F1B's with F, I and W equal."""
    predicted, per_rank = _replayed(schedule, ranks, micro_batches)
    assert predicted.bubble == pytest.approx(
        SCHEDULES[schedule].bubble(ranks, micro_batches, per_rank))
    ideal = micro_batches * per_rank * 3.0  # F + B per micro-batch and stage, per rank
    assert predicted.step_time_s == pytest.approx(ideal / (1 - predicted.bubble))


@pytest.mark.parametrize("schedule", list(SCHEDULES))
def test_every_schedule_runs_every_micro_batch_through_every_stage_in_dependency_order(
        schedule):
    predicted, per_rank = _replayed(schedule, ranks=2, micro_batches=4)
    spans = {(s[5], s[2], s[1]): s for s in predicted.spans}
    for stage in range(2 * per_rank):
        for micro_batch in range(4):
            forward = spans[(stage, "F", micro_batch)]
            backward = spans.get((stage, "B", micro_batch)) or spans[(stage, "I", micro_batch)]
            assert forward[4] <= backward[3]
            if stage > 0:
                assert spans[(stage - 1, "F", micro_batch)][4] <= forward[3]
    busy = sum(s[4] - s[3] for s in predicted.spans)
    assert busy == pytest.approx(2 * per_rank * 4 * 3.0)  # all the work, each action once


@pytest.mark.parametrize("schedule", [n for n, s in SCHEDULES.items() if s.multi_stage])
def test_torch_places_the_stages_on_the_ranks_where_parbench_does(schedule):
    chosen = SCHEDULES[schedule]
    actions = schedule_actions(chosen.torch_class, 4, 8, 2)
    for rank, rank_actions in enumerate(actions):
        expected = [rank, 7 - rank] if chosen.v_shape else [rank, rank + 4]
        assert sorted({stage for stage, _, _ in rank_actions}) == sorted(expected)


def test_zbv_idles_one_forward_at_the_start_where_the_closed_form_says_none():
    """ZB-V's bubble is zero in the limit; torch's order leaves the last rank waiting for the
    first chunk's forward, which the replay shows (K=2, M=4: 0.5 s of a 12.5 s step)."""
    predicted, _ = _replayed("zbv", ranks=2, micro_batches=4,
                             times=StageTimes(0.5, 0.5, 0.5))
    assert SCHEDULES["zbv"].bubble(2, 4, 2) == 0.0
    assert predicted.step_time_s == pytest.approx(12.5)


def test_a_zero_bubble_schedule_idles_less_than_1f1b_when_the_weight_gradient_can_wait():
    zero_bubble, _ = _replayed("zbv", ranks=2, micro_batches=8)
    one_f_one_b, _ = _replayed("1f1b", ranks=2, micro_batches=8)
    assert zero_bubble.bubble < one_f_one_b.bubble / 2


def test_a_transfer_delays_the_next_stage_by_its_time_and_costs_gpipe_two_per_cut():
    """GPipe on two ranks: the first forward's activation and the last backward's gradient
    cross the cut on the critical path; the others hide behind compute."""
    without, _ = _replayed("gpipe", ranks=2, micro_batches=4)
    with_transfers, _ = _replayed("gpipe", ranks=2, micro_batches=4, transfer_s=lambda cut: 0.25)
    assert with_transfers.step_time_s == pytest.approx(without.step_time_s + 2 * 0.25)
    first_on_rank_1 = min(s[3] for s in with_transfers.spans if s[0] == 1)
    assert first_on_rank_1 == pytest.approx(1.0 + 0.25)


def test_1f1b_on_the_last_rank_runs_micro_batches_in_order():
    """torch 2.14's IR numbers the last rank's 1F1B forwards from 1; the replay does not."""
    actions = schedule_actions(SCHEDULES["1f1b"].torch_class, 2, 4, 1)
    assert [m for _, kind, m in actions[1] if kind == "F"] == [0, 1, 2, 3]


def test_a_schedule_that_cannot_proceed_is_refused():
    deadlocked = [[(0, "F", 0), (0, "B", 0)], [(1, "B", 0), (1, "F", 0)]]
    with pytest.raises(ValueError, match="cannot proceed"):
        replay(deadlocked, [EQUAL, EQUAL])


def test_ranks_sharing_a_processor_slow_each_other_only_while_both_compute():
    """Two forwards of 1 s each on two stages, each action twice as long while both ranks
    compute: the first forward alone (0-1 s), the second on stage 0 beside the first on stage
    1 (both 1-3 s), the last alone (3-4 s)."""
    forwards = [[(0, "F", 0), (0, "F", 1)], [(1, "F", 0), (1, "F", 1)]]
    alone = StageTimes(forward_s=1.0, input_grad_s=0.0, weight_grad_s=0.0)
    shared = replay(forwards, [alone, alone], slowdown=lambda computing: float(computing))
    assert sorted((s[0], s[1], s[3], s[4]) for s in shared.spans) == [
        (0, 0, 0.0, 1.0), (0, 1, 1.0, 3.0), (1, 0, 1.0, 3.0), (1, 1, 3.0, 4.0)]
    assert replay(forwards, [alone, alone]).step_time_s == 3.0  # unshared: a list schedule
