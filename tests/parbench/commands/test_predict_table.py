"""parbench predict --table: published tables' rows PREDICTED into a CSV, refusals in a line."""

import json

import pandas as pd

from parbench.cli import main


def _write(tmp_path, name, **changes):
    values = {"name": name, "source": "made up", "gpu": "NVIDIA H100 80GB HBM3",
              "model": "resnet50", "image_size": 224, "precision": "bf16",
              "channels_last": True, "strategy": "ddp",
              "link": {"name": "nvlink", "busbw_gbps": 100, "latency_us": 3, "source": "made up"},
              "data": {"kind": "jpeg-cpu", "host_cores": 32, "workers_per_device": 4,
                       "source": "made up"},
              "rows": [{"devices": 1, "batch_per_device": 64},
                       {"devices": 2, "batch_per_device": 64}]}
    values.update(changes)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(values))
    return path


def test_each_row_is_predicted_into_the_csv_with_the_host_cap_said(tmp_path, capsys):
    setup, out = _write(tmp_path, "made-up"), tmp_path / "table.csv"
    assert main(["predict", "--table", str(setup), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("PREDICTED (no published figure is an input; where each row's")
    assert "the input pipeline is not counted: a setup decodes JPEGs on its host" in printed
    table = pd.read_csv(out)
    assert list(table["row"]) == ["1 GPU, 64 each", "2 GPUs, 64 each"]
    assert (table["kind"] == "PREDICTED").all() and table["loader_cap_ips"].isna().all()
    loader = tmp_path / "loader.json"
    runs = [{"workers": 1, "images_per_s_median": 12.0},
            {"workers": 2, "images_per_s_median": 20.0}]
    loader.write_text(json.dumps({"data_loader": {"runs": runs}}))  # a worker: 20 / 2
    assert main(["predict", "--table", str(setup), "--loader", str(loader), "--csv",
                 str(out)]) == 0
    assert list(pd.read_csv(out)["loader_cap_ips"]) == [40.0, 80.0]


def test_a_bad_table_or_loader_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = _write(tmp_path, "bad", precision="fp8")
    assert main(["predict", "--table", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown precision 'fp8'" in err[0]
    loader = tmp_path / "loader.json"
    loader.write_text("{}")
    good = _write(tmp_path, "good")
    assert main(["predict", "--table", str(good), "--loader", str(loader)]) == 2
    assert "not a file parbench loader --into wrote" in capsys.readouterr().err


def test_flags_a_setup_says_for_itself_are_refused_beside_it(tmp_path, capsys):
    setup = _write(tmp_path, "made-up")
    for extra, named in ((["--devices", "8"], "--devices"), (["--link", "pcie4"], "--link")):
        assert main(["predict", "--table", str(setup), *extra]) == 2
        assert named in capsys.readouterr().err
    assert main(["predict", "--devices", "2", "--batch-size", "8", "--loader", "x.json"]) == 2
    assert "--loader: for --table FILE" in capsys.readouterr().err
    loader = tmp_path / "none.json"
    loader.write_text(json.dumps({"data_loader": {"runs": [{"workers": 0,
                                                              "images_per_s_median": 5.0}]}}))
    assert main(["predict", "--table", str(setup), "--loader", str(loader)]) == 2
    assert "ran no worker process" in capsys.readouterr().err
