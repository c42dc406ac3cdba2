import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parbench import strategies
from parbench.cli import main
from parbench.families.workloads import Workload
from parbench.plan.config import Config
from parbench.results.folder import load_records
from tests.support import CPU2, TINY_FLAGS

TINY = [*TINY_FLAGS, "--steps", "2", "--warmup", "1"]


def _run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _run_folder(out: str):
    line = [line for line in out.splitlines() if line.startswith("results: ")][-1]
    return line.removeprefix("results: ")


def test_run_measures_writes_a_run_folder_and_prints_it(capsys, tmp_path):
    status, out, err = _run(capsys, "run", "--strategy", "single", "--batch-size", "4",
                            "--devices", "cpu", "--results-dir", str(tmp_path), *TINY)
    assert status == 0, err
    folder = _run_folder(out)
    frame = load_records(folder)
    assert list(frame["status"]) == ["ok"]
    assert frame.loc[0, "throughput_ips"] > 0
    assert frame.loc[0, "torch_version"] == torch.__version__
    assert "img/s" in out and "single" in out
    assert "[1/1] single resnet18 batch 4 32px fp32 on cpu" in err


def test_comma_lists_sweep_one_record_per_point(capsys, tmp_path):
    status, out, _ = _run(capsys, "run", "--strategy", "single", "--batch-size", "2,4",
                          "--results-dir", str(tmp_path), *TINY)
    assert status == 0
    assert list(load_records(_run_folder(out))["global_batch"]) == [2, 4]


@pytest.mark.slow  # the quick comparison's every strategy, end to end
def test_default_run_compares_every_strategy_that_can_run_here(capsys, tmp_path):
    from parbench.cli import parser
    from parbench.commands.run import spec_of

    # 16: every pipeline's default micro-batch (4 per stage of 2) 2 images, the fewest resnet18
    # trains on at 32 px
    argv = ["run", "--batch-size", "16", "--results-dir", str(tmp_path), *TINY, "--steps", "1",
            "--warmup", "0"]
    # The quick comparison's trials, for its intervals: 3 unless --repeats says otherwise
    # (the sweep it asks for; measured here in one trial each, which every record states).
    assert spec_of(parser().parse_args(argv)).repeats == 3
    status, out, err = _run(capsys, *argv, "--repeats", "1")
    assert status == 0
    workload = Workload(model="resnet18", image_size=32, num_classes=10)
    can_run = [n for n in strategies.names()
               if Config(n, workload, 16, CPU2).plan.available]
    assert "single" in can_run and "ddp" in can_run and "data-parallel" not in can_run
    frame = load_records(_run_folder(out))
    assert list(dict.fromkeys(frame["strategy"])) == can_run
    # Left out with a note: what the machine lacks (data-parallel on CPU), and tensor
    # parallelism, which cannot lay out a ResNet.
    assert "note: tp left out: tp: tensor parallelism splits linear layers" in out + err
    assert "tp" not in can_run and "fsdp-tp" not in can_run
    assert set(frame["repeats"]) == {1}  # the trials the sweep asked for
    # Beside single with the whole batch, single accumulating the pipelines' micro-batches.
    single = frame["strategy"] == "single"
    assert (set(frame.loc[single, "split_size"].dropna())
            == set(frame.loc[~single, "split_size"].dropna()) == {2})  # 4 per stage of 2
    assert set(frame["status"]) == {"ok"}


def test_split_sizes_sweep_only_the_strategies_that_take_them(capsys, tmp_path):
    status, out, err = _run(capsys, "run", "--strategy", "single,model-parallel,pipeline",
                            "--devices", "cpu,cpu", "--batch-size", "8", "--split-size", "2,4",
                            "--results-dir", str(tmp_path), *TINY)
    assert status == 0, err
    frame = load_records(_run_folder(out))
    assert list(frame["status"]) == ["ok"] * 6
    # single is measured whole and accumulating each split (the same-micro-batch baseline).
    assert list(frame["strategy"]) == ["single"] * 3 + ["model-parallel", "pipeline", "pipeline"]
    assert list(frame["micro_batches"]) == [1, 4, 2, 1, 4, 2]
    assert list(frame["bubble_fraction"]) == pytest.approx([0, 0, 0, 1 / 2, 1 / 5, 1 / 3])
    assert frame.loc[0, "speedup_vs_baseline"] == 1.0
    assert frame.loc[4, "device_efficiency"] == pytest.approx(
        frame.loc[4, "throughput_ips"] / frame.loc[0, "throughput_ips"] / 2)
    # split 2: speedup = micro-batch effect (single accumulating 2s over single whole) x
    # parallel effect (the pipeline over single accumulating 2s).
    whole, accumulating, pipeline = (frame.loc[i, "throughput_ips"] for i in (0, 1, 4))
    assert frame.loc[4, "micro_batch_effect"] == pytest.approx(accumulating / whole)
    assert frame.loc[4, "parallel_effect"] == pytest.approx(pipeline / accumulating)
    assert frame.loc[4, "parallel_efficiency"] == pytest.approx(pipeline / accumulating / 2)
    assert (frame.loc[4, "micro_batch_effect"] * frame.loc[4, "parallel_effect"]
            == pytest.approx(frame.loc[4, "speedup_vs_baseline"]))
    # model-parallel passes the whole batch: all of its speedup is parallel.
    assert frame.loc[3, "micro_batch_effect"] == 1.0
    assert bool(frame.loc[4, "emulated"]) and not bool(frame.loc[0, "emulated"])
    assert frame.loc[4, "partition"] == "stem..layer2.1 | layer3.0..head"
    assert len(frame.loc[4, "peak_memory_mib"]) == 2  # one figure per logical device
    # The pipelines' last measured step, timed action by action: a forward and a backward of
    # each micro-batch on each stage, written as a Chrome trace too.
    for index, micro_batches in ((3, 1), (4, 4), (5, 2)):
        spans = frame.loc[index, "timeline"]
        assert sorted((s[0], s[1], s[2]) for s in spans) == sorted(
            (k, i, p) for k in range(2) for i in range(micro_batches) for p in "FB")
        assert 0 <= frame.loc[index, "measured_bubble_fraction"] <= frame.loc[
            index, "measured_bubble_fraction_worst"] < 1
    traces = sorted(p.name for p in (Path(_run_folder(out)) / "timelines").iterdir())
    assert traces == ["003-model-parallel.json.gz", "004-pipeline.json.gz", "005-pipeline.json.gz"]


def _switches(*argv: str, command: str = "run") -> list[tuple]:
    """(static_graph, gradient_as_bucket_view) of each option combination the flags give."""
    from parbench.cli import parser
    from parbench.commands.arguments import strategy_option_sweep

    args = parser().parse_args([command, *argv])
    return [(o["static_graph"], o["gradient_as_bucket_view"])
            for o in strategy_option_sweep(args, sweep=command == "run")]


def test_a_switch_alone_is_on_and_takes_off_or_a_list_of_both():
    assert _switches() == [(None, None)]  # not given: the option's default
    assert _switches("--static-graph") == [(True, None)]  # as the flag always meant
    assert _switches("--static-graph", "off") == [(False, None)]
    assert _switches("--static-graph", "on,off", "--gradient-as-bucket-view", "OFF") == [
        (True, False), (False, False)]
    assert _switches("--static-graph", "off", command="verify") == [(False, None)]
    assert _switches("--strategy", "ddp", "--gradient-as-bucket-view", "--static-graph",
                     "false", command="max-batch") == [(False, True)]


def test_torch_defaults_against_the_tuned_ones_are_distinct_labelled_configurations():
    """The comparisons docs/strategies.md gives, planned (not measured): one configuration
    per combination, each label naming what it turns off or sets."""
    from parbench.cli import parser
    from parbench.commands.run_spec import spec_of
    from parbench.drive.runner import planned_fields
    from parbench.plan import Sweep
    from parbench.plots import options_text

    def labels(*flags: str) -> list[str]:
        argv = ["run", *flags, "--devices", "cpu,cpu", *TINY_FLAGS, "--batch-size", "8"]
        configs = Sweep.build(spec_of(parser().parse_args(argv))).configs
        assert len({config.key() for config in configs}) == len(configs)
        return [options_text(planned_fields(config)["strategy_options"]) for config in configs]

    assert labels("--strategy", "ddp", "--world-size", "1", "--gradient-as-bucket-view",
                  "on,off", "--static-graph", "on,off") == [
        "N=1", "N=1, no static_graph", "N=1, no gradient_as_bucket_view",
        "N=1, no gradient_as_bucket_view, no static_graph"]
    assert labels("--strategy", "fsdp", "--fsdp-units", "block,group",
                  "--reshard-after-forward", "yes,except-last") == [
        "units=block, reshard=yes", "units=block", "units=group, reshard=yes", "units=group"]


def test_tuning_torch_sets_torch_own_defaults_for_the_settings_not_given_beside_it():
    """`--tuning tuned,torch`: two configurations per strategy, the second with torch's own
    DDP and FSDP2 defaults (what the record's settings say), a setting given beside it kept."""
    from parbench.cli import parser
    from parbench.commands.run_spec import spec_of
    from parbench.drive.runner import planned_fields
    from parbench.plan import Sweep

    def planned(*flags: str) -> list[tuple[str, dict, dict]]:
        argv = ["run", *flags, "--devices", "cpu,cpu", *TINY_FLAGS, "--batch-size", "8",
                "--precision", "bf16"]
        return [(fields["strategy"], fields["strategy_options"], fields["strategy_settings"])
                for fields in map(planned_fields, Sweep.build(spec_of(parser().parse_args(
                    argv))).configs) if fields["strategy"] != "single"]

    both = planned("--strategy", "ddp,fsdp", "--tuning", "tuned,torch")
    torch_own = [config for config in both if config[1].get("tuning") == "torch"]
    tuned = [config for config in both if "tuning" not in config[1]]
    assert [name for name, *_ in tuned] == [name for name, *_ in torch_own] == ["ddp", "fsdp"]
    assert [options for _, options, _ in torch_own] == [{"tuning": "torch"}] * 2
    ddp, fsdp = (settings for _, _, settings in torch_own)
    assert (ddp["gradient_as_bucket_view"], ddp["static_graph"]) == (False, False)
    assert (fsdp["fsdp_units"], fsdp["reshard_after_forward"], fsdp["mixed_precision"]) == (
        "block", "yes", False)
    ddp, fsdp = (settings for _, _, settings in tuned)
    assert (ddp["gradient_as_bucket_view"], ddp["static_graph"]) == (True, True)
    assert (fsdp["fsdp_units"], fsdp["reshard_after_forward"], fsdp["mixed_precision"]) == (
        "group", "except-last", True)
    [(_, options, settings)] = planned("--strategy", "ddp", "--tuning", "torch",
                                       "--static-graph", "on")
    assert options == {"tuning": "torch", "static_graph": True}
    assert (settings["gradient_as_bucket_view"], settings["static_graph"]) == (False, True)


def test_verify_exits_1_when_a_strategy_differs(capsys, monkeypatch):
    import parbench.commands.verify
    from parbench.drive.verify import Verdict

    differs = Verdict("pipeline", {"split_size": 2}, max_abs_difference=3e-3,
                      baseline_update=1e-2, tolerance=1e-5)
    monkeypatch.setattr(parbench.commands.verify, "verify", lambda *args, **kwargs: [differs])
    status, out, _ = _run(capsys, "verify", "--strategy", "pipeline", "--devices", "cpu,cpu")
    assert status == 1
    assert "3.000e-03" in out and "FAILED" in out


def test_verify_reports_a_failing_strategy_as_one_row_and_checks_the_rest(capsys, monkeypatch):
    """The rest checked for real: the pipeline at verify's default batch (8) in micro-batches of
    2, its default (4 in all). That a strategy's step equals the baseline's is
    tests/parbench/strategies/test_conformance.py's; that verify exits 0 when every strategy passes,
    tests/parbench/drive/test_verify_steps.py's command test."""
    from parbench import launch

    real = launch.verify_training

    def fails_for_model_parallel(config, batches, nudge_seed=None):
        if config.strategy == "model-parallel":
            raise RuntimeError("stage 1 exploded")
        return real(config, batches, nudge_seed)

    monkeypatch.setattr(launch, "verify_training", fails_for_model_parallel)
    status, out, err = _run(capsys, "verify", "--strategy", "model-parallel,pipeline",
                            "--devices", "cpu,cpu", "--model", "resnet18", "--image-size", "32")
    assert status == 1 and "Traceback" not in err
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert rows["model-parallel"].endswith("FAILED (RuntimeError: stage 1 exploded)")
    assert rows["pipeline"].endswith("ok") and "split_size=2" in rows["pipeline"]


def test_env_prints_what_results_are_stamped_with(capsys):
    status, out, _ = _run(capsys, "env")
    assert status == 0
    for key in ("torch_version", "cuda_version", "cudnn_version", "nccl_version", "gpu_names",
                "gpu_driver", "cpu_model", "cpu_cores_available", "host", "git_commit"):
        assert key in out
    assert torch.__version__ in out


def test_strategies_lists_every_name(capsys):
    status, out, _ = _run(capsys, "strategies", "--devices", "cpu")
    assert status == 0
    assert [line.split()[0] for line in out.splitlines()] == strategies.names()


@pytest.mark.parametrize("argv, message", [
    (["run", "--model", "vgg16"], "unknown model 'vgg16'; available: resnet18"),
    (["run", "--strategy", "magic"], "unknown strategy 'magic'; available: single"),
    (["run", "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["run", "--batch-size", "8,x"], "--batch-size 'x' is not a whole number"),
    (["run", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["run", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
    (["run", "--steps", "ten"], "invalid int value: 'ten'"),
    (["run", "--image-size", "16"], "--image-size 16: resnet18 cannot train on it; use at "
                                    "least 32"),
    (["verify", "--model", "vit_b_16", "--image-size", "40"],
     "--image-size 40: vit_b_16 cannot train on it; use a multiple of 16 (e.g. 32)"),
    (["run", "--precision", "fp8"], "unknown precision 'fp8'"),
    (["run", "--devices", "cuda:3"], "device cuda:3 is not available"),
    (["run", "--devices", "tpu:0"], "unknown device 'tpu:0'"),
    (["run", "--threads-per-device", "0"], "--threads-per-device must be at least 1"),
    (["run", "--num-classes", "0"], "--num-classes must be at least 1"),
    (["run", "--bogus"], "unrecognized arguments: --bogus"),
    (["run", "--tag", "../../x"], "--tag '../../x' must be a plain name"),
    (["launch"], "invalid choice: 'launch'"),
    (["run", "--batch-size", "32", "--split-size", "60"],
     "--split-size 60 is larger than --batch-size 32"),
    (["run", "--split-size", "0"], "--split-size must be at least 1, got 0"),
    (["run", "--strategy", "pipeline", "--devices", "cpu,cpu", "--stages", "3"],
     "3 stages need at least 3 devices, got 2 (cpu,cpu)"),
    (["run", "--strategy", "model-parallel", "--devices", "cpu"],
     "model-parallel: needs at least 2 devices, got 1 (cpu)"),
    (["run", "--stages", "1"], "--stages must be at least 2, got 1"),
    (["run", "--balance", "random"], "unknown balance 'random'"),
    (["run", "--strategy", "pipeline", "--devices", "cpu,cpu,cpu", "--stages", "3",
      "--balance", "tutorial"], "pipeline: --balance tutorial cuts into 2 stages only"),
    (["verify", "--tolerance", "0"], "--tolerance must be above 0"),
    (["verify", "--strategy", "tp", "--devices", "cpu,cpu"], "tp: tensor parallelism splits "
     "linear layers by their features (torch's parallelize_module), and a ResNet is"),
    (["run", "--strategy", "fsdp-tp", "--devices", "cpu,cpu"], "fsdp-tp cannot run here: "
     "fsdp-tp: tensor parallelism splits linear layers"),
    (["run", "--strategy", "pipeline", "--model", "resnet18", "--devices", ",".join(["cpu"] * 11)],
     "pipeline cannot run here: 11 stages on 11 devices, but resnet18 has 10 blocks to cut; "
     "use at most 10 devices"),
    (["run", "--strategy", "model-parallel", "--devices", "cpu,cpu,cpu", "--balance",
      "tutorial"], "model-parallel: --balance tutorial cuts into 2 stages only"),
    (["verify", "--batch-size", "4", "--split-size", "8"], "--split-size 8 is larger"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu", "--world-size", "4"],
     "world size 4 needs at least 4 devices, got 2 (cpu,cpu)"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu,cpu", "--batch-size", "32"],
     "ddp: batch 32 does not divide over 3 replicas; use a multiple of 3, e.g. --batch-size 30"),
    (["run", "--strategy", "fsdp", "--world-size", "2", "--batch-size", "7"],
     "fsdp: batch 7 does not divide over 2 replicas"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu", "--backend", "nccl"],
     "--backend nccl needs CUDA devices, got cpu,cpu; use --backend gloo"),
    (["run", "--backend", "mpi"], "invalid choice: 'mpi'"),
    (["run", "--world-size", "0"], "--world-size must be at least 1, got 0"),
    (["run", "--strategy", "ddp", "--sync-batchnorm", "--devices", "cpu,cpu"],
     "SyncBatchNorm runs on CUDA devices only"),
    (["run", "--strategy", "ddp", "--bucket-cap-mb", "0"], "--bucket-cap-mb must be above 0"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu", "--comm-hook", "bf16"],
     "ddp: the bf16 hook needs NCCL, and these ranks use gloo, which has no bf16 all-reduce"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu", "--powersgd-rank", "2"],
     "--powersgd-rank is PowerSGD's; add --comm-hook powersgd"),
    (["run", "--strategy", "ddp", "--devices", "cpu,cpu", "--comm-hook", "powersgd"],
     "ddp: the powersgd hook needs NCCL: on gloo a collective mismatch"),
    (["run", "--strategy", "ddp", "--comm-hook", "int8"], "unknown comm hook 'int8'"),
    (["run", "--strategy", "ddp", "--data", "/no/such/folder"], "--data /no/such/folder: no such"),
    (["run", "--loader-workers", "-1"], "--loader-workers must be at least 0"),
    (["run", "--timeout", "0"], "--timeout must be above 0, got 0"),
    (["verify", "--strategy", "ddp", "--batch-size", "9"], "ddp: batch 9 does not divide"),
    (["run", "--strategy", "pipeline-gpipe", "--devices", "cpu,cpu", "--batch-size", "10",
      "--split-size", "3"], "batch 10 in micro-batches of 3 gives unequal sizes (3 and 2)"),
    (["run", "--strategy", "pipeline-1f1b", "--devices", "cpu,cpu", "--batch-size", "1"],
     "a batch of 1 cannot fill 2 stages"),
    (["run", "--memory-cap-mib", "0"], "--memory-cap-mib must be at least 1, got 0"),
    (["max-batch", "--strategy", "single", "--devices", "cpu"],
     "on CPU give --memory-cap-mib"),
    (["max-batch", "--strategy", "single", "--memory-cap-mib", "100", "--start", "8",
      "--limit", "4"], "--limit must be at least 8, got 4"),
    (["max-batch", "--strategy", "data-parallel", "--memory-cap-mib", "100"],
     "data-parallel cannot run on cpu,cpu here"),
    (["run", "--resume", "/no/such/run"], "is not a run folder (no records.json or command.json)"),
    (["run", "--strategy", "pipeline-gpipe", "--devices", "cpu,cpu", "--precision", "fp16"],
     "pipeline-gpipe: fp16 loss scaling is not coordinated across pipeline ranks"),
    (["run", "--strategy", "fsdp", "--devices", "cpu,cpu", "--mixed-precision"],
     "fsdp: --mixed-precision gathers parameters in the --precision dtype; give --precision "
     "bf16 or fp16"),
    (["run", "--strategy", "ddp", "--static-graph", "maybe"],
     "--static-graph 'maybe' is not on or off"),
    (["verify", "--strategy", "ddp", "--static-graph", "on,off"],
     "--static-graph 'on,off' is not on or off"),
    (["run", "--strategy", "fsdp", "--fsdp-units", "layer"],
     "unknown fsdp units 'layer' for --fsdp-units; available: block, group"),
    (["run", "--strategy", "fsdp", "--reshard-after-forward", "sometimes"],
     "available: yes, no, except-last"),
    (["run", "--strategy", "data-parallel", "--compile"],
     "data-parallel: nn.DataParallel copies each compiled block into its replicas"),
    (["run", "--compile", "yes"], "--compile 'yes': give off, on (each block), block or model"),
    (["run", "--compile-mode", "fast"], "unknown compile mode 'fast'; available: default, "
                                        "reduce-overhead, max-autotune-no-cudagraphs"),
    (["run", "--compile-mode", "reduce-overhead", "--warmup", "0"],
     "--compile needs --warmup 1 or more"),
    (["run", "--strategy", "pipeline", "--devices", "cpu,cpu", "--compile-mode",
      "reduce-overhead"], "pipeline: pipeline runs each stage on a thread of its own, while "
                          "torch keeps its CUDA graph trees per thread"),
    (["run", "--strategy", "single", "--devices", "cpu", "--accumulation-split", "2",
      "--compile", "model", "--compile-mode", "max-autotune"],
     "single: --accumulation-split 2 accumulates gradients over micro-batches, and under "
     "--compile-mode max-autotune torch's CUDA graph trees leave a backward's gradients"),
    (["run", "--compile", "on,off", "--warmup", "0"], "--compile needs --warmup 1 or more"),
    (["run", "--compile", "--warmup", "0"], "--compile needs --warmup 1 or more"),
    (["run", "--strategy", "data-parallel", "--devices", "cpu,cpu"],
     "data-parallel cannot run here: nn.DataParallel replicates onto CUDA devices only"),
    (["run", "--image-size", "100000"],
     "--batch-size 32 at --image-size 100000: 32 input images alone need 3.49 TiB"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    if "cuda:3" in argv and torch.cuda.device_count() > 3:
        pytest.skip("this host has a cuda:3")
    status, out, err = _run(capsys, *argv)
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("parbench: error: ")
    assert message in err


def test_unwritable_results_dir_is_refused_before_measuring(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    status, out, err = _run(capsys, "run", "--results-dir", str(blocker / "results"), *TINY)
    assert status == 2
    assert "cannot write results to" in err and "--results-dir" in err
    assert "[1/" not in err  # nothing was measured


# `python -m parbench` itself, where the command line is what is tested: each a fresh
# interpreter importing torch (some 5 s of CPU), so the three are started at once, by the first
# test that asks, and each test reads its own.
INSTALLED = {
    "batch": [sys.executable, "-m", "parbench", "run", "--batch-size", "-3"],
    "device": [sys.executable, "-m", "parbench", "run", "--devices", "cuda:9"],
    "reader": f"{sys.executable} -m parbench strategies --devices cpu | head -1",
}


@pytest.fixture(scope="module")
def installed():
    """name -> the running command of INSTALLED; whatever a test leaves running is killed."""
    running = {name: subprocess.Popen(command, shell=isinstance(command, str),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, command in INSTALLED.items()}
    yield running
    for command in running.values():
        if command.poll() is None:
            command.kill()
        command.communicate()


@pytest.mark.parametrize("name", ["batch", "device"])
def test_the_installed_command_prints_no_traceback(installed, name):
    _, err = installed[name].communicate(timeout=120)
    assert installed[name].returncode == 2
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_a_reader_that_goes_away_gets_no_traceback(installed):
    out, err = installed["reader"].communicate(timeout=120)
    assert out.startswith("single")
    assert err == ""


def test_the_progress_bar_names_each_configuration_with_an_eta(capsys, tmp_path):
    status, _, err = _run(capsys, "run", "--strategy", "single", "--batch-size", "2,4",
                          "--devices", "cpu", "--results-dir", str(tmp_path), "--progress", "on",
                          *TINY)
    assert status == 0
    assert "single resnet18 batch 4 32px fp32 on cpu" in err
    assert "2/2 [" in err and "<" in err  # done / total [elapsed<remaining]
    assert "[1/2]" not in err  # the bar replaces the line per configuration


@pytest.mark.slow  # the quick comparison again, one strategy refusing
def test_the_quick_comparison_records_a_strategy_refusing_the_workload_as_skipped(
        capsys, tmp_path):
    # One trial (the default of 3 is checked in the test above): fp16 is slow here.
    status, out, err = _run(capsys, "run", "--precision", "fp16", "--devices", "cpu,cpu",
                            "--repeats", "1", "--batch-size", "4", "--results-dir",
                            str(tmp_path), *TINY, "--steps", "1", "--warmup", "0")
    assert status == 0, err
    frame = load_records(_run_folder(out)).set_index("strategy")
    for name in ("pipeline-gpipe", "pipeline-1f1b"):
        assert frame.loc[name, "status"] == "skipped"
        assert "fp16 loss scaling is not coordinated" in frame.loc[name, "reason"]
    assert frame.loc["fsdp", "status"] == "ok"  # its sharded gradient scaler
    assert frame.loc[["single"], "status"].iloc[0] == "ok"  # the whole batch


@pytest.fixture
def compiling_here():
    """torch.compile in this process, inductor compiling in the calling thread (a pool of
    compile workers would live as long as this process, and be taken for a leftover by the
    tests that look for them); the compiled code dropped afterwards. Inductor's own patch,
    not monkeypatch: its config is no plain module, and a monkeypatch's undo left a later
    test in the same process without `compile_threads`."""
    import torch._dynamo
    import torch._inductor.config

    torch._dynamo.reset()  # graphs an earlier test compiled in this process would be reused
    with torch._inductor.config.patch(compile_threads=1):
        yield
    torch._dynamo.reset()


@pytest.mark.timeout(600)
def test_compile_compiles_in_the_warm_up_and_records_its_time_apart(capsys, tmp_path,
                                                                     compiling_here, child_pids,
                                                                     monkeypatch):
    """`--compile on,off`: the model compiled block by block (each block once, into graphs of
    its own, not one), in the first warm-up step only, and eager, each a record of its own.
    How many graphs dynamo makes of the blocks (one per block shape on torch 2.14, whose
    blocks of a class share their code's graphs) is torch's business, not counted here."""
    import torch
    from torch._dynamo.utils import counters

    from parbench.launch import worker

    compiled_blocks: list[int] = []
    real_compile, real_time_steps = torch.nn.Module.compile, worker.time_steps

    def counting_compile(module, *args, **kwargs):
        compiled_blocks.append(id(module))
        return real_compile(module, *args, **kwargs)

    graphs_per_step: list[list[int]] = []  # per time_steps call, the graphs each step made

    def counting_time_steps(step, *args, **kwargs):
        made = []
        graphs_per_step.append(made)

        def counted(i):
            before = counters["stats"]["unique_graphs"]
            result = step(i)
            made.append(counters["stats"]["unique_graphs"] - before)
            return result

        return real_time_steps(counted, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "compile", counting_compile)
    monkeypatch.setattr(worker, "time_steps", counting_time_steps)
    status, out, err = _run(capsys, "run", "--strategy", "single", "--compile", "on,off",
                            "--devices", "cpu", "--batch-size", "4", "--results-dir",
                            str(tmp_path), *TINY)
    assert status == 0, err[-2000:]
    assert child_pids() == []  # no pool of compile workers left behind
    # Block by block: every block compiled in place once; the graphs, made in the first step
    # (warm-up), more than one (not the whole model's) and none past one per block (the
    # blocks are compiled with static shapes, at one batch size); no later step recompiles.
    assert len(compiled_blocks) > 1 and len(set(compiled_blocks)) == len(compiled_blocks)
    on, off = graphs_per_step
    assert 1 < on[0] <= len(compiled_blocks)
    assert on[1:] == [0] * len(on[1:]) and off == [0] * len(off)
    compiled, eager = (row for _, row in load_records(_run_folder(out)).iterrows())
    assert (compiled["status"], eager["status"]) == ("ok", "ok"), err[-2000:]
    assert compiled["compile"] and not eager["compile"]
    # The first warm-up step compiled (seconds, on a CPU); the measured ones did not.
    assert compiled["first_step_time_s"] > 5 * compiled["step_time_max_s"]
    assert compiled["compile_time_s"] == pytest.approx(
        compiled["first_step_time_s"] - compiled["step_time_median_s"])
    assert eager["compile_time_s"] != eager["compile_time_s"]  # none: NaN


def _sweep(args):
    from parbench.commands.run import build_sweep, spec_of

    return build_sweep(spec_of(args))


def test_a_sweep_records_the_combinations_a_strategy_refuses_as_skipped(capsys):
    from parbench import cli
    from parbench.drive import runner

    args = cli.parser().parse_args(
        ["run", "--strategy", "pipeline-dualpipev", "--devices", "cpu,cpu", "--batch-size", "8",
         "--split-size", "2,4", *TINY])
    sweep = _sweep(args)
    configs = sweep.configs
    assert "refuses 1 of its 2 configurations" in "\n".join(sweep.notes)
    assert [c.options["split_size"] for c in configs] == [2, 4]
    assert configs[0].refusal() is None
    record = runner.run_config(configs[1], measure=lambda config: pytest.fail("measured"))
    assert record.status == "skipped"
    assert "needs at least as many micro-batches as stages (4), got 2" in record.reason
    args.split_size = "4"  # refused in every combination: a usage error
    with pytest.raises(cli.UsageError, match="got 2; use --split-size 2$"):
        _sweep(args)


def test_a_strategy_that_refuses_compile_is_measured_eager_under_compile_on_and_off(capsys):
    from parbench import cli
    from parbench.drive import runner

    args = cli.parser().parse_args(["run", "--strategy", "pipeline-zbv", "--devices", "cpu,cpu",
                                    "--batch-size", "8", "--split-size", "2", "--compile",
                                    "on,off", *TINY])
    sweep = _sweep(args)
    assert "pipeline-zbv refuses 1 of its 2 configurations" in "\n".join(sweep.notes)
    compiled, eager = sweep.configs
    assert compiled.workload.compile and eager.plan.runs
    record = runner.run_config(compiled, measure=lambda config: pytest.fail("measured"))
    assert record.status == "skipped" and "splits backward" in record.reason
    args.compile = "on"  # refused in every combination: a usage error
    with pytest.raises(cli.UsageError, match="ScheduleZBVZeroBubble splits backward"):
        _sweep(args)


EIGHT_CPUS = ",".join(["cpu"] * 8)


def test_the_comparison_on_many_devices_leaves_out_a_strategy_they_cannot_cut_for(capsys):
    """8 devices: the V and interleaved schedules would cut resnet18 (10 blocks) into 16
    pieces. The comparison of every strategy leaves them out with the reason, as it does
    data-parallel on CPU, and plans the rest (it aborted); named, they cannot run here, and
    an option that no configuration can take is still a usage error."""
    from parbench import cli

    args = cli.parser().parse_args(["run", "--devices", EIGHT_CPUS, *TINY])
    sweep = _sweep(args)
    planned = {c.strategy for c in sweep.configs}
    notes = "\n".join(sweep.notes)
    for name in ("pipeline-zbv", "pipeline-dualpipev", "pipeline-interleaved-1f1b"):
        assert name not in planned
        assert (f"note: {name} left out: 16 stages on 8 devices, but resnet18 has 10 blocks "
                "to cut; use at most 5 devices (--devices, or --stages 5)") in notes
    assert {"model-parallel", "pipeline", "pipeline-1f1b", "ddp", "fsdp"} <= planned
    args = cli.parser().parse_args(["run", "--devices", EIGHT_CPUS, "--strategy",
                                    "pipeline-zbv", *TINY])
    with pytest.raises(cli.UsageError, match="pipeline-zbv cannot run here: 16 stages on 8"):
        _sweep(args)
    args = cli.parser().parse_args(["run", "--devices", EIGHT_CPUS, "--split-size", "60", *TINY])
    with pytest.raises(cli.UsageError, match="--split-size 60 is larger than --batch-size 32"):
        _sweep(args)


def test_verify_on_many_devices_leaves_out_what_they_cannot_cut_for(capsys, monkeypatch):
    from parbench.commands import verify as command

    checked = []
    monkeypatch.setattr(command, "verify", lambda workload, devices, names, *rest: checked.extend(
        names) or [])
    assert main(["verify", "--devices", EIGHT_CPUS]) == 0
    assert "pipeline-zbv" not in checked and "pipeline-dualpipev" not in checked
    assert {"model-parallel", "pipeline-1f1b", "ddp", "fsdp"} <= set(checked)


def test_verify_s_own_split_gives_every_schedule_a_micro_batch_a_stage(capsys, monkeypatch):
    # batch 8 on 4 devices: at 4 micro-batches DualPipeV's 8 stages were refused and verify
    # stopped; at 8, every schedule is checked
    from parbench.commands import verify as command

    splits = []
    monkeypatch.setattr(command, "verify", lambda workload, devices, names, batch, options,
                        *rest: splits.append((options["split_size"], set(names))) or [])
    assert main(["verify", "--devices", "cpu,cpu,cpu,cpu"]) == 0
    [(split, names)] = splits
    assert split == 1 and {"pipeline-dualpipev", "pipeline-zbv", "pipeline-1f1b"} <= names
