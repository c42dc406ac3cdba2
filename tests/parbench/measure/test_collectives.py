"""`parbench collectives`: nccl-tests' bandwidth definitions, message sizes, and a measured
run on two CPU ranks (gloo) written as rows and a figure."""

import json

import pytest

from parbench.cli import main
from parbench.commands.arguments import UsageError
from parbench.commands.collectives import message_sizes, parse_size
from parbench.measure.collectives import bus_bandwidth, interpolated_time_s
from parbench.results.folder import RunFolder
from tests.support import ok_record


def test_bus_bandwidth_follows_nccl_tests():
    # 1 GB in 0.5 s on 4 ranks: algbw 2 GB/s; all-reduce's links carry 2(n-1)/n of it.
    assert bus_bandwidth("all_reduce", 10**9, 0.5, 4) == pytest.approx((2.0, 3.0))
    assert bus_bandwidth("all_gather", 10**9, 0.5, 4) == pytest.approx((2.0, 1.5))
    assert bus_bandwidth("reduce_scatter", 10**9, 0.5, 2) == pytest.approx((2.0, 1.0))


def test_sizes_are_parsed_and_stepped_by_the_factor():
    assert parse_size("--min-size", "4KiB") == 4096 and parse_size("--max-size", "2M") == 2**21
    assert parse_size("--min-size", "64") == 64
    assert message_sizes(4096, 2**20, 4) == [4096, 16384, 65536, 262144, 1048576]
    with pytest.raises(UsageError, match="is not a size"):
        parse_size("--min-size", "4 parsecs")
    with pytest.raises(UsageError, match="--max-size .* is below --min-size"):
        message_sizes(4096, 1024, 4)


def test_a_time_between_measured_sizes_is_interpolated_in_bandwidth():
    rows = [dict(collective="all_reduce", size_bytes=1000, time_s=1.0),   # 1000 B/s
            dict(collective="all_reduce", size_bytes=100000, time_s=50.0)]  # 2000 B/s
    assert interpolated_time_s(rows, "all_reduce", 10000) == pytest.approx(10000 / 1500)
    assert interpolated_time_s(rows, "all_reduce", 10**7) == pytest.approx(10**7 / 2000)
    assert interpolated_time_s(rows, "all_gather", 10000) is None


@pytest.mark.timeout(180)
def test_collectives_on_two_cpu_ranks_write_rows_and_a_figure(tmp_path, capsys, child_pids):
    status = main(["collectives", "--devices", "cpu,cpu", "--max-size", "16KiB",
                   "--iterations", "2", "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 0, err
    [folder] = [p for p in tmp_path.iterdir() if p.name.endswith("-collectives")]
    rows = json.loads((folder / "collectives.json").read_text())
    assert [(r["collective"], r["size_bytes"]) for r in rows] == [
        (name, size) for name in ("all_reduce", "all_gather", "reduce_scatter")
        for size in (4096, 16384)]
    for row in rows:
        assert row["time_s"] > 0 and row["backend"] == "gloo" and row["world_size"] == 2
        factor = 1.0 if row["collective"] == "all_reduce" else 0.5  # 2(n-1)/n, (n-1)/n
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor)
        assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
    assert (folder / "collectives.csv").is_file()
    assert (folder / "collective-bandwidth-by-size.png").is_file()
    assert "busbw = algbw x 2(n-1)/n for all-reduce" in out
    assert child_pids() == []


def test_collectives_into_a_run_measure_every_group_size_and_keep_the_others(tmp_path,
                                                                              capsys):
    # A 3-device run's pipelines send between 2 ranks, its ddp all-reduces over 3: --into
    # measures both, and keeps the rows of a group it did not measure (here a made-up 4).
    folder = RunFolder.create(tmp_path, "run")
    folder.write_command({})
    kept = {"collective": "all_reduce", "size_bytes": 4096, "time_s": 1e-3, "world_size": 4,
            "backend": "gloo", "devices": "cpu,cpu,cpu,cpu", "algbw_gbps": 0.0041,
            "busbw_gbps": 0.0061, "device_kind": "cpu", "emulated": True, "iterations": 1,
            "warmup": 0}
    folder.write_collectives([kept])
    status = main(["collectives", "--devices", "cpu,cpu,cpu", "--max-size", "4KiB",
                   "--collective", "all_reduce,all_gather", "--iterations", "1",
                   "--into", str(folder.path)])
    out, err = capsys.readouterr()
    assert status == 0, err
    rows = folder.read_collectives()
    assert sorted({(r["world_size"], r["devices"]) for r in rows}) == [
        (2, "cpu,cpu"), (3, "cpu,cpu,cpu"), (4, "cpu,cpu,cpu,cpu")]
    assert rows[0] == kept and len(rows) == 1 + 2 * 2
    assert "2, 3 ranks on cpu,cpu,cpu" in out


def test_collectives_into_a_run_default_to_the_most_devices_it_used(tmp_path, capsys):
    # Without --devices, a run of 2 and 3 devices needs 2- and 3-rank groups: both measured
    # (the default devices elsewhere, cpu,cpu, would leave its 3-rank ddp unpredicted).
    folder = RunFolder.create(tmp_path, "run")
    folder.write_command({"devices": ["cpu,cpu", "cpu,cpu,cpu"]})
    status = main(["collectives", "--max-size", "4KiB", "--collective", "all_reduce",
                   "--iterations", "1", "--into", str(folder.path)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert sorted({r["world_size"] for r in folder.read_collectives()}) == [2, 3]
    assert "2, 3 ranks on cpu,cpu,cpu" in out


def test_collectives_into_read_the_devices_from_the_records_where_there_are_some(tmp_path,
                                                                                 capsys):
    # The records win over the command: 3 devices recorded (one record saying none), 2 asked.
    folder = RunFolder.create(tmp_path, "run")
    folder.write_command({"devices": ["cpu,cpu"]})
    folder.write_records([ok_record(devices="cpu,cpu,cpu"), ok_record(devices=None),
                          ok_record("ddp", devices="cpu,cpu")])
    status = main(["collectives", "--max-size", "4KiB", "--collective", "all_reduce",
                   "--iterations", "1", "--into", str(folder.path)])
    assert status == 0, capsys.readouterr().err
    assert sorted({r["world_size"] for r in folder.read_collectives()}) == [2, 3]


def test_collectives_into_a_run_of_one_device_say_where_the_devices_came_from(tmp_path,
                                                                               capsys):
    folder = RunFolder.create(tmp_path, "run")
    folder.write_records([ok_record(devices="cpu")])
    assert main(["collectives", "--into", str(folder.path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "got cpu (the most devices" in err and "records used); e.g. --devices" in err


@pytest.mark.parametrize("argv, message", [
    (["--devices", "cpu"], "collectives need at least 2 devices, got cpu"),
    (["--min-size", "2"], "--min-size must be at least 4 bytes"),
    (["--collective", "broadcast"], "unknown collective 'broadcast'; available: all_reduce"),
    (["--factor", "1"], "--factor must be at least 2, got 1"),
    (["--into", "/no/such/run"], "is not a run folder"),
])
def test_bad_collectives_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["collectives", "--devices", "cpu,cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_the_communication_figure_draws_the_ideal_ddp_step_from_measured_bandwidth():
    import dataclasses

    import matplotlib.pyplot as plt
    import pandas as pd

    from parbench import plots

    record = ok_record("ddp", strategy_options={"world_size": 2}, devices="cpu,cpu",
                       physical_devices="cpu", emulated=True, world_size=2, backend="gloo",
                       step_time_median_s=1.0, compute_time_s=0.6, exposed_comm_time_s=0.4,
                       exposed_comm_fraction=0.4, allreduce_bytes=10**6)
    rows = [dict(collective="all_reduce", size_bytes=10**6, time_s=0.5, world_size=2,
                 backend="gloo", devices="cpu,cpu")]
    fig = plots.plot_communication(pd.DataFrame([dataclasses.asdict(record)]), rows)
    lines = [c for c in fig.axes[0].collections if c.get_label().startswith("ideal")]
    heights = sorted(c.get_segments()[0][0][0] for c in lines)  # vertical, at the step time
    assert heights == pytest.approx([0.6, 1.1])  # full overlap: max(0.6, 0.5); none: 0.6 + 0.5
    plt.close(fig)
