"""The GPU reference steps parbench ships are what the GPU runs under results/ measured."""

import json
from pathlib import Path

import pytest

from parbench.advisor.carried.gpu_references import REFERENCES

RESULTS = Path(__file__).resolve().parents[3] / "results"


@pytest.mark.parametrize("reference", REFERENCES, ids=lambda r: f"{r.gpu} {r.precision} {r.run}")
def test_each_reference_is_its_runs_record(reference):
    [record] = [r for r in json.loads((RESULTS / reference.run / "records.json").read_text())
                if r["status"] == "ok" and r["strategy"] == "single"
                and r["precision"] == reference.precision
                and r["channels_last"] == reference.channels_last
                and bool(r.get("cudnn_benchmark")) == reference.cudnn_benchmark
                and not r["compile"]]
    assert record["gpu_names"] == reference.gpu and record["model"] == reference.model
    assert (record["image_size"], record["global_batch"]) == (reference.image_size,
                                                               reference.batch)
    assert record["step_time_median_s"] == pytest.approx(reference.step_s, abs=1e-6)
    host = record.get("host_time_median_s")
    assert reference.host_s == (None if host is None else pytest.approx(host, abs=1e-6))
    assert record["torch_version"] == reference.torch
    assert record["throughput_ips"] == pytest.approx(reference.measured_ips, abs=0.05)
