"""The GPU reference run's chunks, in priority order: each a group of commands (steps) that
fits one 10-minute device command and writes into a folder of its own."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHUNK_LIMIT_S = 570  # each chunk ends well inside a 10-minute command
# Each step's estimate: its time on an H200 on 2026-11-26 (results/20261126T004029Z-gpu-
# reference-h200) times 1.5, rounded up; chunks 3 and 9 and timm's loop have not run on a GPU
# yet, and keep the planning figures they were written with.
SPLITS = "1,3,5,8,10,12,20,40,60"  # the tutorial's split-size sweep
TIMM_HELP = ("timm's benchmark.py is a script in timm's repository, not in its wheel: pass "
             "--timm-benchmark PATH to a copy of it at the host's timm version")
GPU_TESTS = "tests/gpu/test_gpu.py"
# The GPU tests past the first chunk's time: a cold torch.compile, the max-batch search and
# torchrun; then the nested runs of the benchmark suites.
SLOW_TESTS = ("test_compile_is_kept_out_of_the_measured_steps",
              "test_max_batch_finds_the_limit_under_a_cap",
              "test_torchrun_measures_each_configuration_in_a_worker_on_the_gpu")
SUITE_TESTS = ("test_pytest_benchmark_measures_the_gpu",
               "test_asv_runs_on_the_gpu_in_the_existing_environment")
ASV_NO_GIT = "asv reads a commit only through git and the repository's .git, missing here"
ASV_UNSAVED = (f"{ASV_NO_GIT}: it measures and prints every value into asv-run.log but saves "
               "no results")
@dataclass(frozen=True)
class Step:
    """One command of a chunk. `{name}` in its arguments is filled from what earlier steps
    found (`finds`: a name and how to read it from the step's folder)."""

    name: str
    argv: tuple[str, ...]
    estimate_s: int
    env: dict = field(default_factory=dict)
    finds: tuple[str, Callable[[Path], str]] | None = None
    needs: str | None = None  # why it cannot run here, if it cannot (recorded as skipped)
    note: str | None = None  # how it runs differently here (printed and recorded)


@dataclass(frozen=True)
class Chunk:
    """A group of steps that runs inside CHUNK_LIMIT_S, into a folder of its own."""

    number: int
    name: str
    purpose: str
    steps: tuple[Step, ...]
    summarise: Callable[[Path], dict] | None = None  # what the chunk's records say, to print
    requires: tuple[str, ...] = ()  # modules it needs beyond parbench's, checked before running

    @property
    def folder_name(self) -> str:
        return f"{self.number}-{self.name}"

    @property
    def estimate_s(self) -> int:
        return sum(step.estimate_s for step in self.steps)


def _parbench(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "parbench", *args)


def _run(tag: str, *args: str, steps: int = 20, warmup: int = 5) -> tuple[str, ...]:
    return _parbench("run", *args, "--steps", str(steps), "--warmup", str(warmup),
                     "--results-dir", "{folder}", "--tag", tag, "--progress", "off")


def _largest_batch(folder: Path) -> str:
    """max-batch's answer: the largest batch among its trials that trained."""
    trials = [r for records in (folder / "max-batch").glob("*/records.json")
              for r in json.loads(records.read_text())]
    batches = [r["global_batch"] for r in trials if r["status"] == "ok"]
    if not batches:
        raise RuntimeError(f"max-batch found no batch that trains (trials in {folder})")
    return str(max(batches))


def _records(folder: Path) -> list[dict]:
    """The records of the parbench runs a chunk's steps wrote (max-batch's trials apart)."""
    return [r for path in sorted(folder.glob("*/records.json"))
            for r in json.loads(path.read_text())]


def _timm_ratio(chunk_folder: Path) -> dict:
    """parbench `single` against timm's own training loop on the same job (bf16 autocast,
    channels_last, batch 256, 224 px, cuDNN's algorithm search on), both measured in this
    chunk."""
    ours = [r for r in _records(chunk_folder) if r["status"] == "ok" and r["precision"] == "bf16"
            and r["channels_last"] and r["global_batch"] == 256 and not r["compile"]
            and r.get("cudnn_benchmark")]
    log = chunk_folder / "timm.log"
    found = re.findall(r'"(?:train_)?samples_per_sec":\s*([0-9.]+)',
                       log.read_text() if log.exists() else "")
    summary = {"parbench_img_s": ours[0]["throughput_ips"] if ours else None,
               "timm_img_s": float(found[-1]) if found else None}
    if summary["parbench_img_s"] and summary["timm_img_s"]:
        summary["parbench_over_timm"] = summary["parbench_img_s"] / summary["timm_img_s"]
    return summary


def _throughputs(chunk_folder: Path) -> dict:
    """Each measured configuration's img/s and MFU, by its label."""
    return {f"{r['strategy']} {r['precision']}{' channels_last' if r['channels_last'] else ''}"
            f"{' compiled' if r['compile'] else ''} batch {r['global_batch']}":
            {"img_s": r["throughput_ips"], "mfu": r.get("mfu")}
            for r in _records(chunk_folder) if r["status"] == "ok"}


def chunks(device: str, timm_benchmark: str | None, asv_commit: str | None = None) -> list[Chunk]:
    """The reference run, in priority order; `asv_commit` is what asv can save its results
    under (None where it cannot read a commit: no git, or no .git)."""
    return (_gpu_test_chunks(asv_commit is not None) + _one_gpu_chunks(device, timm_benchmark)
            + _emulated_chunks(f"{device},{device}", asv_commit) + [_prediction_chunk()])


def _pythonpath() -> str:
    """PYTHONPATH with this folder first, where pytest's `-p per_test_timeout` finds it."""
    return os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def _pytest(*args: str, per_test_s: int) -> tuple[str, ...]:
    """pytest naming every test as it ends (-v), each kept to `per_test_s`, junit per chunk."""
    return (sys.executable, "-m", "pytest", *args, "-v", "-p", "no:cacheprovider",
            "-p", "per_test_timeout", "--per-test-limit", str(per_test_s),
            "--junitxml", "{folder}/junit.xml")


def _gpu_test_chunks(asv_can_save: bool) -> list[Chunk]:
    """Chunks 1-3: `pytest -m gpu` in three parts that each fit a chunk: every CUDA path; the
    slow tests; the benchmark suites' nested runs."""
    deselect = [arg for name in SLOW_TESTS + SUITE_TESTS
                for arg in ("--deselect", f"{GPU_TESTS}::{name}")]
    suites = [f"{GPU_TESTS}::{name}" for name in SUITE_TESTS
              if asv_can_save or "asv" not in name]
    asv_note = None if asv_can_save else ("asv's test left out: it runs `git rev-parse HEAD`, "
                                          f"and {ASV_NO_GIT}")
    env = {"PYTHONPATH": _pythonpath()}
    return [
        Chunk(1, "gpu-tests", "every CUDA path (pytest -m gpu), less the tests of chunks 2 and 3", (
            Step("gpu-tests", _pytest("-m", "gpu", GPU_TESTS, *deselect, per_test_s=150), 110,
                 env=env),)),
        Chunk(2, "gpu-tests-slow", "the slow GPU tests: a cold torch.compile, the max-batch "
              "search and torchrun", (
                  Step("gpu-tests", _pytest("-m", "gpu", *(f"{GPU_TESTS}::{name}"
                                                           for name in SLOW_TESTS),
                                            per_test_s=300), 180, env=env),)),
        Chunk(3, "gpu-tests-suites", "the GPU tests of the benchmark suites: nested runs of "
              "pytest-benchmark and asv", (
                  Step("gpu-tests", _pytest("-m", "gpu", *suites, per_test_s=270), 450,
                       env=env, note=asv_note),),
              requires=("pytest_benchmark", "asv") if asv_can_save else ("pytest_benchmark",)),
    ]


def _prediction_chunk() -> Chunk:
    """Chunk 10: from this GPU's profile, the tutorial's job PREDICTED on 2, 4 and 8 such GPUs
    over NVLink: each schedule's best split, ddp and fsdp (issue 24's part 6), and what
    `parbench recommend` picks there within 80 GB a GPU (issue 35's part 4; its log is the
    recommendation, the profiles the predicted sweep's)."""
    recommend = [Step(f"recommend-{count}-gpus", _parbench(
        "recommend", "--profile-device", "cuda", "--model", "resnet50", "--image-size", "128",
        "--batch-size", "120", "--devices", str(count), "--split-size", "5,10,20",
        "--link", "nvlink4", "--memory-mib", "80000", "--top", "8", "--profile-cache",
        "{folder}/profiles"), 20) for count in (2, 4, 8)]
    return Chunk(10, "predicted", "the tutorial's job (resnet50, batch 120, 128 px) PREDICTED "
                 f"on 2, 4 and 8 of this GPU over nvlink4 at splits {SPLITS}, from a "
                 "profile of this GPU, and recommend's pick on each", (
                     Step("predicted-sweep", _parbench(
                         "predict", "--profile-device", "cuda", "--model", "resnet50",
                         "--image-size", "128", "--batch-size", "120", "--devices", "2,4,8",
                         "--split-size", SPLITS, "--link", "nvlink4", "--profile-cache",
                         "{folder}/profiles", "--csv", "{folder}/predicted-sweep.csv",
                         "--figure", "{folder}/predicted-sweep.png"), 50), *recommend))


def _one_gpu_chunks(device: str, timm_benchmark: str | None) -> list[Chunk]:
    """Chunks 4-5: single resnet50 at 224 px beside timm's loop, then at its largest batch."""
    resnet50_224 = ("--strategy", "single", "--model", "resnet50", "--image-size", "224",
                    "--devices", device)
    timm = (sys.executable, timm_benchmark or "<timm benchmark.py>", "--bench", "train",
            "--model", "resnet50", "--img-size", "224", "-b", "256", "--amp", "--amp-dtype",
            "bfloat16", "--channels-last", "--num-warm-iter", "5", "--num-bench-iter", "20")
    return [
        Chunk(4, "resnet50-224", "single resnet50 at 224 px: bf16 + channels_last at batch "
              "256 beside timm's own loop on the same job, and the fp32 / bf16 ablation", (
                  # cuDNN's algorithm search on, as timm's benchmark.py sets it.
                  Step("bf16-channels-last", _run("bf16-channels-last", *resnet50_224,
                                                  "--batch-size", "256", "--precision", "bf16",
                                                  "--channels-last", "--cudnn-benchmark"), 40),
                  Step("ablation", _run("ablation", *resnet50_224, "--batch-size", "256",
                                        "--precision", "fp32,bf16"), 30),
                  # Last: a timm that fails (another version, not installed) ends the chunk.
                  Step("timm", timm, 60, needs=None if timm_benchmark else TIMM_HELP)),
              summarise=lambda folder: {**_timm_ratio(folder), **_throughputs(folder)}),
        Chunk(5, "resnet50-224-large", "bf16 + channels_last at the largest batch max-batch "
              "finds (up to 2048), and compiled at 256", (
                  Step("max-batch", _parbench("max-batch", *resnet50_224, "--precision",
                                              "bf16", "--channels-last", "--start", "256",
                                              "--limit", "2048", "--results-dir",
                                              "{folder}/max-batch"),
                       30, finds=("max_batch", _largest_batch)),
                  Step("largest-batch", _run("largest-batch", *resnet50_224, "--batch-size",
                                             "{max_batch}", "--precision", "bf16",
                                             "--channels-last"), 40),
                  Step("compiled", _run("compiled", *resnet50_224, "--batch-size", "256",
                                        "--precision", "bf16", "--channels-last",
                                        "--compile"), 75)),
              summarise=_throughputs),
    ]


def _asv_steps(shared: str, asv_commit: str | None) -> tuple[Step, ...]:
    """asv in the host's environment, its results saved under `asv_commit` where there is one."""
    commit = ("--set-commit-hash", asv_commit) if asv_commit else ()
    return (Step("asv-machine", (sys.executable, "-m", "asv", "machine", "--yes"), 10),
            Step("asv-run", (sys.executable, "-m", "asv", "run", "--python=same", "--quick",
                             *commit), 480, env={"PARBENCH_ASV_DEVICES": shared},
                 note=None if asv_commit else ASV_UNSAVED))


def _emulated_chunks(shared: str, asv_commit: str | None) -> list[Chunk]:
    """Chunks 6-9: one GPU emulating two (`shared`), then the benchmark suites on it."""
    return [
        Chunk(6, "tutorial", "the tutorial's experiment on one GPU emulating two: resnet50, "
              "batch 120, 128 px, single (whole and accumulating), model-parallel, pipeline at "
              f"splits {SPLITS}", (
                  Step("tutorial", _run("tutorial", "--strategy",
                                        "single,model-parallel,pipeline", "--model",
                                        "resnet50", "--batch-size", "120", "--image-size", "128",
                                        "--devices", shared, "--split-size", SPLITS,
                                        steps=10, warmup=3), 220),)),
        Chunk(7, "data-parallel", "ddp and fsdp on one GPU emulating two (gloo), world sizes "
              "1 and 2, against single", (
                  Step("data-parallel", _run("data-parallel", "--strategy", "single,ddp,fsdp",
                                             "--model", "resnet50", "--batch-size", "128",
                                             "--image-size", "128", "--devices", shared,
                                             "--world-size", "1,2", steps=10, warmup=3),
                       60),)),
        Chunk(8, "pytest-benchmark", "the pytest-benchmark suite on the GPU", (
            Step("pytest-benchmark", _pytest("benchmarks", "--benchmark-only", "--benchmark-json",
                                             "{folder}/benchmark.json", per_test_s=240), 65,
                 env={"PARBENCH_BENCH_DEVICES": shared, "PYTHONPATH": _pythonpath()}),),
              requires=("pytest_benchmark",)),
        Chunk(9, "asv", "the asv suite on the GPU, in the host's environment",
              _asv_steps(shared, asv_commit), requires=("asv",)),
    ]


def per_test_s(chunk: Chunk) -> str | None:
    """The per-test limit a chunk's pytest step passes, if it has one."""
    for step in chunk.steps:
        if "--per-test-limit" in step.argv:
            return step.argv[step.argv.index("--per-test-limit") + 1]
    return None


