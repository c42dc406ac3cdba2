import json
import os

import pandas as pd
import pytest

from parbench.results import FIELDS, RunFolder, load_records, new_record


def _records():
    ok = new_record(run_id="r", config_index=0, status="ok", strategy="single",
                    strategy_options={}, throughput_ips=123.5, step_times_s=[0.1, 0.2],
                    peak_memory_mib=[900.0, 300.0], emulated=True)
    failed = new_record(run_id="r", config_index=1, status="error", strategy="single",
                        reason="RuntimeError: boom")
    return [{**ok, "torch_version": "x"}, {**failed, "torch_version": "x"}]


def test_records_have_every_field_and_refuse_unknown_ones():
    assert list(new_record()) == list(FIELDS)
    with pytest.raises(KeyError, match="not record fields"):
        new_record(thruput=1)


@pytest.mark.parametrize("filename", ["records.json", "records.csv"])
def test_records_round_trip_through_both_files(tmp_path, filename):
    folder = RunFolder.create(tmp_path, tag="t")
    folder.write_records(_records())
    frame = load_records(folder.path / filename)
    assert list(frame["status"]) == ["ok", "error"]
    assert frame.loc[0, "throughput_ips"] == 123.5
    assert frame.loc[0, "step_times_s"] == [0.1, 0.2]
    assert frame.loc[0, "peak_memory_mib"] == [900.0, 300.0]
    assert frame.loc[1, "reason"] == "RuntimeError: boom"
    assert bool(frame.loc[0, "emulated"]) is True


def test_run_folder_holds_only_complete_files(tmp_path):
    folder = RunFolder.create(tmp_path)
    folder.write_environment({"host": "h"})
    folder.write_records(_records())
    assert sorted(os.listdir(folder.path)) == ["env.json", "records.csv", "records.json"]
    assert json.loads((folder.path / "env.json").read_text()) == {"host": "h"}
    assert len(pd.read_csv(folder.path / "records.csv")) == 2


def test_two_runs_in_the_same_second_get_distinct_folders(tmp_path):
    first, second = RunFolder.create(tmp_path, "x"), RunFolder.create(tmp_path, "x")
    assert first.path != second.path


def test_unwritable_results_dir_raises_before_anything_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError):
        RunFolder.create(blocker / "results")
