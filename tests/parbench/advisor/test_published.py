"""Every measured record of a run is predicted or named with why (predictions.csv, the
printed summary, the run's README)."""

import pandas as pd

from parbench.advisor.models.links import MeasuredLink
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.published import NOT_COVERED, left_out
from parbench.advisor.runs.summary import left_out_summary, left_rows, predicted_rows

MIB = 2**20
BLOCKS = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=MIB, parameter_sizes=(MIB,),
                            saved_bytes=2 * MIB) for name in ("stem", "a", "b", "head"))
PROFILE = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 4, 3, BLOCKS)
# Collectives measured on 2 ranks only, as `collectives --devices cpu,cpu` writes them.
TWO_RANKS = MeasuredLink("measured in run", tuple(
    {"collective": name, "size_bytes": size, "time_s": size / 1e9, "world_size": 2,
     "backend": "gloo"} for name in ("all_reduce", "all_gather", "reduce_scatter")
    for size in (4096, 2**24)), "gloo")


def _record(index: int, strategy: str, ranks: int, **fields) -> dict:
    return {**dict(config_index=index, status="ok", strategy=strategy, world_size=ranks,
                   global_batch=32, micro_batches=1, split_size=None, compile=False,
                   strategy_options={}, device_kind="cpu", emulated=True,
                   threads_per_device=1, devices=",".join(["cpu"] * ranks)), **fields}


def test_a_record_the_models_cannot_predict_is_named_with_why():
    records = pd.DataFrame([_record(0, "single", 1), _record(1, "ddp", 3),
                            _record(2, "data-parallel", 2), _record(3, "single", 1,
                                                                   compile=True)])
    predicted = pd.DataFrame({"config_index": [0]})
    left = left_out(records, predicted, lambda record: lambda size: PROFILE, TWO_RANKS)
    assert list(left["config_index"]) == [1, 2, 3]
    why = dict(zip(left["config_index"], left["not_predicted"], strict=True))
    assert "no 3-rank all_reduce was measured" in why[1]
    assert "parbench collectives" in why[1]
    assert why[2] == why[3] == NOT_COVERED


def test_the_left_out_rows_of_predictions_csv_are_told_apart_and_summarised():
    table = pd.DataFrame([{"strategy": "single", "world_size": 1, "prediction_error": 0.1,
                           "not_predicted": None},
                          {"strategy": "ddp", "world_size": 3, "prediction_error": None,
                           "not_predicted": "no 3-rank all_reduce was measured"}])
    assert list(predicted_rows(table)["strategy"]) == ["single"]
    left = left_rows(table)
    assert left_out_summary(left) == ("not predicted, 1 measured configuration: ddp on 3 "
                                      "ranks: no 3-rank all_reduce was measured")
    assert left_out_summary(left.iloc[0:0]) is None
    # predictions.csv written before this column: every row a prediction
    assert predicted_rows(table.drop(columns="not_predicted")).equals(
        table.drop(columns="not_predicted"))
