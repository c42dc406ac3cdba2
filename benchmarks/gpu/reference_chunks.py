"""The GPU reference run's plan: its parts in priority order, (a) correctness, (b) attribution
at 128 px, (c) resnet50 at 224 px in bf16 against timm's own loop, (d) asv, each a list of
commands (steps) with their estimates (reference_estimates.py); then the parts for later
loans, which the default run leaves out."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from reference_estimates import (
    FORKSERVER_S,
    PYTEST_START_S,
    RUN_START_S,
    SEARCH_S,
    SPAWN_TRIAL_S,
    TRIAL_S,
    Estimate,
    Trials,
    planning,
    pytest_estimate,
    run_estimate,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# What a session carries to the GPU host beside the working tree, ignored by git (the folder's
# own .gitignore ignores everything in it; a dot folder, so mypy leaves timm's script alone).
CARRIED = HERE / ".carried"
TIMM_BENCHMARK = CARRIED / "timm-benchmark.py"
TIMM_VERSION = "1.0.28"  # benchmark.py is the same from timm 1.0.23 to 1.0.29.dev0
TIMM_HELP = (f"timm's benchmark.py is a script in timm's repository, not in its wheel: put "
             f"v{TIMM_VERSION}'s at {TIMM_BENCHMARK.relative_to(ROOT)} (or pass "
             "--timm-benchmark PATH)")
GPU_TESTS = "tests/gpu/test_gpu.py"
# The GPU tests the default run leaves to a later loan (part e): the slowest on the H200 (a
# cold torch.compile 39.6 s, the max-batch search 35.2 s, torchrun 24.6 s, the sampler's cost,
# a timing, 6.1 s) and hsdp and pipeline-fsdp on four emulated devices (hsdp's verify is step
# a/verify-4-hsdp; the test adds pipeline-fsdp's refusal); the benchmark suites' nested runs
# are part f's; the verify test is step a/verify-2.
SLOW_TESTS = ("test_compile_is_kept_out_of_the_measured_steps",
              "test_max_batch_finds_the_limit_under_a_cap",
              "test_torchrun_measures_each_configuration_in_a_worker_on_the_gpu",
              "test_sampling_costs_less_than_one_percent",
              "test_the_two_dimensional_layouts_on_one_gpu_emulating_four")
SUITE_TESTS = ("test_pytest_benchmark_measures_the_gpu",
               "test_asv_runs_on_the_gpu_in_the_existing_environment")
AS_STEPS = ("test_verify_on_one_gpu_emulating_two",)  # step a/verify-2, its table in its log
# PLANNING seconds of the GPU tests the H200 did not run (others: UNMEASURED_TEST_S).
PLANNED_TESTS = {
    "test_the_two_dimensional_layouts_on_four_gpus_over_nccl": 0.0,  # skipped below 4 GPUs
    "test_the_two_dimensional_layouts_on_one_gpu_emulating_four": 15.0,  # as verify-4-hsdp
    "test_pytest_benchmark_measures_the_gpu": 30.0,  # 2 of the 6 H200 pytest-benchmark's 42.8 s
    "test_asv_runs_on_the_gpu_in_the_existing_environment": 80.0,  # as step d/asv-run
}
ASV_NO_GIT = ("asv reads a commit only through git and the repository's .git, which lack it "
              "here")
ASV_UNSAVED = (f"{ASV_NO_GIT}: it measures and prints every value into asv-run.log but saves "
               "no results")
# (b)'s measurement: 3 trials in interleaved rounds of 2 warm-up + 30 measured steps.
ROUNDS, WARMUP, STEPS = 3, 2, 30
TUTORIAL = ("--model", "resnet50", "--batch-size", "120", "--image-size", "128")
RESNET50_224 = ("--strategy", "single", "--model", "resnet50", "--image-size", "224",
                "--batch-size", "256", "--precision", "bf16")


@dataclass(frozen=True)
class Step:
    """One command of a part: its own log and time limit; `after` names an earlier step of
    its part that must have succeeded for it to run."""

    name: str
    argv: tuple[str, ...]
    estimate: Estimate
    env: dict[str, str] = field(default_factory=dict)
    needs: str | None = None  # why it cannot run here, if it cannot (recorded as skipped)
    note: str | None = None  # how it runs differently here (printed and recorded)
    after: str | None = None
    requires: tuple[str, ...] = ()  # modules beyond parbench's, checked before running

    @property
    def estimate_s(self) -> int:
        return self.estimate.seconds


@dataclass(frozen=True)
class Part:
    """A group of steps in a folder of its own; `default` parts make the default run."""

    letter: str
    name: str
    purpose: str
    steps: tuple[Step, ...]
    summarise: Callable[[Path], dict] | None = None  # what its records say, to print
    default: bool = True

    @property
    def folder_name(self) -> str:
        return f"{self.letter}-{self.name}"

    @property
    def estimate_s(self) -> int:
        return sum(step.estimate_s for step in self.steps)


def _parbench(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "parbench", *args)


def _run(tag: str, *args: str, steps: int = STEPS, warmup: int = WARMUP,
         repeats: int = ROUNDS) -> tuple[str, ...]:
    return _parbench("run", *args, "--repeats", str(repeats), "--steps", str(steps), "--warmup",
                     str(warmup), "--results-dir", "{folder}", "--tag", tag, "--progress", "off")


def _pythonpath() -> str:
    """PYTHONPATH with this folder first, where pytest's `-p per_test_timeout` finds it."""
    return os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def _pytest(*args: str, per_test_s: int) -> tuple[str, ...]:
    """pytest naming every test as it ends (-v), each kept to `per_test_s`, junit per part."""
    return (sys.executable, "-m", "pytest", *args, "-v", "-p", "no:cacheprovider",
            "-p", "per_test_timeout", "--per-test-limit", str(per_test_s),
            "--junitxml", "{folder}/{step}-junit.xml")


def gpu_test_names() -> list[str]:
    """Every test function of the GPU tests, in file order."""
    return re.findall(r"^def (test_\w+)\(", (ROOT / GPU_TESTS).read_text(), re.M)


def _gpu_tests(name: str, tests: tuple[str, ...] | None, per_test_s: int,
               leave_out: tuple[str, ...] = ()) -> Step:
    """pytest -m gpu on `tests` (None: all but `leave_out`), its estimate from junit.xml."""
    names = gpu_test_names()
    if tests is None:
        chosen = [n for n in names if n not in leave_out]
        args = [a for n in leave_out for a in ("--deselect", f"{GPU_TESTS}::{n}")]
        argv = _pytest("-m", "gpu", GPU_TESTS, *args, per_test_s=per_test_s)
    else:
        chosen = list(tests)
        argv = _pytest("-m", "gpu", *(f"{GPU_TESTS}::{n}" for n in tests), per_test_s=per_test_s)
    return Step(name, argv, pytest_estimate(names, chosen, PLANNED_TESTS),
                env={"PYTHONPATH": _pythonpath()})


def _correctness(shared: str, four: str) -> Part:
    verify_2 = Estimate(PYTEST_START_S + 3.76 + FORKSERVER_S + 2 * (SPAWN_TRIAL_S + 0.1),
                        f"a process's start {PYTEST_START_S} s + the H200's verify test up to "
                        f"fsdp's crash 3.76 s + forkserver {FORKSERVER_S} s + fsdp and hsdp "
                        f"spawned, {SPAWN_TRIAL_S} s and one step each")
    verify_4 = Estimate(PYTEST_START_S + FORKSERVER_S + TRIAL_S + 2 * SPAWN_TRIAL_S,
                        f"a process's start {PYTEST_START_S} s + forkserver {FORKSERVER_S} s "
                        f"+ the baseline {TRIAL_S} s + hsdp's four ranks, twice a spawned "
                        f"trial's {SPAWN_TRIAL_S} s (PLANNING: four ranks, not two)")
    return Part("a", "correctness", "every CUDA path (pytest -m gpu, less the slowest), then "
                f"parbench verify of every strategy on {shared} and of hsdp on {four}", (
                    _gpu_tests("gpu-tests", None, 60, SLOW_TESTS + SUITE_TESTS + AS_STEPS),
                    Step("verify-2", _parbench("verify", "--devices", shared), verify_2),
                    Step("verify-4-hsdp", _parbench("verify", "--strategy", "hsdp",
                                                    "--devices", four), verify_4)))


def _pipelines(shared: str, compiled: bool) -> Step:
    """single whole and accumulating the same micro-batches (parbench adds it), model-parallel
    and the pipelines at splits 20 and 60, eager or compiled. The process-per-stage schedules
    are left out: parbench refuses them where ranks share a GPU (gloo cannot send CUDA tensors
    point to point), and a refusal ends the whole command."""
    trials = [Trials("single", 2, compiled=compiled),
              Trials("model-parallel", compiled=compiled, extra_steps=1),
              *(Trials(kind, compiled=compiled, extra_steps=2 * kind.startswith("pipeline"))
                for kind in ("single acc=20", "single acc=60", "pipeline split=20",
                             "pipeline split=60"))]
    name = "pipelines-compiled" if compiled else "pipelines"
    argv = _run(name, "--strategy", "single,model-parallel,pipeline", *TUTORIAL,
                "--devices", shared, "--split-size", "20,60",
                *(("--compile", "on") if compiled else ()))
    # Each block compiled in place: the whole model, model-parallel's stages (batch 120) and
    # a split's micro-batches and pipeline stages share their blocks' graphs.
    return Step(name, argv, run_estimate(trials, ROUNDS, WARMUP, STEPS,
                                         compiles=3 if compiled else 0))


def _data_parallel(shared: str) -> Step:
    """ddp and fsdp on one rank, torch's defaults against the tuned settings (each on/off or
    value pair a configuration of its own), against single."""
    trials = [Trials("single", 2), Trials("ddp N=1", 4, spawned=True),
              Trials("fsdp N=1", 4, spawned=True)]
    return Step("data-parallel", _run(
        "data-parallel", "--strategy", "single,ddp,fsdp", *TUTORIAL, "--devices", shared,
        "--world-size", "1", "--gradient-as-bucket-view", "on,off", "--static-graph", "on,off",
        "--fsdp-units", "block,group", "--reshard-after-forward", "yes,except-last"),
        run_estimate(trials, ROUNDS, WARMUP, STEPS))


def _data_parallel_predicted() -> Step:
    """The data-parallel step's run predicted on this GPU: its profiles, and the fixed costs of
    ddp and fsdp on one rank measured by their probes (parbench.advisor.fixed_costs), each
    beside what the run measured: what version 8's one-rank costs are on a GPU."""
    return Step("data-parallel-predicted", _parbench(
        "predict", "{folder}/*-data-parallel", "--link", "nvlink4"),
        planning(RUN_START_S + FORKSERVER_S + 2 * 10.0 + 2 * (SPAWN_TRIAL_S + 10 * 0.05),
                 f"start {RUN_START_S} s + forkserver {FORKSERVER_S} s + two profiles "
                 f"(micro-batch 120 and 2) about 10 s each + the torch-default ddp's and "
                 f"fsdp's probes, a spawned trial's {SPAWN_TRIAL_S} s and 10 steps of about "
                 "50 ms each"), after="data-parallel")


def _timm_step(device: str, timm_benchmark: Path) -> Step:
    found = timm_benchmark.is_file()
    argv = (sys.executable, str(timm_benchmark), "--device", device, "--bench", "train",
            "--model", "resnet50", "--img-size", "224", "-b", "256", "--amp", "--amp-dtype",
            "bfloat16", "--channels-last", "--num-warm-iter", str(WARMUP + 3),
            "--num-bench-iter", str(STEPS))
    estimate = planning(PYTEST_START_S + SEARCH_S + (WARMUP + 3 + STEPS) * 0.0555,
                        f"a process's start {PYTEST_START_S} s + cuDNN's search {SEARCH_S} s + "
                        "35 steps at parbench's 55.5 ms on the same job (H200, 4 "
                        "bf16-channels-last)")
    return Step("timm", argv, estimate, needs=None if found else TIMM_HELP, requires=("timm",))


def _resnet50_224(device: str, timm_benchmark: Path) -> Part:
    job = [Trials("bf16 channels_last search")]
    return Part("c", "resnet50-224px-bf16", "single resnet50 at 224 px, batch 256, bf16 + "
                "channels_last + cuDNN's search, as timm's benchmark.py trains it, against "
                "timm's own loop on the same job", (
                    Step("timm-job", _run("timm-job", *RESNET50_224, "--devices", device,
                                          "--channels-last", "--cudnn-benchmark",
                                          warmup=WARMUP + 3, repeats=1),
                         run_estimate(job, 1, WARMUP + 3, STEPS, searches=1)),
                    _timm_step(device, timm_benchmark)),
                summarise=lambda folder: {**timm_ratio(folder), **throughputs(folder)})


def _asv(device: str, asv_commit: str | None) -> Part:
    commit = ("--set-commit-hash", asv_commit) if asv_commit else ()
    setup = RUN_START_S + FORKSERVER_S + 12 * (SPAWN_TRIAL_S + 0.7) + 9 * 1.0
    return Part("d", "asv", "the asv suite (--quick) on the GPU, in the host's environment "
                "(launch_method spawn, timeouts of 3600 s: asv.conf.json)", (
                    Step("asv-machine", (sys.executable, "-m", "asv", "machine", "--yes"),
                         planning(3, "asv writes its machine file"), requires=("asv",)),
                    Step("asv-run", (sys.executable, "-m", "asv", "run", "--python=same",
                                     "--quick", *commit),
                         planning(setup + 5 + 49 * 0.3, f"setup_cache measures the suite on "
                                  f"{device} (single, ddp, fsdp and ddp, fsdp's scaling, 3 "
                                  f"trials: start {RUN_START_S} s + forkserver {FORKSERVER_S} "
                                  f"s + 12 spawned trials x {SPAWN_TRIAL_S + 0.7:.1f} s + 9 "
                                  "in-process x 1 s) + discovery 5 s + 49 benchmark processes "
                                  "x 0.3 s"), env={"PARBENCH_ASV_DEVICES": device},
                         note=None if asv_commit else ASV_UNSAVED, after="asv-machine",
                         requires=("asv",))))


def _later(device: str, shared: str, asv_commit: str | None) -> list[Part]:
    """Parts for later loans (--parts e, f, g): not in the default run."""
    apart = [Step(f"bf16-{name}", _run(f"bf16-{name}", *RESNET50_224, "--devices", device,
                                       *flags, warmup=WARMUP + 3, repeats=1),
                  run_estimate([Trials("bf16")], 1, WARMUP + 3, STEPS,
                               searches=int("--cudnn-benchmark" in flags)))
             for name, flags in (("nchw", ()), ("nchw-search", ("--cudnn-benchmark",)),
                                 ("channels-last", ("--channels-last",)))]
    suites = _gpu_tests("gpu-tests-suites", tuple(n for n in SUITE_TESTS
                                                  if asv_commit or "asv" not in n), 270)
    suites = replace(suites, requires=("pytest_benchmark", "asv")[:2 if asv_commit else 1],
                     note=None if asv_commit else "asv's test left out: it runs `git rev-parse "
                     f"HEAD`, and {ASV_NO_GIT}")
    env = {"PARBENCH_BENCH_DEVICES": shared, "PYTHONPATH": _pythonpath()}
    return [
        Part("e", "data-parallel-and-slow", "(b)'s ddp and fsdp on one rank at torch's "
             "defaults and tuned, (c)'s channels_last and cuDNN's search apart, and the slow "
             "GPU tests, and (b)'s ddp and fsdp predicted with their fixed costs probed",
             (_data_parallel(shared), _data_parallel_predicted(), *apart,
              _gpu_tests("gpu-tests-slow", SLOW_TESTS, 120)), default=False),
        Part("f", "suites", "the benchmark suites' GPU tests, the pytest-benchmark suite, and "
             "the tutorial's job PREDICTED on 2, 4 and 8 such GPUs over NVLink", (
            suites,
            Step("pytest-benchmark", _pytest("benchmarks", "--benchmark-only",
                                             "--benchmark-json", "{folder}/benchmark.json",
                                             per_test_s=240),
                 Estimate(42.8, "the H200's 8 pytest-benchmark step"), env=env,
                 requires=("pytest_benchmark",)), _predicted()), default=False),
        Part("g", "compiled-128px", "(b) with every block compiled (torch.compile, "
             "dynamic=False): its three batch shapes compiled in the first round; on the H100 "
             "each compiled step was host-bound and 1.27-1.87x the eager one",
             (_pipelines(shared, compiled=True),), default=False),
    ]


def _predicted() -> Step:
    """The tutorial's job PREDICTED on 2, 4 and 8 such GPUs over NVLink from a profile of
    this one: each schedule's best split, ddp and fsdp, labelled predicted."""
    return Step("predicted-sweep", _parbench(
        "predict", "--profile-device", "cuda", "--model", "resnet50", "--image-size", "128",
        "--batch-size", "120", "--devices", "2,4,8", "--split-size", "1,3,5,8,10,12,20,40,60",
        "--link", "nvlink4", "--profile-cache", "{folder}/profiles", "--csv",
        "{folder}/predicted-sweep.csv", "--figure", "{folder}/predicted-sweep.png"),
        Estimate(31.9, "the H200's 10 predicted-sweep step"))


def parts(device: str = "cuda:0", timm_benchmark: Path | None = None,
          asv_commit: str | None = None) -> list[Part]:
    """Every part, in priority order: the default run's (a) to (d), then the later ones;
    `asv_commit` is what asv can save its results under (None: no git, or no .git)."""
    shared, four = f"{device},{device}", ",".join([device] * 4)
    return [_correctness(shared, four),
            Part("b", "attribution-128px", "the tutorial's job (resnet50, batch 120, 128 px, "
                 f"fp32) on {shared}, {ROUNDS} interleaved trials of {STEPS} steps: single "
                 "against model-parallel, and the pipelines at splits 20 and 60 against single "
                 "accumulating the same micro-batches, eager (compiled: part g; ddp and fsdp: "
                 "part e)", (_pipelines(shared, compiled=False),)),
            _resnet50_224(device, timm_benchmark or TIMM_BENCHMARK),
            _asv(device, asv_commit), *_later(device, shared, asv_commit)]


def _records(folder: Path) -> list[dict]:
    """The records of the parbench runs a part's steps wrote."""
    return [r for path in sorted(folder.glob("*/records.json"))
            for r in json.loads(path.read_text())]


def timm_ratio(folder: Path) -> dict:
    """parbench `single` against timm's own training loop on the same job (bf16 autocast,
    channels_last, batch 256, 224 px, cuDNN's algorithm search on), both measured here."""
    ours = [r for r in _records(folder) if r["status"] == "ok" and r["precision"] == "bf16"
            and r["channels_last"] and r["global_batch"] == 256 and not r["compile"]
            and r.get("cudnn_benchmark")]
    log = folder / "timm.log"
    found = re.findall(r'"(?:train_)?samples_per_sec":\s*([0-9.]+)',
                       log.read_text() if log.exists() else "")
    summary = {"parbench_img_s": ours[0]["throughput_ips"] if ours else None,
               "timm_img_s": float(found[-1]) if found else None}
    if summary["parbench_img_s"] and summary["timm_img_s"]:
        summary["parbench_over_timm"] = summary["parbench_img_s"] / summary["timm_img_s"]
    return summary


def throughputs(folder: Path) -> dict:
    """Each measured configuration's img/s and MFU, by its label."""
    return {f"{r['strategy']} {r['precision']}{' channels_last' if r['channels_last'] else ''}"
            f"{' cudnn_search' if r.get('cudnn_benchmark') else ''}"
            f"{' compiled' if r['compile'] else ''} batch {r['global_batch']}":
            {"img_s": r["throughput_ips"], "mfu": r.get("mfu")}
            for r in _records(folder) if r["status"] == "ok"}


def per_test_s(step: Step) -> str | None:
    """The per-test limit a pytest step passes, if it has one."""
    if "--per-test-limit" in step.argv:
        return step.argv[step.argv.index("--per-test-limit") + 1]
    return None


def parbench_commands(every: list[Part]) -> list[tuple[str, list[str]]]:
    """(step name, parbench's own arguments) of every step that runs parbench."""
    return [(step.name, list(step.argv[3:])) for part in every for step in part.steps
            if step.argv[1:3] == ("-m", "parbench")]
