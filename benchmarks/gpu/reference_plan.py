"""The GPU reference run's plan, ordered by what no GPU run has measured yet: (a) the
attribution after the harness fix, (b) torch.compile's scopes and CUDA graphs against eager and
timm, (c) one-rank ddp and fsdp in bf16 at torch's defaults and tuned, (d) per-operation
profiles, (e) asv; then the parts for later runs, and correctness where the CUDA code paths
changed since it last passed. Each part is a list of commands (steps) with their estimates
(reference_estimates.py), at a GPU's scale or the rehearsal's on a CPU (reference_steps.py)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import reference_summaries as summaries
from reference_estimates import (
    ASV_MACHINE_S,
    ASV_RUN_S,
    FORKSERVER_S,
    PYTEST_START_S,
    RUN_START_S,
    SPAWN_TRIAL_S,
    TIMM_S,
    TRIAL_S,
    Estimate,
    Trials,
    planning,
    pytest_estimate,
    run_estimate,
)
from reference_steps import (
    GPU,
    GPU_TESTS,
    ROOT,
    TIMM_BENCHMARK,
    TIMM_HELP,
    Part,
    Scale,
    Step,
    gpu_test_names,
    parbench,
    pytest,
    pythonpath,
    run,
)

# The GPU tests the correctness part leaves to part h: the slowest on the H200 (a cold
# torch.compile 39.6 s, the max-batch search 35.2 s, torchrun 24.6 s, the sampler's cost, a
# timing, 6.1 s) and hsdp and pipeline-fsdp on four emulated devices (hsdp's verify is a step
# of the correctness part; the test adds pipeline-fsdp's refusal); the benchmark suites' nested
# runs; the verify test, which is a step of its own.
SLOW_TESTS = ("test_compile_is_kept_out_of_the_measured_steps",
              "test_max_batch_finds_the_limit_under_a_cap",
              "test_torchrun_measures_each_configuration_in_a_worker_on_the_gpu",
              "test_sampling_costs_less_than_one_percent",
              "test_the_two_dimensional_layouts_on_one_gpu_emulating_four")
SUITE_TESTS = ("test_pytest_benchmark_measures_the_gpu",
               "test_asv_runs_on_the_gpu_in_the_existing_environment")
AS_STEPS = ("test_verify_on_one_gpu_emulating_two",)
# PLANNING seconds of the GPU tests the H200 did not run (others: UNMEASURED_TEST_S).
PLANNED_TESTS = {
    "test_the_two_dimensional_layouts_on_four_gpus_over_nccl": 0.0,  # skipped below 4 GPUs
    "test_the_two_dimensional_layouts_on_one_gpu_emulating_four": 15.0,  # as verify-4-hsdp
    "test_pytest_benchmark_measures_the_gpu": 30.0,  # 2 of the 6 H200 pytest-benchmark's 42.8 s
    "test_asv_runs_on_the_gpu_in_the_existing_environment": 80.0,  # as asv's run
}
ASV_NO_GIT = ("asv reads a commit only through git and the repository's .git, which lack it "
              "here")
ASV_UNSAVED = (f"{ASV_NO_GIT}: it measures and prints every value into asv-run.log but saves "
               "no results")
# torch.compile's scopes and modes in the default run (b): CUDA graphs, which no GPU run has
# measured, per block and on the whole model; the rest in part f.
FIRST_MODES, LATER_MODES = ("reduce-overhead",), ("default", "max-autotune-no-cudagraphs")
# The compile job warms up longer: the first step compiles, CUDA graphs record after a step.
COMPILE_WARMUP = 5
TIMM_TRIALS = 3  # timm's benchmark.py runs once a process: its trials are runs


def _gpu_tests(name: str, tests: tuple[str, ...] | None, per_test_s: int,
               leave_out: tuple[str, ...] = ()) -> Step:
    """pytest -m gpu on `tests` (None: all but `leave_out`), its estimate from junit.xml."""
    names = gpu_test_names()
    if tests is None:
        chosen = [n for n in names if n not in leave_out]
        args = [a for n in leave_out for a in ("--deselect", f"{GPU_TESTS}::{n}")]
        argv = pytest("-m", "gpu", GPU_TESTS, *args, per_test_s=per_test_s)
    else:
        chosen = list(tests)
        argv = pytest("-m", "gpu", *(f"{GPU_TESTS}::{n}" for n in tests), per_test_s=per_test_s)
    return Step(name, argv, pytest_estimate(names, chosen, PLANNED_TESTS),
                env={"PYTHONPATH": pythonpath()})


def _attribution(scale: Scale) -> Part:
    """single whole and accumulating the same micro-batches (parbench adds it), model-parallel
    and the one-process pipeline at two splits, on one device as two. The process-per-stage
    schedules are left out: parbench refuses them where ranks share a GPU (gloo cannot send
    CUDA tensors point to point), and a refusal ends the whole command."""
    small, large = scale.splits
    trials = [Trials("single", 2), Trials("model-parallel", extra_steps=1),
              *(Trials(kind, extra_steps=2 * kind.startswith("pipeline"))
                for kind in ("single acc=20", "single acc=60", "pipeline split=20",
                             "pipeline split=60"))]
    argv = run(scale, "pipelines", "--strategy", "single,model-parallel,pipeline",
               *scale.tutorial, "--devices", scale.shared, "--split-size", f"{small},{large}")
    return Part("a", "attribution-128px", f"the tutorial's job on {scale.shared}, "
                f"{scale.rounds} interleaved trials: single against model-parallel (within "
                "noise of each other since the harness fix?), and the one-process pipeline at "
                "two splits against single accumulating the same micro-batches, eager", (
                    Step("pipelines", argv,
                         run_estimate(trials, GPU.rounds, GPU.warmup, GPU.steps)),),
                summarise=summaries.attribution)


def _timm(scale: Scale, timm_benchmark: Path, trial: int) -> Step:
    argv = (sys.executable, str(timm_benchmark), "--device", scale.device, "--bench", "train",
            *scale.timm_job, "--amp", "--amp-dtype", "bfloat16", "--channels-last",
            "--num-warm-iter", str(COMPILE_WARMUP), "--num-bench-iter", str(scale.steps))
    return Step(f"timm-{trial}", argv, Estimate(TIMM_S, "the H100's timm step on the same job"),
                needs=None if timm_benchmark.is_file() else TIMM_HELP, requires=("timm",))


def _compile_run(scale: Scale, name: str, modes: tuple[str, ...]) -> Step:
    """single on timm's job (bf16, channels_last, cuDNN's search) eager and compiled per block
    and whole, in each of `modes`: every configuration in the same interleaved rounds."""
    job = [Trials("bf16 channels_last search"),
           *(Trials("bf16 channels_last search", compiled=True) for _ in range(2 * len(modes)))]
    argv = run(scale, name, "--strategy", "single", *scale.job_224, "--precision", "bf16",
               "--devices", scale.device, "--channels-last", "--cudnn-benchmark",
               "--compile", "off,block,model", "--compile-mode", ",".join(modes),
               warmup=COMPILE_WARMUP)
    return Step(name, argv, run_estimate(job, GPU.rounds, COMPILE_WARMUP, GPU.steps,
                                         searches=1, fresh_compiles=2 * len(modes)))


def _compile_modes(scale: Scale, timm_benchmark: Path) -> Part:
    return Part("b", "compile-modes-224px", "single resnet50 at 224 px, batch 256, bf16, "
                "channels_last and cuDNN's search (timm's job): eager against torch.compile per "
                f"block and of the whole model in {', '.join(FIRST_MODES)} (CUDA graphs), "
                f"{scale.rounds} interleaved trials, beside timm's own loop run "
                f"{TIMM_TRIALS} times", (
                    _compile_run(scale, "compile-modes", FIRST_MODES),
                    *(_timm(scale, timm_benchmark, trial)
                      for trial in range(1, TIMM_TRIALS + 1))),
                summarise=summaries.compile_modes)


def _data_parallel(scale: Scale) -> Part:
    """ddp and fsdp on one rank in bf16, torch's own defaults against the tuned settings
    (--tuning), beside single."""
    trials = [Trials("single", 2), Trials("ddp N=1", 2, spawned=True),
              Trials("fsdp N=1", 2, spawned=True)]
    argv = run(scale, "data-parallel", "--strategy", "single,ddp,fsdp", *scale.tutorial,
               "--precision", "bf16", "--devices", scale.shared, "--world-size", "1",
               "--tuning", "tuned,torch")
    return Part("c", "data-parallel-bf16", "one-rank ddp and fsdp in bf16, torch's own "
                "defaults against parbench's tuned settings (bucket views, a static graph, "
                "layer-group units resharded all but the last, bf16 parameters), "
                f"{scale.rounds} interleaved trials beside single", (
                    Step("data-parallel", argv, run_estimate(
                        trials, GPU.rounds, GPU.warmup, GPU.steps)),),
                summarise=summaries.tuned_over_torch)


def _profiles(scale: Scale, letter: str = "d", name: str = "profiles",
              grid: tuple[str, ...] | None = None, default: bool = True) -> Part:
    grid = grid or scale.profiles
    count = 1
    for flag in ("--model", "--image-size", "--precision", "--micro-batch"):
        count *= len(grid[grid.index(flag) + 1].split(","))
    return Part(letter, name, "per-operation profiles of a training step on this GPU "
                "(parbench profile): each op's FLOPs, bytes and kernel time, the advisor's "
                "input for predicting GPUs that are not here", (
                    Step(name, parbench("profile", *grid, "--device", scale.device,
                                             "--into", "{folder}/profiles"),
                         planning(RUN_START_S + count * 3.0,
                                  f"start {RUN_START_S} s + {count} profiles x 3 s (a few "
                                  "warm-up and profiled steps and the trace's parse)")),),
                summarise=summaries.profiles, default=default)


def _asv(scale: Scale, asv_commit: str | None) -> Part:
    commit = ("--set-commit-hash", asv_commit) if asv_commit else ()
    keep = ("import shutil, sys; shutil.copytree('.asv/results', sys.argv[1], "
            "dirs_exist_ok=True)")
    return Part("e", "asv", "the asv suite (--quick) on the GPU, in the host's environment "
                "(launch_method spawn, timeouts of 3600 s: asv.conf.json), its results kept in "
                "the part's folder", (
                    Step("asv-machine", (sys.executable, "-m", "asv", "machine", "--yes"),
                         Estimate(ASV_MACHINE_S, "the H100's asv-machine step"),
                         requires=("asv",)),
                    Step("asv-run", (sys.executable, "-m", "asv", "run", "--python=same",
                                     "--quick", *commit),
                         Estimate(ASV_RUN_S, "the H100's asv-run step"),
                         env={"PARBENCH_ASV_DEVICES": scale.device},
                         note=None if asv_commit else ASV_UNSAVED, after="asv-machine",
                         requires=("asv",)),
                    Step("asv-results", (sys.executable, "-c", keep, "{folder}/asv-results"),
                         planning(1.0, "a copy of asv's results folder"), after="asv-run")),
                summarise=summaries.asv_results)


def _correctness(scale: Scale, due: str | None) -> Part:
    verify_2 = Estimate(PYTEST_START_S + 3.76 + FORKSERVER_S + 2 * (SPAWN_TRIAL_S + 0.1),
                        f"a process's start {PYTEST_START_S} s + the H200's verify test up to "
                        f"fsdp's crash 3.76 s + forkserver {FORKSERVER_S} s + fsdp and hsdp "
                        f"spawned, {SPAWN_TRIAL_S} s and one step each")
    verify_4 = Estimate(PYTEST_START_S + FORKSERVER_S + TRIAL_S + 2 * SPAWN_TRIAL_S,
                        f"a process's start {PYTEST_START_S} s + forkserver {FORKSERVER_S} s "
                        f"+ the baseline {TRIAL_S} s + hsdp's four ranks, twice a spawned "
                        f"trial's {SPAWN_TRIAL_S} s (PLANNING: four ranks, not two)")
    return Part("g", "correctness", "every CUDA path (pytest -m gpu, less the slowest), then "
                f"parbench verify of every strategy on {scale.shared} and of hsdp on "
                f"{scale.four}; in the default run, after the other parts, where git says a "
                "CUDA code path changed since it last passed", (
                    _gpu_tests("gpu-tests", None, 60, SLOW_TESTS + SUITE_TESTS + AS_STEPS),
                    Step("verify-2", parbench("verify", "--devices", scale.shared), verify_2),
                    Step("verify-4-hsdp", parbench("verify", "--strategy", "hsdp",
                                                   "--devices", scale.four), verify_4)),
                default=False, due=due)


def _predicted(scale: Scale) -> Step:
    """The tutorial's job PREDICTED on 2, 4 and 8 such GPUs over NVLink from a profile of
    this one: each schedule's best split, ddp and fsdp, labelled predicted."""
    splits = ",".join(map(str, scale.splits)) if scale.rehearsal else "1,3,5,8,10,12,20,40,60"
    return Step("predicted-sweep", parbench(
        "predict", "--profile-device", scale.device.split(":")[0], *scale.tutorial,
        "--devices", "2,4,8", "--split-size", splits, "--link", "nvlink4", "--profile-cache",
        "{folder}/profiles", "--csv", "{folder}/predicted-sweep.csv", "--figure",
        "{folder}/predicted-sweep.png"), Estimate(31.9, "the H200's 10 predicted-sweep step"))


def _slow_and_suites(scale: Scale, asv_commit: str | None) -> Part:
    suites = _gpu_tests("gpu-tests-suites", tuple(n for n in SUITE_TESTS
                                                  if asv_commit or "asv" not in n), 270)
    suites = replace(suites, requires=("pytest_benchmark", "asv")[:2 if asv_commit else 1],
                     note=None if asv_commit else "asv's test left out: it runs `git rev-parse "
                     f"HEAD`, and {ASV_NO_GIT}")
    env = {"PARBENCH_BENCH_DEVICES": scale.shared, "PYTHONPATH": pythonpath()}
    return Part("h", "slow-and-suites", "the slowest GPU tests, the benchmark suites' GPU "
                "tests, the pytest-benchmark suite, and the tutorial's job PREDICTED on 2, 4 "
                "and 8 such GPUs over NVLink", (
                    _gpu_tests("gpu-tests-slow", SLOW_TESTS, 120), suites,
                    Step("pytest-benchmark", pytest("benchmarks", "--benchmark-only",
                                                    "--benchmark-json",
                                                    "{folder}/benchmark.json", per_test_s=240),
                         Estimate(42.8, "the H200's 8 pytest-benchmark step"), env=env,
                         requires=("pytest_benchmark",)), _predicted(scale)), default=False)


def _fsdp_memory(scale: Scale) -> Part:
    """FSDP's peak memory on this GPU's allocator, one rank of 2 to 8 over torch's fake process
    group, beside the timing models' walk (benchmarks/fsdp_memory/check.py)."""
    configs = ROOT / "benchmarks" / "fsdp_memory" / scale.fsdp_memory
    count = len(json.loads(configs.read_text())) if configs.is_file() else 0
    return Part("j", "fsdp-memory", "FSDP's peak memory per rank at 224 px (resnet50 and "
                "vit_b_16, fsdp and hsdp, fp32 and bf16) on this GPU's allocator and as "
                "FSDPMemTracker counts it, one rank of 2 to 8 over torch's fake process group, "
                "beside the timing models' walk (version 20: checked on CPU only)", (
                    Step("fsdp-memory", (sys.executable, str(configs.parent / "check.py"),
                                         str(configs), "--into", "{folder}/fsdp-memory"),
                         planning(count * 30.0, f"{count} configurations x 30 s (a fresh "
                                  "process, CUDA's start, three steps, a profile on the GPU)"),
                         needs=None if count else f"{configs} is missing"),),
                default=False)


def parts(scale: Scale = GPU, timm_benchmark: Path | None = None,
          asv_commit: str | None = None, correctness_due: str | None = None) -> list[Part]:
    """Every part in priority order: the default run's (a) to (e), then the later ones;
    `asv_commit` is what asv can save its results under (None: no git, or no .git);
    `correctness_due` why the correctness part joins the default run (None: it does not)."""
    timm_benchmark = timm_benchmark or TIMM_BENCHMARK
    return [
        _attribution(scale), _compile_modes(scale, timm_benchmark), _data_parallel(scale),
        _profiles(scale), _asv(scale, asv_commit),
        Part("f", "compile-modes-later", "(b) in torch.compile's other modes: "
             f"{', '.join(LATER_MODES)}, per block and of the whole model, beside eager",
             (_compile_run(scale, "compile-modes-later", LATER_MODES),),
             summarise=summaries.compile_modes, default=False),
        _correctness(scale, correctness_due),
        _slow_and_suites(scale, asv_commit),
        _profiles(scale, "i", "profiles-later", scale.later_profiles, default=False),
        _fsdp_memory(scale),
    ]


def in_default_run(part: Part) -> bool:
    return part.default or part.due is not None


__all__ = ["AS_STEPS", "ROOT", "SLOW_TESTS", "SUITE_TESTS", "in_default_run", "parts"]
