import json
import os

import pandas as pd
import pytest

from parbench.results.folder import RunFolder, load_records
from parbench.results.record import FIELDS, Record
from tests.support import ok_record


def _records():
    ok = ok_record(run_id="r", config_index=0, throughput_ips=123.5, step_times_s=[0.1, 0.2],
                   peak_memory_mib=[900.0, 300.0], emulated=True,
                   environment={"torch_version": "x"})
    failed = Record(run_id="r", config_index=1, status="error", strategy="single",
                    reason="RuntimeError: boom", environment={"torch_version": "x"})
    return [ok, failed]


def test_records_have_every_field_then_the_environment_and_refuse_unknown_fields():
    [ok, _] = _records()
    assert list(ok.to_dict()) == [*FIELDS, "torch_version"]
    assert Record.from_dict(ok.to_dict()) == ok
    with pytest.raises(TypeError, match="thruput"):
        Record(thruput=1)


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


def test_without_git_the_commit_is_the_one_the_copier_names(monkeypatch):
    """A copy without .git (a GPU host's) carries the commit in $PARBENCH_COMMIT."""
    from parbench.machine import environment

    monkeypatch.setattr(environment, "_run", lambda command, cwd=None: None)  # no git
    monkeypatch.delenv("PARBENCH_COMMIT", raising=False)
    assert environment._git_commit() == "unknown"
    monkeypatch.setenv("PARBENCH_COMMIT", "0123abc")
    assert environment._git_commit() == "0123abc"


def test_a_runs_environment_reads_back_or_is_empty(tmp_path):
    folder = RunFolder(tmp_path)
    assert folder.read_environment() == {}  # none written
    folder.write_environment({"cpu_model": "c", "cpu_cores_available": 2})
    assert folder.read_environment() == {"cpu_model": "c", "cpu_cores_available": 2}
    (tmp_path / "env.json").write_text("{not json")
    assert folder.read_environment() == {}


def test_records_json_is_one_record_a_line_and_reads_back(tmp_path):
    from parbench.results.folder import records_json

    rows = [{"strategy": "single", "step_times_s": [0.1, 0.2], "timeline": [[0, 0, "F", 0, 1]]},
            {"strategy": "ddp", "step_times_s": [0.3], "timeline": None}]
    text = records_json(rows)
    assert json.loads(text) == rows
    assert text.splitlines()[1:3] == [json.dumps(rows[0]) + ",", json.dumps(rows[1])]
    assert json.loads(records_json([])) == []
