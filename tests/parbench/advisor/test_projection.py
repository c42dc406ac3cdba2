"""`parbench project`, predict's ddp case on a run's own records: the ring all-reduce, the
bucketed overlap on the measured compute, and the command on a run folder, labelled predicted
and checked against the measured step."""

import pandas as pd
import pytest

from parbench.advisor.models.links import Link, ring_allreduce_s
from parbench.advisor.models.projection import project
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.cli import main
from parbench.results.collectives import measured_busbw_gbps
from parbench.results.folder import RunFolder
from parbench.results.record import Record
from tests.support import ok_record

# Two blocks whose backward takes 1 s each; 10^9 gradient bytes, half in each block.
SHAPE = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 8, 1, tuple(
    BlockProfile(name, 0.5, 0.5, 0.5, 0, (5 * 10**8,), 0) for name in ("stem", "head")))


def _ddp(strategy: str = "ddp", **fields) -> Record:
    return ok_record(strategy, strategy_options={"world_size": 2}, global_batch=16,
                     devices="cpu,cpu", physical_devices="cpu", emulated=True, world_size=2,
                     backend="gloo", throughput_ips=16.0, step_time_median_s=1.0,
                     compute_time_s=0.6, exposed_comm_time_s=0.4, exposed_comm_fraction=0.4,
                     allreduce_bytes=10**9, **fields)


def test_a_ring_all_reduce_carries_2_n_minus_1_over_n_of_the_bytes_per_link():
    assert ring_allreduce_s(10**9, 1, 10.0) == 0.0
    assert ring_allreduce_s(10**9, 2, 10.0) == pytest.approx(0.1)
    assert ring_allreduce_s(10**9, 8, 10.0) == pytest.approx(0.175)


def test_a_prediction_overlaps_the_buckets_with_backward_between_its_bounds():
    record = pd.Series(_ddp().to_dict())  # 0.6 s compute, 10^9 gradient bytes
    row = project(record, ranks=8, link=Link("pcie4", 10.0), profile=SHAPE)
    assert row["kind"] == "predicted" and row["batch_per_rank"] == 8
    assert row["step_no_overlap_s"] == pytest.approx(0.775)  # 0.6 + 0.175
    assert row["step_full_overlap_s"] == pytest.approx(0.6)
    # Scaled to 0.6 s: forward 0.2 s, each block's backward 0.2 s. The head's 5 x 10^8 bytes
    # (one bucket) go at 0.2 s into backward and take 0.0875 s, done before the stem's bucket
    # is ready at 0.4 s, which ends at 0.4875 s: the step is 0.2 + 0.4875 s.
    assert row["predicted_step_time_s"] == pytest.approx(0.6875)
    assert row["efficiency"] == pytest.approx(0.6 / 0.6875)
    assert row["throughput_ips"] == pytest.approx(64 / 0.6875)
    free = project(record, ranks=8, link=Link("free", float("inf")), profile=SHAPE)
    assert free["predicted_step_time_s"] == pytest.approx(0.6)  # nothing left to hide
    rows = [dict(collective="all_reduce", size_bytes=10**9, time_s=0.5, world_size=2,
                 backend="gloo", devices="cpu,cpu")]
    assert measured_busbw_gbps(rows, record) == pytest.approx(2.0)


def test_project_writes_a_projection_apart_and_checks_it_against_the_measured_step(
        tmp_path, capsys):
    folder = RunFolder.create(tmp_path)
    folder.write_records([_ddp()])
    folder.write_collectives([dict(collective="all_reduce", size_bytes=10**9, time_s=0.5,
                                   world_size=2, backend="gloo", devices="cpu,cpu")])
    assert main(["project", str(folder.path), "--ranks", "2,4", "--link", "measured,25",
                 "--profile-cache", str(tmp_path / "profiles")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PREDICTED")
    # At its own 2 ranks on the measured link: 0.6 s + 0.5 s = 1.1 s with no overlap, the
    # compute's 0.6 s with full; the step was 1.0 s.
    assert "measured step 1.000 s; predicted " in out
    assert "between 0.600 s (full overlap) and 1.100 s (none)" in out
    projection = pd.read_csv(folder.path / "projection.csv")
    assert list(projection["kind"]) == ["predicted"] * 4  # 2 links x 2 rank counts
    assert projection["predicted_step_time_s"].between(
        projection["step_full_overlap_s"], projection["step_no_overlap_s"]).all()
    assert (folder.path / "projection.png").is_file()
    assert len(folder.read_records()) == 1  # the records are left as measured


@pytest.mark.parametrize("link, records, message", [
    ("fibre", True, "--link 'fibre': give measured, nvlink4"),
    ("measured", True, "--link measured needs collectives"),
    ("pcie4", False, "has no ddp record with compute_time_s"),
    ("elsewhere", True, "were measured on other devices, ranks or backend"),
])
def test_bad_projection_input_is_one_line_and_exit_2(tmp_path, capsys, link, records, message):
    folder = RunFolder.create(tmp_path)
    folder.write_records([_ddp()] if records else [])
    if link == "elsewhere":  # collectives of 4 ranks, beside 2-rank records
        link = "measured"
        folder.write_collectives([dict(collective="all_reduce", size_bytes=10**9, time_s=0.5,
                                       world_size=4, backend="gloo", devices="cpu,cpu,cpu,cpu")])
    assert main(["project", str(folder.path), "--link", link,
                 "--profile-cache", str(tmp_path / "profiles")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_project_picks_records_by_what_the_strategy_does_not_its_name(tmp_path, capsys,
                                                                     monkeypatch):
    from parbench import strategies
    from parbench.strategies.ddp import DDP

    # A ddp variant under another name is projected; a strategy that does not all-reduce its
    # gradients, though its record carries the same fields, is not.
    monkeypatch.setitem(strategies.REGISTRY, "ddp-variant",
                        strategies.Entry(DDP, {}))
    folder = RunFolder.create(tmp_path)
    folder.write_records([_ddp(), _ddp(strategy="ddp-variant"), _ddp(strategy="fsdp")])
    assert main(["project", str(folder.path), "--ranks", "4", "--link", "25",
                 "--profile-cache", str(tmp_path / "profiles")]) == 0
    projection = (folder.path / "projection.csv").read_text()
    assert "ddp-variant" in projection and "fsdp" not in projection
    assert strategies.allreduces_gradients("ddp-variant")
    assert not strategies.allreduces_gradients("fsdp")
    assert not strategies.allreduces_gradients("retired-name")
