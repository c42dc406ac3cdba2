"""Fixed costs: the probes are other configurations than the record's, a pipeline's cost per
action is what makes the replay match what its longer probe costs beyond its shorter, per step
what is left over, and a real probe runs through the core's launcher and is kept."""

import json
import statistics
from pathlib import Path

import pytest

from parbench.advisor.models.links import NO_LINK
from parbench.advisor.models.schedule_replay import StageTimes, replay, schedule_actions
from parbench.advisor.profiling import fixed_costs
from parbench.advisor.profiling.fixed_costs import (
    NO_FIXED_COSTS,
    FixedCosts,
    load_or_probe,
    probe_records,
    probes_path,
    solve_action_cost,
)
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.records import fixed_costs_of, predict_record
from parbench.families.workloads import Workload
from parbench.strategies.schedules import SCHEDULES

WORKLOAD = Workload(model="resnet18", image_size=32, num_classes=10)


def _record(strategy: str, **fields) -> dict:
    return {"strategy": strategy, "model": "resnet18", "image_size": 32, "precision": "fp32",
            "num_classes": 10, "device_kind": "cpu", "threads_per_device": 1,
            "devices": "cpu,cpu", "world_size": 2, "emulated": True, "status": "ok",
            "strategy_options": {}, **fields}


def test_the_cost_per_action_is_what_makes_the_prediction_match_the_probe():
    assert solve_action_cost(lambda cost: 0.1 + 8 * cost, 0.26) == pytest.approx(0.02, abs=1e-6)
    # a prediction already as slow as the probe needs no cost, and none is negative
    assert solve_action_cost(lambda cost: 0.3 + 8 * cost, 0.26) == 0.0
    # a difference of two probes may be negative, and a cost may exceed what it is matched to
    assert solve_action_cost(lambda cost: -0.05 + 8 * cost, -0.02) == pytest.approx(
        0.00375, abs=1e-6)
    assert solve_action_cost(lambda cost: 0.1 + 0.5 * cost, 0.6) == pytest.approx(1.0, abs=1e-6)


def test_each_action_of_the_replay_pays_the_cost_once():
    # GPipe with equal stages: every rank runs M forwards and M backwards on the critical path
    # of M + K - 1 ticks each way, so a cost c an action lengthens the step by 2(M + K - 1)c
    ranks, micro_batches, cost = 2, 4, 0.01
    actions = schedule_actions(SCHEDULES["gpipe"].torch_class, ranks, micro_batches, 1)
    times = [StageTimes(0.1, 0.1, 0.1)] * ranks
    without = replay(actions, times).step_time_s
    with_cost = replay(actions, times, action_s=cost).step_time_s
    assert with_cost - without == pytest.approx(2 * (micro_batches + ranks - 1) * cost)


@pytest.mark.parametrize("record", [
    _record("pipeline-gpipe", global_batch=8, split_size=2, micro_batches=4,
            strategy_options={"split_size": 2, "stages": 2}),
    _record("pipeline-fsdp", devices="cpu,cpu,cpu,cpu", world_size=4, global_batch=16,
            split_size=2, micro_batches=4,
            strategy_options={"split_size": 2, "stages": 2, "pipelines": 2}),
    _record("ddp", global_batch=4),
    _record("fsdp", global_batch=32),
])
def test_the_probe_is_never_the_records_own_configuration(record):
    probes = probe_records(record)
    assert len(probes) == (2 if "pipeline" in record["strategy"] else 1)
    for probe in probes:
        assert (probe["global_batch"], probe.get("split_size")) != (
            record["global_batch"], record.get("split_size"))
        assert probe["strategy"] == record["strategy"]
        assert probe["devices"] == record["devices"]
        split = probe.get("split_size") or probe["global_batch"] // probe["world_size"]
        assert split in (fixed_costs.PROBE_IMAGES, 2 * fixed_costs.PROBE_IMAGES)


def test_a_pipelines_two_probes_differ_in_micro_batches_only():
    record = _record("pipeline-fsdp", devices="cpu,cpu,cpu,cpu", world_size=4, global_batch=64,
                     split_size=4, micro_batches=8,
                     strategy_options={"split_size": 4, "stages": 2, "pipelines": 2})
    short, long = probe_records(record)
    # two stages a pipeline: 2 and 4 micro-batches a rank of its stages, 2 images each
    assert (short["micro_batches"], long["micro_batches"]) == (4, 8)
    assert (short["global_batch"], long["global_batch"]) == (16, 32)
    assert short["split_size"] == long["split_size"] == fixed_costs.PROBE_IMAGES


def test_a_pipeline_with_fewer_micro_batches_than_the_probes_is_probed_at_its_own_count():
    four = dict(devices="cpu,cpu,cpu,cpu", world_size=4)
    record = _record("pipeline-gpipe", global_batch=32, split_size=8, micro_batches=4,
                     strategy_options={"split_size": 8, "stages": 4}, **four)
    short, long = probe_records(record)
    assert (short["micro_batches"], short["split_size"]) == (4, fixed_costs.PROBE_IMAGES)
    assert (long["micro_batches"], long["split_size"]) == (8, fixed_costs.PROBE_IMAGES)
    # the record's own micro-batches are the probe's size: its count in larger ones
    record = _record("pipeline-1f1b", global_batch=8, split_size=2, micro_batches=4,
                     strategy_options={"split_size": 2, "stages": 4}, **four)
    short, long = probe_records(record)
    assert (short["micro_batches"], short["split_size"], short["global_batch"]) == (4, 4, 16)
    assert (long["micro_batches"], long["split_size"]) == (8, fixed_costs.PROBE_IMAGES)


@pytest.mark.parametrize("record", [
    # at 2 micro-batches a rank of 2 images: the shorter probe is the record, so one a rank more
    _record("pipeline-gpipe", global_batch=8, split_size=2, micro_batches=4,
            strategy_options={"split_size": 2, "stages": 2}),
    # at 4 a rank: the longer probe is the record
    _record("pipeline-zbv", global_batch=16, split_size=2, micro_batches=8,
            strategy_options={"split_size": 2, "stages": 4, "stages_per_rank": 2}),
    # at 1 a rank of 2 images: its own count in micro-batches of 4 holds as many images (8) as
    # the longer probe at 2 a rank of 2
    _record("pipeline-1f1b", global_batch=4, split_size=2, micro_batches=2,
            strategy_options={"split_size": 2, "stages": 2}),
])
def test_a_pipelines_two_probes_are_kept_apart_and_the_longer_has_more_micro_batches(record):
    short, long = probe_records(record)
    assert short["micro_batches"] < long["micro_batches"]
    assert probes_path(Path("c"), (short,), WORKLOAD) != probes_path(Path("c"), (long,), WORKLOAD)
    for probe in (short, long):
        assert (probe["global_batch"], probe["split_size"]) != (record["global_batch"],
                                                                record["split_size"])


def _stored(tmp_path, record: dict, *steps_s: float) -> None:
    """A record's probes' measurements kept where load_or_probe looks for them."""
    probes = probe_records(record)
    probes_path(tmp_path, probes, WORKLOAD).write_text(json.dumps(
        {"version": fixed_costs.FIXED_COSTS_VERSION,
         "probes": [{"step_s": step_s, "partition": None, "micro_batches": None}
                    for step_s in steps_s]}))


def test_a_kept_probe_gives_a_cost_per_step_or_per_action(tmp_path, monkeypatch):
    def refuse(*_):
        raise AssertionError("a kept probe is not measured again")

    monkeypatch.setattr(fixed_costs, "measure_probe", refuse)
    ddp = _record("ddp", global_batch=16)
    _stored(tmp_path, ddp, 0.5)
    costs = load_or_probe(tmp_path, ddp, WORKLOAD, lambda probe, costs: 0.3)
    assert costs.per_step_s == pytest.approx(0.2) and costs.per_action_s == 0.0
    pipeline = _record("pipeline-1f1b", global_batch=16, split_size=4, micro_batches=4,
                       strategy_options={"split_size": 4, "stages": 2})
    # the replay: 0.1 s, and 0.02 s more a micro-batch; 2 actions on the path a micro-batch
    _stored(tmp_path, pipeline, 0.5, 0.8)  # at 4 and 8 micro-batches

    def replayed(probe, costs):
        micro_batches = probe["micro_batches"]
        return 0.1 + 0.02 * micro_batches + 2 * micro_batches * costs.per_action_s

    costs = load_or_probe(tmp_path, pipeline, WORKLOAD, replayed)
    # 4 more micro-batches cost 0.3 s: 0.08 s of compute, 8 actions' 0.0275 s each; what both
    # measured beyond that (0.5 - 0.18 - 0.22, 0.8 - 0.26 - 0.44) is the step's own 0.1 s
    assert costs.per_action_s == pytest.approx(0.0275, abs=1e-5)
    assert costs.per_step_s == pytest.approx(0.1, abs=1e-4)
    assert costs.probe == ("pipeline-1f1b on 8 and 16 images (2 a micro-batch): 0.5 and 0.8 s "
                           "measured")
    # a longer probe that cost no more than its actions' compute: all of it per step
    _stored(tmp_path, pipeline, 0.5, 0.55)
    costs = load_or_probe(tmp_path, pipeline, WORKLOAD, replayed)
    assert costs.per_action_s == 0.0
    assert costs.per_step_s == pytest.approx((0.5 - 0.18 + 0.55 - 0.26) / 2)
    # one device, one process: nothing to probe
    assert load_or_probe(tmp_path, _record("single", devices="cpu", world_size=1,
                                           global_batch=16), WORKLOAD, refuse) == NO_FIXED_COSTS


def test_a_records_probes_are_measured_in_turn_read_at_the_median_of_every_round_and_kept(
        tmp_path, monkeypatch):
    pipeline = _record("pipeline-1f1b", global_batch=16, split_size=4, micro_batches=4,
                       strategy_options={"split_size": 4, "stages": 2})
    short, long = probe_records(pipeline)
    # the longer probe's second round fell in a slow spell of the machine
    steps = iter([[0.50, 0.51, 0.49], [0.80, 0.79, 0.82], [0.52, 0.50, 0.50],
                  [1.60, 1.50, 1.70], [0.49, 0.50, 0.51], [0.81, 0.80, 0.78]])
    order = []

    def measured(probe, workload):
        order.append(probe["global_batch"])
        times = next(steps)
        return {"step_s": statistics.median(times), "step_times_s": times,
                "global_batch": probe["global_batch"], "partition": None,
                "micro_batches": probe["micro_batches"]}

    def replayed(probe, costs):
        return 0.1 + 2 * probe["micro_batches"] * costs.per_action_s

    monkeypatch.setattr(fixed_costs, "measure_probe", measured)
    costs = load_or_probe(tmp_path, pipeline, WORKLOAD, replayed)
    assert order == [short["global_batch"], long["global_batch"]] * fixed_costs.PROBE_ROUNDS
    assert costs.probe.endswith("0.5 and 0.81 s measured")
    kept = json.loads(probes_path(tmp_path, (short, long), WORKLOAD).read_text())["probes"]
    assert kept[1]["steps_by_round_s"] == [[0.80, 0.79, 0.82], [1.60, 1.50, 1.70],
                                           [0.81, 0.80, 0.78]]
    assert kept[1]["step_s"] == 0.81  # the median of all nine
    # kept, not measured again
    assert load_or_probe(tmp_path, pipeline, WORKLOAD, replayed) == costs
    assert len(order) == 2 * fixed_costs.PROBE_ROUNDS
    # a record sharing the shorter probe, with a shorter one of its own (2 micro-batches, fewer
    # than its 2 stages a rank of the probes): both measured again, together, and kept apart
    other = _record("pipeline-1f1b", global_batch=16, split_size=8, micro_batches=2,
                    strategy_options={"split_size": 8, "stages": 2})
    own, shared = probe_records(other)
    assert shared["global_batch"] == short["global_batch"] and own["micro_batches"] == 2
    order.clear()
    steps = iter([[0.4], [0.6], [0.4], [0.6], [0.4], [0.6]])
    assert load_or_probe(tmp_path, other, WORKLOAD, replayed).probe.endswith(
        "0.4 and 0.6 s measured")
    assert order == [own["global_batch"], shared["global_batch"]] * fixed_costs.PROBE_ROUNDS
    assert load_or_probe(tmp_path, pipeline, WORKLOAD, replayed) == costs  # its own kept


def test_no_probe_is_launched_where_one_of_a_records_probes_is_refused(tmp_path, monkeypatch):
    record = _record("pipeline-gpipe", global_batch=8, split_size=2, micro_batches=4,
                     strategy_options={"split_size": 2, "stages": 2})
    short, long = probe_records(record)

    def refused(probe, workload):
        if probe["global_batch"] == long["global_batch"]:
            raise ValueError("refused here")
        return fixed_costs.Config("single", workload, 2, ("cpu",))

    def launched(config, *_):
        raise AssertionError("nothing is launched")

    monkeypatch.setattr(fixed_costs, "_config", refused)
    monkeypatch.setattr(fixed_costs, "measure", launched)
    with pytest.raises(ValueError, match="refused here"):
        load_or_probe(tmp_path, record, WORKLOAD, lambda probe, costs: 0.1)
    assert not list(tmp_path.iterdir())


def test_a_one_rank_group_costs_what_its_probe_measures(tmp_path):
    """ddp on one device, probed for real through the core's launcher (one process of its own):
    the cost it measured is added to the prediction once, and kept for the next."""
    from parbench.advisor.profiling.profile import profile_blocks

    record = _record("ddp", devices="cpu", world_size=1, emulated=False, global_batch=8,
                     cpu_cores_available=2)
    profiles = {}

    def profile_at(micro_batch):
        if micro_batch not in profiles:
            profiles[micro_batch] = profile_blocks(WORKLOAD, micro_batch, repeats=1)
        return profiles[micro_batch]

    costs = fixed_costs_of(record, profile_at, NO_LINK, tmp_path)
    assert "ddp on 2 images" in costs.probe
    [kept] = tmp_path.glob("fixed-ddp-*-x1-g2.json")
    # the cost is what the probe's kept median step measured beyond the models' prediction of
    # that probe (none where the prediction is already as slow): whichever it is on this CPU
    [stored] = json.loads(kept.read_text())["probes"]
    assert [len(steps) for steps in stored["steps_by_round_s"]] == \
        [fixed_costs.PROBE_STEPS] * fixed_costs.PROBE_ROUNDS
    [probe] = probe_records(record)
    probe = {**probe, "partition": stored["partition"] or probe.get("partition"),
             "micro_batches": stored["micro_batches"] or probe.get("micro_batches")}
    predicted = predict_record(probe, profile_at, NO_LINK)
    assert predicted is not None and stored["step_s"] > 0
    assert costs.per_step_s == pytest.approx(max(0.0, stored["step_s"] - predicted.step_time_s))
    assert costs.per_action_s == 0.0  # one process per replica: no pipeline actions
    plain = predict_record(record, profile_at, NO_LINK)
    probed = predict_record(record, profile_at, NO_LINK, costs)
    assert probed.step_time_s == pytest.approx(plain.step_time_s + costs.per_step_s)
    assert probed.fixed_cost_s == costs.per_step_s
    assert fixed_costs_of(record, profile_at, NO_LINK, tmp_path) == costs  # kept, not measured


def test_fixed_costs_are_named_as_measured():
    assert FixedCosts().probe == "" and NO_FIXED_COSTS.per_action_s == 0.0


def test_a_probe_that_fails_leaves_the_record_predicted_and_says_why(tmp_path, monkeypatch):
    from parbench.advisor.profiling.costs_at_hand import measured_costs
    from parbench.advisor.runs import records
    from parbench.launch import LaunchError

    def fail(*_):
        raise LaunchError("rank 1 exited with -9")

    monkeypatch.setattr(records, "load_or_probe", fail)
    costs = measured_costs(_record("ddp", global_batch=16), lambda size: None, NO_LINK, tmp_path)
    assert costs.per_step_s == costs.per_action_s == 0.0
    assert costs.probe == "probe failed, no fixed cost added: rank 1 exited with -9"


def test_the_summary_names_what_the_probes_add_and_each_that_failed():
    import pandas as pd

    from parbench.advisor.runs.summary import fixed_costs_summary

    table = pd.DataFrame([
        dict(strategy="single", fixed_cost_probe=None, predicted_fixed_cost_s=0.0,
             predicted_step_time_s=1.0),
        dict(strategy="ddp", fixed_cost_probe="ddp on 4 images", predicted_fixed_cost_s=0.1,
             predicted_step_time_s=1.0),
        dict(strategy="pipeline-1f1b", fixed_cost_probe="pipeline-1f1b on 8 images",
             predicted_fixed_cost_s=0.3, predicted_step_time_s=1.0),
        dict(strategy="fsdp", fixed_cost_probe="probe failed, no fixed cost added: timeout",
             predicted_fixed_cost_s=0.0, predicted_step_time_s=1.0)])
    assert fixed_costs_summary(table) == (
        "fixed costs measured by a probe on this device for 2 configurations: 20% of their "
        "predicted step on the median (10% to 30%); fsdp: probe failed, no fixed cost added: "
        "timeout")
    assert fixed_costs_summary(table.iloc[:1]) is None


def test_probes_of_different_sizes_are_kept_apart():
    # batch 4 on 2 ranks is the probe's own size, so its probe takes 4 images a rank
    small, usual = _record("ddp", global_batch=4), _record("ddp", global_batch=16)
    (small_probe,), (usual_probe,) = probe_records(small), probe_records(usual)
    assert small_probe["global_batch"] == 8 and usual_probe["global_batch"] == 4
    assert (probes_path(Path("c"), (small_probe,), WORKLOAD)
            != probes_path(Path("c"), (usual_probe,), WORKLOAD))


def test_the_probe_is_named_by_its_images_as_a_table_holds_the_record(tmp_path):
    # read back from a table, a data-parallel record's split is NaN, not None
    record = _record("ddp", global_batch=16, split_size=float("nan"))
    _stored(tmp_path, record, 0.5)
    costs = load_or_probe(tmp_path, record, WORKLOAD, lambda probe, costs: 0.3)
    assert costs.probe == "ddp on 4 images (2 a rank): 0.5 s measured"


def test_a_pipelines_fixed_cost_is_what_its_actions_add_to_the_step():
    names = ("stem", "a", "b", "head")
    blocks = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=1, parameter_sizes=(1,),
                                saved_bytes=1) for name in names)
    profile = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 2, 3, blocks)
    record = _record("pipeline-gpipe", global_batch=8, split_size=2, micro_batches=4,
                     partition="stem..a | b..head", device_kind="cuda", emulated=False,
                     strategy_options={"split_size": 2, "stages": 2})
    plain = predict_record(record, lambda size: profile, NO_LINK)
    costed = predict_record(record, lambda size: profile, NO_LINK, FixedCosts(per_action_s=0.5))
    # GPipe on 2 ranks, 4 micro-batches: (4 + 1) ticks each way on the critical path
    assert costed.step_time_s - plain.step_time_s == pytest.approx(2 * 5 * 0.5)
    assert costed.fixed_cost_s == pytest.approx(costed.step_time_s - plain.step_time_s)
    assert plain.fixed_cost_s == 0.0
    # a cost per step as well: added once, beside the actions'
    both = predict_record(record, lambda size: profile, NO_LINK,
                          FixedCosts(per_action_s=0.5, per_step_s=0.25))
    assert both.step_time_s == pytest.approx(costed.step_time_s + 0.25)
    assert both.fixed_cost_s == pytest.approx(2 * 5 * 0.5 + 0.25)


FOUR = dict(devices="cpu,cpu,cpu,cpu", world_size=4, global_batch=32)


@pytest.mark.parametrize("strategy, options", [
    ("pipeline-gpipe", {"stages": 4, "split_size": 4}),
    ("pipeline-1f1b", {"stages": 4, "split_size": 4}),
    *((name, {"stages": 4, "split_size": 4, "stages_per_rank": 2})
      for name in ("pipeline-interleaved-1f1b", "pipeline-looped-bfs", "pipeline-zero-bubble",
                   "pipeline-zbv", "pipeline-dualpipev")),
    ("pipeline-fsdp", {"stages": 2, "split_size": 4, "pipelines": 2}),
    ("ddp", {"zero": True}),
    ("fsdp", {"reshard_after_forward": "no"}),
    ("hsdp", {"shard_size": 2}),
])
def test_every_probed_layouts_probe_is_a_configuration_parbench_runs(strategy, options):
    record = _record(strategy, strategy_options={**options, "balance": "time"},
                     split_size=options.get("split_size"), **FOUR)
    for probe in probe_records(record):
        config = fixed_costs._config(probe, WORKLOAD)
        assert config.refusal() is None and config.plan.runs
        assert config.timeout_s == fixed_costs.PROBE_TIMEOUT_S
