"""The predictor's held-out check: configurations drawn from a declared space with a seed, the
naive estimate beside the model, and the ranking of the pairs measurement decides."""

import json
import math

import pandas as pd
import pytest

from parbench.advisor import version
from parbench.advisor.models.naive import naive_step_s
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.published import kept_files, stale_models
from parbench.advisor.runs.ranking import ranking
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.cli import main, parser
from parbench.commands.run import build_sweep, spec_of
from parbench.plan import experiments, held_out

SPACE = {"workloads": 3, "per_workload": 4, "model": ["resnet18", "resnet50"],
         "batch_size": [8, 12], "image_size": [32, 64],
         "strategies": {"ddp": {"devices": ["cpu,cpu"]},
                        "pipeline-gpipe": {"split_size": held_out.MICRO_BATCH},
                        "single": {"accumulation_split": held_out.MICRO_BATCH}}}


def test_a_seed_draws_the_same_points_and_another_seed_others():
    points = held_out.draw(SPACE, 3, lambda point: True)
    assert points == held_out.draw(SPACE, 3, lambda point: True)
    assert points != held_out.draw(SPACE, 4, lambda point: True)
    assert len(points) == 12
    for first in points[::4]:  # each workload opens with its baseline, single on the batch
        assert set(first) == {"model", "batch_size", "image_size", "strategy"}
        assert first["strategy"] == "single"
    for point in points:
        split = point.get("split_size") or point.get("accumulation_split")
        if split:  # a micro-batch: a divisor of the batch, 2 to half of it
            batch = int(point["batch_size"])
            assert batch % int(split) == 0 and 2 <= int(split) <= batch // 2
    assert len({json.dumps(point, sort_keys=True) for point in points}) == 12  # no repeats


def test_a_point_the_plan_refuses_is_drawn_again():
    points = held_out.draw(SPACE, 3, lambda point: point["strategy"] != "ddp")
    assert len(points) == 12 and all(point["strategy"] != "ddp" for point in points)


def _holdout_configs(*flags: str):
    args = parser().parse_args(["run", "--experiment", "prediction-holdout", *flags])
    args.given_argv = ["--experiment", "prediction-holdout", *flags]
    return build_sweep(spec_of(experiments.applied(args, args.parse_run))).configs


def test_the_published_holdout_draws_at_least_24_runnable_configurations_per_seed():
    configs = _holdout_configs("--seed", "0")
    assert len(configs) >= 24 and all(config.plan.runs for config in configs)
    workloads = {(c.workload.model, c.global_batch, c.workload.image_size) for c in configs}
    assert len(workloads) == 4
    assert [c.label() for c in configs] == [c.label() for c in _holdout_configs("--seed", "0")]
    assert [c.label() for c in configs] != [c.label() for c in _holdout_configs("--seed", "1")]


def _profile(step_s: float, optimizer_s: float, batch: int) -> Profile:
    blocks = (BlockProfile("a", step_s / 3, step_s / 3, step_s / 3, 1, (4,), 1),)
    return Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, batch, 3, blocks,
                   step_s, optimizer_s)


@pytest.mark.parametrize("strategy, fields, expected", [
    ("single", {}, 1.2),
    ("single", {"split_size": 2, "micro_batches": 4}, 1.2),  # micro-batching ignored
    ("model-parallel", {"devices": "cpu,cpu"}, 1.2),
    # GPipe's bubble: 1.2 x (1 + (2 - 1) / 4) / 2
    ("pipeline-gpipe", {"devices": "cpu,cpu", "micro_batches": 4}, 1.2 * 1.25 / 2),
    ("pipeline-1f1b", {"devices": "cpu,cpu,cpu", "micro_batches": 6}, 1.2 * (1 + 2 / 6) / 3),
    ("ddp", {"devices": "cpu,cpu", "world_size": 2}, 0.6),
    ("fsdp", {"devices": "cpu,cpu", "world_size": 2}, 0.6),
])
def test_the_naive_estimate_is_the_textbook_one(strategy, fields, expected):
    record = {"strategy": strategy, "global_batch": 8, "devices": "cpu", **fields}
    asked = []

    def profile_at(size):
        asked.append(size)
        return _profile(1.0, 0.2, size)

    assert naive_step_s(record, profile_at) == pytest.approx(expected)
    assert asked == [8]  # always the whole batch on one device


def _row(strategy: str, measured: list[float], predicted: float, devices="cpu,cpu") -> dict:
    """A prediction beside a record measured in len(measured) rounds (step times)."""
    trials = [{"round": r, "twin": False, "status": "ok", "throughput_ips": 8 / step}
              for r, step in enumerate(measured)]
    return dict(strategy=strategy, model="resnet18", image_size=32, num_classes=1000,
                precision="fp32", channels_last=False, compile=False, scaling="strong",
                global_batch=8, device_kind="cpu", devices=devices, trials=trials,
                step_time_median_s=math.exp(sum(map(math.log, measured)) / len(measured)),
                predicted_step_time_s=predicted)


def test_the_ranking_counts_only_the_pairs_measurement_decides():
    table = pd.DataFrame([
        _row("pipeline-gpipe", [1.0, 1.02, 0.99], 1.0),
        _row("pipeline-1f1b", [2.0, 2.05, 1.98], 1.5),  # slower by 2x: decided, ordered right
        _row("ddp", [1.01, 0.98, 1.02], 3.0),  # gpipe's equal: undecided (ordered either way)
        _row("single", [0.5, 0.51, 0.49], 0.4, devices="cpu"),  # another device count
    ])
    result = ranking(table)
    assert result.pairs == 3  # within the two-device group only
    # Decided: gpipe < 1f1b (right), ddp < 1f1b (the model says ddp is slower: wrong).
    assert (result.decided, result.ordered) == (2, 1)
    assert result.misordered == ("pipeline-1f1b vs ddp (resnet18)",)
    assert result.tau == pytest.approx((1 - 2) / 3)  # concordant 1, discordant 2
    assert result.corrected == 2  # beyond doubt: 2x, every round
    assert "1 of 2 pairs the measurement decides" in result.describe()
    assert "ordered right (50%)" in result.describe()


def test_a_held_out_run_is_measured_then_predicted_with_its_profiles_beside_it(
        tmp_path, monkeypatch, capsys):
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "tiny-holdout.json").write_text(json.dumps(dict(
        description="a tiny held-out set", source="this test",
        arguments=["--steps", "1", "--warmup", "1", "--repeats", "2", "--devices", "cpu"],
        draw={"workloads": 1, "per_workload": 2, "model": ["resnet18"], "batch_size": [4],
              "image_size": [32], "strategies": {"single": {"accumulation_split": [2]}}},
        then=[["predict", "{run}", "--link", "pcie4"]])))
    monkeypatch.setattr(experiments, "FOLDER", folder)
    assert main(["run", "--experiment", "tiny-holdout", "--progress", "off",
                 "--results-dir", str(tmp_path / "results")]) == 0
    assert "then: parbench predict" in capsys.readouterr().err
    [run] = (tmp_path / "results").iterdir()
    records = json.loads((run / "records.json").read_text())
    assert [r["strategy_options"].get("accumulation_split") for r in records] == [None, 2]
    assert {r["predictor_version"] for r in records} == {PREDICTOR_VERSION}
    table = pd.read_csv(run / "predictions.csv")
    assert set(table["predictor_version"]) == {PREDICTOR_VERSION}
    assert table["naive_error"].notna().all()
    assert json.loads((run / "prediction.json").read_text()) == {
        "link": "pcie4", "predictor_version": PREDICTOR_VERSION,
        "fingerprint": version.fingerprint()}
    assert sorted(p.name for p in (run / "profiles").iterdir()) == [
        "resnet18-32px-1000cls-fp32-cpu-1t-b2.json", "resnet18-32px-1000cls-fp32-cpu-1t-b4.json"]


def test_a_space_that_cannot_fill_a_workload_is_refused():
    with pytest.raises(ValueError, match="only 1 of 4 configurations could be drawn"):
        held_out.draw(SPACE, 3, lambda point: False)


def test_a_pair_the_model_predicts_equal_is_ordered_neither_way():
    table = pd.DataFrame([
        _row("single", [1.0, 1.02, 0.99], 1.0, devices="cpu"),
        _row("single", [2.0, 2.05, 1.98], 1.0, devices="cpu"),  # decided, predicted the same
    ])
    result = ranking(table)
    assert (result.decided, result.ordered, result.tied, result.tau) == (1, 0, 1, 0.0)
    assert "1 given the same step" in result.describe()


@pytest.mark.parametrize("flags, named", [
    (["--model", "resnet50"], "--model"),
    (["--batch-size", "8", "--strategy", "ddp"], "--batch-size, --strategy"),
    (["--split-size", "4"], "--split-size"),
])
def test_a_flag_the_draw_sets_is_refused_beside_it(flags, named, capsys):
    assert main(["run", "--experiment", "prediction-holdout", *flags]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"parbench: error: {named}: the prediction-holdout experiment draws "
                           "these from its space (parbench/experiments/prediction-holdout.json);"
                           " give --seed S for another draw, or run without --experiment")


def test_a_seed_drawn_before_is_refused(tmp_path, capsys):
    drawn = tmp_path / "20261125T000000Z-prediction-holdout"
    drawn.mkdir()
    (drawn / "command.json").write_text(json.dumps({"experiment": "prediction-holdout",
                                                    "seed": 0}))
    assert main(["run", "--experiment", "prediction-holdout", "--results-dir",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"parbench: error: --seed 0: {drawn} drew this set already")


def test_predictions_of_other_models_are_kept_not_made_again(tmp_path):
    current = {"predictor_version": PREDICTOR_VERSION, "fingerprint": version.fingerprint()}
    assert stale_models(current) is None
    assert "made by version 0 of the models" in stale_models({**current,
                                                               "predictor_version": 0})
    assert "bump PREDICTOR_VERSION" in stale_models({**current, "fingerprint": "other"})
    for name in ("predictions.csv", "predictions.png", "ranking.svg", "prediction.json",
                 "predicted-timeline-001-pipeline.png", "records.json",
                 "peak-memory-by-device.png"):
        (tmp_path / name).write_text("")
    assert [path.name for path in kept_files(tmp_path)] == [
        "predicted-timeline-001-pipeline.png", "prediction.json", "predictions.csv",
        "predictions.png", "ranking.svg"]
