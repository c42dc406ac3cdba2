"""`parbench plot` and `parbench report`: files written from results, the index kept, and
results that are not parbench's refused in one line."""

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from parbench.cli import main
from parbench.reporting.report import INDEX_BEGIN, INDEX_END
from tests.support import TINY_FLAGS


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A small sweep measured once for the module's tests (each gets a copy of its folder)."""
    results = tmp_path_factory.mktemp("measured") / "results"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["run", "--strategy", "single,pipeline", "--devices", "cpu,cpu",
                       *TINY_FLAGS, "--batch-size", "8", "--split-size", "2,4", "--steps", "1",
                       "--warmup", "0", "--results-dir", str(results), "--progress", "off"])
    assert status == 0
    [folder] = results.iterdir()
    return folder


@pytest.fixture
def run_folder(measured, tmp_path) -> Path:
    """The measured run folder, copied into a results folder of this test's own."""
    return Path(shutil.copytree(measured, tmp_path / "results" / measured.name))


def test_plot_writes_the_figures_into_the_run_folder(run_folder, capsys):
    assert main(["plot", str(run_folder)]) == 0
    names = {p.name for p in run_folder.iterdir()}
    assert {"throughput-by-strategy.png", "throughput-by-strategy.svg",
            "peak-memory-by-device.png", "speedup-by-micro-batch.png",
            "speedup-by-micro-batch.svg"} <= names


def test_report_writes_the_run_readme_and_indexes_runs_keeping_hand_written_text(
        run_folder, capsys):
    index = run_folder.parent / "README.md"
    index.write_text(f"# results\n\nnotes above\n\n{INDEX_BEGIN}\nold\n{INDEX_END}\n\nbelow\n")
    assert main(["report", str(run_folder)]) == 0
    readme = (run_folder / "README.md").read_text()
    assert "**Emulated devices**" in readme
    assert "![throughput-by-strategy](throughput-by-strategy.png)" in readme
    # The columns the record declares for the README, headed and ordered as it declares them.
    assert ("| strategy | model | batch | status | precision | channels last | compiled | M | "
            "devices | img/s | MFU | median step s | p90 step s | speedup | = micro-batch | "
            "x parallel | efficiency | scaling | peak MiB | mem max/mean | GPU util % | "
            "img/J |") in readme
    assert "| pipeline (K=2, cut=tutorial, split=2) | resnet18 | 8 | ok | fp32 | no | no | 4 | " \
           "cpu,cpu |" in readme
    assert "| torch |" in readme
    text = index.read_text()
    assert text.startswith("# results\n\nnotes above") and text.endswith("below\n")
    assert "old" not in text
    assert f"[{run_folder.name}]({run_folder.name}/README.md)" in text
    assert "| 5 / 5 |" in text  # single whole and accumulating each split; the pipelines
    # The fastest configuration is named with its workload: runs' workloads differ, so a bare
    # img/s would compare unlike with unlike across the index.
    assert "| fastest (img/s), on its run's workload |" in text
    assert re.search(r"\| [\d.]+ img/s: (single|pipeline) on cpu(,cpu)?; "
                     r"resnet18, batch 8, 32 px \|",
                     text)


def test_pytest_benchmark_json_can_be_plotted(run_folder, tmp_path, capsys):
    records = json.loads((run_folder / "records.json").read_text())
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"machine_info": {}, "benchmarks": [
        {"name": r["strategy"], "extra_info": {"record": r}} for r in records]}))
    assert main(["plot", str(bench), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "throughput-by-strategy.png").is_file()


def test_a_report_into_another_folder_reads_the_environment_from_the_records(run_folder,
                                                                              tmp_path):
    """`report RUN --out DIR`: DIR has no env.json, so the environment table comes from the
    records (lists among them, such as the devices' names), as env.json would give it."""
    out = tmp_path / "report"
    assert main(["report", str(run_folder), "--out", str(out), "--index", str(tmp_path)]) == 0
    readme = (out / "README.md").read_text()
    assert "## Environment" in readme and "| torch |" in readme
    assert not (out / "env.json").exists()


@pytest.mark.parametrize("content, name, message", [
    ("{not json", "records.json", "is not valid JSON"),
    ('{"a": 1}', "records.json", "holds no parbench records"),
    ('{"benchmarks": [{"name": "x", "extra_info": {}}]}', "bench.json",
     "pytest-benchmark output without parbench records"),
    ("a,b\n1,2\n", "records.csv", "holds no parbench records (missing strategy"),
    ("\x00\x01\x02", "records.csv", "holds no parbench records"),
    ("[]", "records.json", "holds no parbench records (missing"),
    ("x", "results.txt", "expected a run folder, records.json, records.csv"),
])
@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_corrupt_or_foreign_file_is_one_line_and_exit_2(tmp_path, capsys, command, content,
                                                         name, message):
    path = tmp_path / name
    path.write_text(content)
    assert main([command, str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert message in err


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_missing_path_or_empty_folder_is_refused(tmp_path, capsys, command):
    assert main([command, str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main([command, str(tmp_path)]) == 2
    assert "has no records.json" in capsys.readouterr().err


def test_gpu_records_show_their_mfu_and_its_convention(run_folder, capsys):
    # What a GPU record of a known device carries (measure.flops): its peak and MFU.
    from dataclasses import replace

    from parbench.reporting.answers import results_table
    from parbench.results.folder import RunFolder, load_records

    folder = RunFolder.open(run_folder)
    records = [replace(r, peak_tflops=989.0, mfu=0.123) if r.ok else r
               for r in folder.read_records()]
    folder.write_records(records)
    assert main(["report", str(run_folder)]) == 0
    readme = (run_folder / "README.md").read_text()
    assert "| MFU |" in readme and "| 0.123 |" in readme
    assert "2 FLOPs per multiply-accumulate" in readme
    header = results_table(load_records(run_folder), wide=True).splitlines()[0].split()
    assert header[header.index("img/s") + 1] == "MFU"


def test_the_readme_names_the_host_bound_gpu_configurations(run_folder):
    # What GPU records carry (measure.timing.host_bound): the pipeline's host time close to
    # its step, single's well under it.
    from dataclasses import replace

    from parbench.results.folder import RunFolder

    folder = RunFolder.open(run_folder)
    records = [replace(r, device_kind="cuda", host_bound=r.strategy == "pipeline",
                       host_time_median_s=r.step_time_median_s
                       * (0.95 if r.strategy == "pipeline" else 0.3)) if r.ok else r
               for r in folder.read_records()]
    folder.write_records(records)
    assert main(["report", str(run_folder)]) == 0
    [line] = [line for line in (run_folder / "README.md").read_text().splitlines()
              if line.startswith("- host-bound")]
    assert line.startswith("- host-bound (2 of 5 GPU configurations")  # with 3 singles
    assert line.count("pipeline (K=2") == 2 and "(host 95% of the step)" in line
    assert "single" not in line.split("):", 1)[1]


def test_the_table_fits_a_120_column_terminal_unless_asked_wide():
    """A published run with every schedule, 3 trials (intervals) and long options."""
    from parbench.reporting.answers import results_table
    from parbench.results.folder import load_records

    frame = load_records(Path(__file__).parents[3] / "results"
                         / "20261125T081039Z-tutorial-pinned-splits-5-20")
    narrow = results_table(frame).splitlines()[:len(frame) + 1]
    assert max(map(len, narrow)) <= 120
    assert narrow[0].split() == ["strategy", "options", "dev", "img/s", "speedup", "peak",
                                 "MiB", "verdict"]
    wide = results_table(frame, wide=True).splitlines()[0]
    assert "parallel" in wide and "cpu,cpu" in results_table(frame, wide=True)


def test_the_table_and_answers_tell_eager_from_compiled():
    import dataclasses

    import pandas as pd

    from parbench.reporting.answers import results_table
    from tests.support import ok_record

    records = [ok_record("pipeline", strategy_options={"split_size": 4}, compile=compiled,
                         devices="cpu,cpu", throughput_ips=ips, step_time_median_s=8 / ips,
                         peak_memory_max_mib=10.0, memory_imbalance=1.0)
               for compiled, ips in ((False, 100.0), (True, 150.0))]
    frame = pd.DataFrame([dataclasses.asdict(r) for r in records])
    rows = results_table(frame).splitlines()[1:3]
    assert rows[0].split()[1:3] == ["split=4", "2"]
    assert rows[1].split()[1:4] == ["split=4,", "compiled", "2"]
    assert "fastest pipeline (split=4) compiled at 150 img/s" in results_table(frame)


def test_the_table_tells_compile_scopes_and_modes_apart():
    import dataclasses

    import pandas as pd

    from parbench.reporting.answers import results_table
    from tests.support import ok_record

    records = [ok_record("single", compile=True, compile_scope=scope, compile_mode=mode,
                         cuda_graphs=False if mode == "reduce-overhead" else None,
                         throughput_ips=ips, step_time_median_s=8 / ips,
                         peak_memory_max_mib=10.0, memory_imbalance=1.0)
               for scope, mode, ips in (("block", "default", 100.0),
                                        ("model", "reduce-overhead", 150.0))]
    text = results_table(pd.DataFrame([dataclasses.asdict(r) for r in records]))
    rows = text.splitlines()[1:3]
    assert rows[0].split()[:2] == ["single", "compiled"]
    assert rows[1].split()[:7] == ["single", "compiled", "whole", "reduce-overhead", "(no",
                                   "CUDA", "graphs)"]
