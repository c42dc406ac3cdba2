"""benchmarks/gpu/reference.py on CPU: the default plan's order and its total inside one loan,
every parbench command of it against parbench's own parser, the estimates against what the
H200 measured, and the part runner that keeps each step, ends a step at its deadline and lets
a failure end only what depends on it (its tools: test_gpu_reference_tools.py)."""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support import GPU_REFERENCE, gpu_reference_modules

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = GPU_REFERENCE
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def gpu():
    with gpu_reference_modules() as modules:
        yield modules


def _dry_run(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_dry_run_prints_each_step_its_basis_and_the_running_total(tmp_path):
    out = _dry_run("--results-dir", str(tmp_path))
    headers = ["(a) attribution-128px:", "(b) compile-modes-224px:", "(c) data-parallel-bf16:",
               "(d) profiles:", "(e) asv:"]
    positions = [out.index(header) for header in headers]
    assert positions == sorted(positions)
    planned = out[:out.index("total estimated")]
    lines = re.findall(r"^  ~ *(\d+) s +(\d+) s  (\S+)", planned, re.M)
    running = 0
    for estimate, total, _ in lines:  # each line's total is the sum of those before it
        running += int(estimate)
        assert int(total) == running
    assert [name for *_, name in lines][:2] == ["install", "pipelines:"]
    assert planned.count("  from: ") == len(lines) - 1 - 5  # every step but install, archives
    assert f"total estimated {running} s" in out and running <= 540
    assert "PLANNING figure: " in out and "the H100's asv-run step" in out
    assert "--parts f (compile-modes-later" in out and "--parts h (slow-and-suites" in out
    assert "--split-size 20,60 --repeats 3 --steps 20" in out
    assert "--compile off,block,model --compile-mode reduce-overhead" in out
    assert "--world-size 1 --tuning tuned,torch" in out
    assert re.search(r"^correctness: (due, |not due: git says)", out, re.M)
    if "then, with the time left" in out:  # the correctness part, due: after the total
        assert "-m pytest -m gpu tests/gpu/test_gpu.py --deselect" in out
        assert "--junitxml RUN/g-correctness/gpu-tests-junit.xml" in out
        assert "parbench verify --devices cuda:0,cuda:0\n" in out
    assert list(tmp_path.iterdir()) == []


def test_the_default_plan_is_a_to_e_in_one_run_and_each_later_part_fits_one(gpu):
    every = gpu.plan.parts(gpu.steps.GPU, None, COMMIT)
    default = [part for part in every if part.default]
    assert [part.letter for part in default] == ["a", "b", "c", "d", "e"]
    assert [part.letter for part in every if not part.default] == ["f", "g", "h", "i", "j"]
    assert not any(gpu.plan.in_default_run(part) for part in every if not part.default)
    install, archive = gpu.reference.INSTALL.seconds, gpu.reference.ARCHIVE.seconds
    for chosen in (default, *([part] for part in every if not part.default)):
        total = install + sum(part.estimate_s for part in chosen) + archive * len(chosen)
        assert total <= gpu.reference.LIMIT_S, [part.letter for part in chosen]
    names = [step.name for part in every for step in part.steps]
    assert len(names) == len(set(names))  # a step's name is its log's and its skip's key
    due = gpu.plan.parts(gpu.steps.GPU, None, COMMIT, correctness_due="files changed")
    assert [part.letter for part in due if gpu.plan.in_default_run(part)] == [
        "a", "b", "c", "d", "e", "g"]


def test_the_rehearsal_runs_the_gpu_commands_with_the_same_flags_at_a_smaller_scale(gpu):
    """The rehearsal's commands are the GPU's: the same steps, strategies and flags; only the
    device, the sizes, rounds and steps differ (and the model: a ResNet-18 at 32 px)."""
    def flags(argv):
        return [arg for arg in argv if arg.startswith("-")]

    on_gpu = gpu.plan.parts(gpu.steps.GPU, None, COMMIT, "due")
    on_cpu = gpu.plan.parts(gpu.steps.REHEARSAL, None, COMMIT, "due")
    assert [p.letter for p in on_gpu] == [p.letter for p in on_cpu]
    for gpu_part, cpu_part in zip(on_gpu, on_cpu, strict=True):
        assert [s.name for s in gpu_part.steps] == [s.name for s in cpu_part.steps]
        for gpu_step, cpu_step in zip(gpu_part.steps, cpu_part.steps, strict=True):
            assert flags(gpu_step.argv) == flags(cpu_step.argv), gpu_step.name
            for flag in ("--strategy", "--compile", "--compile-mode", "--tuning",
                         "--precision"):
                if flag in gpu_step.argv:
                    index = gpu_step.argv.index(flag) + 1
                    assert cpu_step.argv[index] == gpu_step.argv[index], (gpu_step.name, flag)
            assert not re.search(r"\bcuda(:\d+)?\b", " ".join(cpu_step.argv)), cpu_step.name
            assert cpu_step.env.keys() == gpu_step.env.keys()


def test_every_parbench_command_of_the_plan_parses_with_parbench_own_parser(gpu):
    """A misspelt flag or value fails here, on CPU, not on a GPU loan: each command is read
    by parbench's own parser, a run's into its sweep (its devices made CPU ones here), a
    verify's strategy options as verify reads them."""
    from parbench import cli
    from parbench.commands.arguments import UsageError, strategy_names, strategy_option_sweep
    from parbench.commands.run_spec import spec_of

    failed = {}
    commands = gpu.steps.parbench_commands(gpu.plan.parts(gpu.steps.GPU, None, COMMIT))
    assert {argv[0] for _, argv in commands} == {"run", "verify", "predict", "profile"}
    [subcommands] = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, argv in commands:
        flags = subcommands.choices[argv[0]]._option_string_actions
        unknown = [arg for arg in argv if arg.startswith("--") and arg not in flags]
        if unknown:  # argparse would take a prefix of a flag for the flag
            failed[name] = f"not parbench {argv[0]}'s own flags: {unknown}"
            continue
        try:
            args = cli.parser().parse_args([arg.replace("{folder}", "x") for arg in argv])
            if argv[0] == "run":
                args.devices = [re.sub(r"cuda:\d+", "cpu", spec) for spec in args.devices]
                spec_of(args)
            elif argv[0] == "verify":
                strategy_option_sweep(args, sweep=False)
                strategy_names(args.strategy or "single")
        except (UsageError, SystemExit) as error:
            failed[name] = str(error)
    assert not failed, failed


def test_every_gpu_test_runs_once_in_the_plan(gpu):
    names = gpu.steps.gpu_test_names()
    every = gpu.plan.parts(gpu.steps.GPU, None, COMMIT)
    steps = {step.name: step for part in every for step in part.steps}
    first = steps["gpu-tests"].argv
    deselected = [first[i + 1].split("::")[1] for i, arg in enumerate(first)
                  if arg == "--deselect"]
    later = [arg.split("::")[1] for name in ("gpu-tests-slow", "gpu-tests-suites")
             for arg in steps[name].argv if "::" in arg]
    assert sorted(later + list(gpu.plan.AS_STEPS)) == sorted(deselected)
    assert set(deselected) <= set(names) and len(later) == len(set(later))
    # the test run as a step of its own is the same command
    assert "cli.main([\"verify\", \"--devices\", SHARED])" in (ROOT / gpu.steps.GPU_TESTS
                                                                 ).read_text()


def test_the_estimates_are_what_the_h200_measured(gpu):
    estimates = gpu.estimates
    records = [r for path in estimates.H200.glob("*/*/records.json")
               for r in json.loads(path.read_text())]
    for kind, measured in estimates.MEASURED.items():
        assert any(abs(r["step_time_median_s"] - measured.step_s) < 5e-5
                   and abs(r["first_step_time_s"] - measured.first_s) < 5e-3
                   and abs((r.get("compute_time_s") or 0) - measured.compute_s) < 5e-5
                   for r in records if r.get("step_time_median_s")), kind
    times = estimates.junit_times()
    assert len(times) == 30
    assert times["test_verify_on_one_gpu_emulating_two"] == pytest.approx(3.76, abs=0.005)
    peak = times["test_peak_memory_per_logical_device_comes_from_each_process_allocator"]
    ddp, fsdp = (times[f"test_emulated_strategies_run_on_one_gpu[{s}]"] for s in ("ddp", "fsdp"))
    assert estimates.FORKSERVER_S == pytest.approx(peak - ddp, abs=0.05)
    assert estimates.SPAWN_TRIAL_S == pytest.approx(((ddp - 0.74) + (fsdp - 2.22)) / 2, abs=0.1)
    steps = {f"{path.parent.name[0]}/{s['step']}": s["seconds"]
             for path in estimates.H200.glob("*/steps.json")
             for s in json.loads(path.read_text()) if "seconds" in s}
    assert estimates.PYTEST_START_S == pytest.approx(steps["1/gpu-tests"] - 62.551, abs=0.1)
    h100 = {s["step"]: s["seconds"] for s in json.loads(
        (estimates.H100 / "1-default" / "c-resnet50-224px-bf16" / "steps.json").read_text())
        + json.loads((estimates.H100 / "1-default" / "d-asv" / "steps.json").read_text())}
    assert (estimates.TIMM_S, estimates.ASV_MACHINE_S, estimates.ASV_RUN_S) == (
        h100["timm"], h100["asv-machine"], h100["asv-run"])
    # The start and set-up fit: each eager run's seconds less its records' steps.
    runs = {"4/bf16-channels-last": 1, "4/ablation": 2, "5/largest-batch": 1, "6/tutorial": 20}
    points = []
    for step, configs in runs.items():
        [path] = estimates.H200.glob(f"{step[0]}-*/*-{step[2:]}/records.json")
        stepped = sum(sum(r["step_times_s"]) + r["first_step_time_s"]
                      + (r["warmup_steps"] - 1) * r["step_time_median_s"]
                      for r in json.loads(path.read_text()))
        points.append((configs, steps[step] - stepped))
    for configs, overhead in points:
        fitted = estimates.RUN_START_S + estimates.TRIAL_S * configs
        assert overhead == pytest.approx(fitted, abs=1.0)


def _part(gpu, letter, *steps, summarise=None):
    return gpu.steps.Part(letter, "test", "the runner", steps, summarise=summarise)


def _step(gpu, name, code, **fields):
    return gpu.steps.Step(name, (sys.executable, "-c", code), gpu.estimates.Estimate(1, ""),
                         **fields)


def test_a_failed_step_ends_only_what_needs_it_and_a_slow_one_only_its_own_time(
        gpu, tmp_path, child_pids):
    steps = (
        _step(gpu, "fails", "raise SystemExit(3)"),
        _step(gpu, "needs-it", "print('never')", after="fails"),
        _step(gpu, "elsewhere", "", needs="no such tool here"),
        _step(gpu, "sleeps", "import time; time.sleep(60)"),
        _step(gpu, "after-the-sleeper", "import sys; print(sys.argv)", note="runs differently"),
    )
    now = time.monotonic()
    deadlines = {"z/fails": now + 30, "z/needs-it": now + 30, "z/elsewhere": now + 30,
                 "z/sleeps": now + 3, "z/after-the-sleeper": now + 30}
    folder = tmp_path / "z-test"
    gpu.reference.run_part(_part(gpu, "z", *steps, summarise=lambda f: {"read": f.name}),
                           folder, deadlines)
    entries = {e["step"]: e for e in json.loads((folder / "steps.json").read_text())}
    assert entries["fails"]["status"] == "exit 3"
    assert entries["needs-it"] == {"step": "needs-it", "status": "skipped",
                                   "reason": "it needs fails, which ended: exit 3"}
    assert entries["elsewhere"]["reason"] == "no such tool here"
    assert entries["sleeps"]["status"].startswith("timeout after")
    assert entries["sleeps"]["seconds"] < 20
    assert entries["after-the-sleeper"]["status"] == "ok"  # the sleeper took only its time
    assert entries["after-the-sleeper"]["note"] == "runs differently"
    assert not (folder / "needs-it.log").exists()
    assert json.loads((folder / "summary.json").read_text()) == {"read": "z-test"}
    assert child_pids() == []


def test_a_step_is_not_started_once_its_time_has_run_out(gpu, tmp_path):
    folder = tmp_path / "z-late"
    gpu.reference.run_part(_part(gpu, "z", _step(gpu, "late", "print('late')")), folder,
                           {"z/late": time.monotonic()})
    [entry] = json.loads((folder / "steps.json").read_text())
    assert entry["status"] == "not started: its time had run out"
    assert not (folder / "late.log").exists()


def test_a_step_is_told_its_deadline_and_fills_in_its_folder(gpu, tmp_path):
    show = "import os, sys; print(os.environ['PARBENCH_DEADLINE'], sys.argv[1])"
    step = gpu.steps.Step("told", (sys.executable, "-c", show, "{folder}/{step}.xml"),
                         gpu.estimates.Estimate(1, ""))
    folder = tmp_path / "z-told"
    gpu.reference.run_part(_part(gpu, "z", step), folder, {"z/told": time.monotonic() + 100})
    deadline, path = (folder / "told.log").read_text().split()
    assert abs(int(deadline) - (time.time() + 100)) < 10 and path == f"{folder}/told.xml"


def test_each_step_has_until_every_estimate_up_to_its_own_and_none_past_the_limit(gpu):
    def step(name, seconds):
        return gpu.steps.Step(name, (), gpu.estimates.Estimate(seconds / 1.2, ""))

    plan = [_part(gpu, "a", step("one", 100), step("two", 50)),
            _part(gpu, "b", step("three", 300), step("four", 200))]
    assert gpu.reference.schedule(plan, install_s=20, archive_s=5, limit_s=540) == {
        "a/one": 120, "a/two": 170, "b/three": 475, "b/four": 535}


def _record(strategy="single", rounds=(1000.0, 1100.0, 1050.0), **fields):
    trials = [{"round": r, "status": "ok", "throughput_ips": value, "twin": False}
              for r, value in enumerate(rounds)]
    return {"status": "ok", "strategy": strategy, "strategy_options": {}, "model": "resnet50",
            "precision": "bf16", "global_batch": 256, "image_size": 224, "compile": False,
            "trials": trials, "mfu": 0.1, **fields}


def _write_run(folder, *records):
    run = folder / "20261128T000000Z-run"
    run.mkdir(parents=True)
    (run / "records.json").write_text(json.dumps(list(records)))


def test_the_compile_part_runs_timm_three_times_and_skips_it_without_its_script(gpu, tmp_path):
    missing = gpu.plan.parts(gpu.steps.GPU, tmp_path / "none.py", COMMIT)[1]
    timm = [step for step in missing.steps if step.name.startswith("timm")]
    assert [step.name for step in timm] == ["timm-1", "timm-2", "timm-3"]
    assert timm[0].needs.startswith("timm's benchmark.py is a script in timm's repo")
    script = tmp_path / "benchmark.py"
    script.write_text("")
    [first, *_] = [s for s in gpu.plan.parts(gpu.steps.GPU, script, COMMIT)[1].steps
                   if s.name.startswith("timm")]
    assert first.needs is None and first.requires == ("timm",)
    assert first.argv[1:4] == (str(script), "--device", "cuda:0")


def test_the_compile_summary_sets_each_mode_against_eager_by_round_and_against_timm(gpu,
                                                                                  tmp_path):
    for trial, value in enumerate((2000.0, 2000.0, 2000.0), start=1):
        (tmp_path / f"timm-{trial}.log").write_text(f'{{"train_samples_per_sec": {value}}}\n')
    compiled = _record(rounds=(2000.0, 2200.0, 2100.0), compile=True, compile_scope="model",
                       compile_mode="reduce-overhead")
    _write_run(tmp_path, _record(), compiled)
    summary = gpu.summaries.compile_modes(tmp_path)
    label = gpu.summaries.label(compiled)
    assert "compiled whole reduce-overhead (no CUDA graphs)" in label
    assert summary[label]["over_eager"]["mean"] == pytest.approx(2.0)  # 2x in every round
    assert summary[label]["over_eager"]["interval_95"] == [2.0, 2.0]
    assert summary[label]["over_timm"] == pytest.approx(
        statistics.geometric_mean([2000, 2200, 2100]) / 2000, abs=1e-4)
    assert summary["timm_img_s"] == {"mean": 2000.0, "interval_95": [2000.0, 2000.0],
                                     "trials": 3}
    assert summary["eager_over_timm"] == pytest.approx(
        statistics.geometric_mean([1000, 1100, 1050]) / 2000, abs=1e-4)


def test_the_summaries_pair_by_round_and_leave_the_twin_out(gpu, tmp_path):
    single = _record(rounds=(100.0, 200.0))
    single["trials"].append({"round": 0, "status": "ok", "throughput_ips": 1.0, "twin": True})
    staged = _record("model-parallel", rounds=(90.0, 180.0), verdict="within noise")
    _write_run(tmp_path / "a", single, staged)
    attributed = gpu.summaries.attribution(tmp_path / "a")
    assert attributed["model_parallel_over_single"]["mean"] == pytest.approx(0.9)
    assert attributed["model_parallel_over_single"]["verdict"] == "within noise"
    torch_own = _record("ddp", rounds=(50.0, 60.0), strategy_options={"tuning": "torch"})
    tuned = _record("ddp", rounds=(55.0, 66.0))
    _write_run(tmp_path / "c", torch_own, tuned)
    assert gpu.summaries.tuned_over_torch(tmp_path / "c")["ddp_tuned_over_torch"][
        "mean"] == pytest.approx(1.1)


def test_unknown_parts_are_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--parts", "a,z"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        "--parts: there are parts a,b,c,d,e,f,g,h,i,j, got a,z")


def test_main_runs_on_a_copy_without_git(tmp_path):
    copy = tmp_path / "copy"
    (copy / "benchmarks" / "gpu").mkdir(parents=True)
    (copy / "tests" / "gpu").mkdir(parents=True)
    for module in SCRIPT.parent.glob("*.py"):
        (copy / "benchmarks" / "gpu" / module.name).write_text(module.read_text())
    tests = ROOT / "tests" / "gpu" / "test_gpu.py"
    (copy / "tests" / "gpu" / "test_gpu.py").write_text(tests.read_text())
    done = subprocess.run(
        [sys.executable, str(copy / "benchmarks" / "gpu" / "reference.py"), "--dry-run",
         "--parts", "e"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "commit: none (no git, no .git" in done.stdout
    assert "asv run --python=same --quick  [asv reads a commit only through git" in done.stdout


def test_a_step_leaves_nothing_running_in_its_session(gpu, tmp_path):
    """asv runs its benchmark in a process group of its own: the step's killpg misses it,
    and it would train on the GPU while the next step measures. Its session is ended."""
    script = ("import os, subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
              " process_group=0)\n"  # as asv's setpgid
              "time.sleep(0.5)\n")
    step = gpu.steps.Step("leaves", (sys.executable, "-c", script), gpu.estimates.Estimate(1, ""))
    entry = gpu.reference.run_step(step, list(step.argv), tmp_path, 30)
    assert entry["status"] == "ok" and len(entry["killed_left_over"]) == 1
    time.sleep(0.2)
    assert not Path(f"/proc/{entry['killed_left_over'][0]}").exists() or "Z" in Path(
        f"/proc/{entry['killed_left_over'][0]}/stat").read_text().split(")")[1].split()[0]


def test_main_runs_the_default_parts_each_into_its_folder_and_the_archive(gpu, tmp_path,
                                                                         monkeypatch):
    steps = {"a": _step(gpu, "one", "print('a')"), "b": _step(gpu, "two", "raise SystemExit(1)"),
             "e": _step(gpu, "later", "print('never')")}
    plan = [gpu.steps.Part(letter, "test", "", (step,), default=letter != "e")
            for letter, step in steps.items()]
    monkeypatch.setattr(gpu.reference, "parts", lambda *args: plan)
    monkeypatch.setenv("PARBENCH_COMMIT", COMMIT)  # main sets it for its steps: undone after
    archive = tmp_path / "out" / "run.tar.gz"
    code = gpu.reference.main(["--no-install", "--commit", COMMIT, "--results-dir",
                               str(tmp_path), "--archive", str(archive)])
    assert code == 1  # part b's step failed; part b ran all the same
    [root] = [path for path in tmp_path.iterdir() if path.name != "out"]
    assert json.loads((root / "run.json").read_text())["commit"] == COMMIT
    assert sorted(path.name for path in root.iterdir()) == ["a-test", "b-test", "run.json"]
    assert json.loads((root / "b-test" / "steps.json").read_text())[0]["status"] == "exit 1"
    assert (root / "a-test" / "one.log").read_text() == "a\n"
    with tarfile.open(archive) as tar:
        assert f"{root.name}/b-test/two.log" in tar.getnames()


def test_a_part_that_no_longer_fits_the_time_left_is_skipped_whole_saying_so(gpu, tmp_path):
    part = _part(gpu, "z", _step(gpu, "one", "print(1)"), _step(gpu, "two", "print(2)"),
                 summarise=lambda f: {"read": f.name})
    now = time.monotonic()
    folder = tmp_path / "z-late"
    gpu.reference.run_part(part, folder, {"z/one": now + 60, "z/two": now + 60},
                           ends_at=now + 3)  # its steps' estimates: 4 s in all
    entries = json.loads((folder / "steps.json").read_text())
    assert [e["status"] for e in entries] == ["skipped", "skipped"]
    assert entries[0]["reason"].startswith("needs ~4 s, ") and "left of the run's limit" in (
        entries[0]["reason"])
    assert not (folder / "one.log").exists() and not (folder / "summary.json").exists()
