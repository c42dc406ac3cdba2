"""The projected DDP step: the ring all-reduce model, and `parbench project` on a run folder,
labelled projected and checked against the measured step."""

import pytest

from parbench.cli import main
from parbench.projection import measured_busbw_gbps, project, ring_allreduce_s
from parbench.record import Record
from parbench.results import RunFolder


def _ddp(strategy: str = "ddp", **fields) -> Record:
    return Record(status="ok", strategy=strategy, strategy_options={"world_size": 2},
                  model="resnet18", image_size=32, global_batch=16, precision="fp32",
                  devices="cpu,cpu", physical_devices="cpu", device_kind="cpu", emulated=True,
                  world_size=2, backend="gloo", throughput_ips=16.0, step_time_median_s=1.0,
                  compute_time_s=0.6, exposed_comm_time_s=0.4, exposed_comm_fraction=0.4,
                  allreduce_bytes=10**9, **fields)


def test_a_ring_all_reduce_carries_2_n_minus_1_over_n_of_the_bytes_per_link():
    assert ring_allreduce_s(10**9, 1, 10.0) == 0.0
    assert ring_allreduce_s(10**9, 2, 10.0) == pytest.approx(0.1)
    assert ring_allreduce_s(10**9, 8, 10.0) == pytest.approx(0.175)


def test_a_projection_adds_the_all_reduce_to_compute_or_hides_it_behind():
    import pandas as pd

    row = project(pd.Series(_ddp().to_dict()), ranks=8, link="pcie4", busbw_gbps=10.0)
    assert row["kind"] == "projected" and row["batch_per_rank"] == 8
    assert row["step_no_overlap_s"] == pytest.approx(0.775)
    assert row["step_full_overlap_s"] == pytest.approx(0.6)
    assert row["efficiency_no_overlap"] == pytest.approx(0.6 / 0.775)
    assert row["throughput_full_overlap_ips"] == pytest.approx(64 / 0.6)
    rows = [dict(collective="all_reduce", size_bytes=10**9, time_s=0.5, world_size=2,
                 backend="gloo", devices="cpu,cpu")]
    assert measured_busbw_gbps(rows, pd.Series(_ddp().to_dict())) == pytest.approx(2.0)


def test_project_writes_a_projection_apart_and_checks_it_against_the_measured_step(
        tmp_path, capsys):
    folder = RunFolder.create(tmp_path)
    folder.write_records([_ddp()])
    folder.write_collectives([dict(collective="all_reduce", size_bytes=10**9, time_s=0.5,
                                   world_size=2, backend="gloo", devices="cpu,cpu")])
    assert main(["project", str(folder.path), "--ranks", "2,4", "--link", "measured,25"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PROJECTED")
    # At its own 2 ranks on the measured link: 0.6 s + 0.5 s = 1.1 s, the step was 1.0 s.
    assert ("measured step 1.000 s; projected 1.100 s with no overlap (+10%), 0.600 s with "
            "full overlap (-40%)") in out
    projection = (folder.path / "projection.csv").read_text()
    assert projection.count("projected") == 4  # 2 links x 2 rank counts, each labelled
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
    assert main(["project", str(folder.path), "--link", link]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_project_picks_records_by_what_the_strategy_does_not_its_name(tmp_path, capsys,
                                                                     monkeypatch):
    import strategies
    from strategies.ddp import DDP

    # A ddp variant under another name is projected; a strategy that does not all-reduce its
    # gradients, though its record carries the same fields, is not.
    monkeypatch.setitem(strategies.REGISTRY, "ddp-variant",
                        strategies.Entry(DDP, "#000000", "x", {}))
    folder = RunFolder.create(tmp_path)
    folder.write_records([_ddp(), _ddp(strategy="ddp-variant"), _ddp(strategy="fsdp")])
    assert main(["project", str(folder.path), "--ranks", "4", "--link", "25"]) == 0
    projection = (folder.path / "projection.csv").read_text()
    assert "ddp-variant" in projection and "fsdp" not in projection
    assert strategies.allreduces_gradients("ddp-variant")
    assert not strategies.allreduces_gradients("fsdp")
    assert not strategies.allreduces_gradients("retired-name")
