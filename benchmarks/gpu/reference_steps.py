"""What the GPU reference plan is made of: a step (one command, its own log and time limit),
a part (steps in a folder of their own), the scale its commands train at (a GPU's, or the
rehearsal's on a CPU), and the command lines of parbench, pytest and the GPU tests."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from reference_estimates import Estimate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# What is carried to the GPU host beside the working tree, ignored by git (the folder's own
# .gitignore ignores everything in it; a dot folder, so mypy leaves timm's script alone).
CARRIED = HERE / ".carried"
TIMM_BENCHMARK = CARRIED / "timm-benchmark.py"
TIMM_VERSION = "1.0.28"  # benchmark.py is the same from timm 1.0.23 to 1.0.29.dev0
TIMM_HELP = (f"timm's benchmark.py is a script in timm's repository, not in its wheel: put "
             f"v{TIMM_VERSION}'s at {TIMM_BENCHMARK.relative_to(ROOT)} (or pass "
             "--timm-benchmark PATH)")
GPU_TESTS = "tests/gpu/test_gpu.py"


@dataclass(frozen=True)
class Scale:
    """The sizes the plan's commands train at. The rehearsal runs the GPU's commands (the same
    strategies, flags, parsing and refusals) on the CPU at a smaller scale: fewer rounds and
    steps, a smaller model and images."""

    device: str
    rounds: int  # trials of each configuration, in interleaved rounds
    warmup: int
    steps: int
    tutorial: tuple[str, ...]  # the tutorial's job: model, batch, image size
    splits: tuple[int, int]  # its two micro-batch sizes
    job_224: tuple[str, ...]  # timm's job: model, image size, batch (bf16)
    timm_job: tuple[str, ...]  # the same for timm's benchmark.py
    profiles: tuple[str, ...]  # parbench profile's models, sizes, precisions, micro-batches
    later_profiles: tuple[str, ...]  # those for a later run
    rehearsal: bool = False
    # FSDP's memory checked on the device (benchmarks/fsdp_memory/check.py): its configurations
    fsdp_memory: str = "gpu.json"

    @property
    def shared(self) -> str:
        """Two devices emulated on the one device."""
        return f"{self.device},{self.device}"

    @property
    def four(self) -> str:
        return ",".join([self.device] * 4)


GPU = Scale("cuda:0", 3, 2, 20,
            ("--model", "resnet50", "--batch-size", "120", "--image-size", "128"), (20, 60),
            ("--model", "resnet50", "--image-size", "224", "--batch-size", "256"),
            ("--model", "resnet50", "--img-size", "224", "-b", "256"),
            ("--model", "resnet50", "--image-size", "224", "--precision", "bf16",
             "--micro-batch", "32,64,128,256", "--channels-last"),
            ("--model", "resnet18,resnet50,vit_b_16", "--image-size", "128,224",
             "--precision", "bf16,fp32", "--micro-batch", "8,32,128"))
# On the CPU: 2 rounds (an interval needs two), 2 steps, a ResNet-18 at 32 px.
REHEARSAL = Scale("cpu", 2, 2, 2,
                  ("--model", "resnet18", "--batch-size", "8", "--image-size", "32"), (2, 4),
                  ("--model", "resnet18", "--image-size", "32", "--batch-size", "8"),
                  ("--model", "resnet18", "--img-size", "32", "-b", "8"),
                  ("--model", "resnet18", "--image-size", "32", "--precision", "bf16",
                   "--micro-batch", "2,4", "--channels-last"),
                  ("--model", "resnet18", "--image-size", "32", "--precision", "bf16,fp32",
                   "--micro-batch", "2"), rehearsal=True, fsdp_memory="rehearsal.json")


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
    """A group of steps in a folder of their own; `default` parts make the default run, and
    a `due` part joins it after them, to run with the time left."""

    letter: str
    name: str
    purpose: str
    steps: tuple[Step, ...]
    summarise: Callable[[Path], dict] | None = None  # what its records say, to print
    default: bool = True
    due: str | None = None  # why a part that is not default runs in the default run

    @property
    def folder_name(self) -> str:
        return f"{self.letter}-{self.name}"

    @property
    def estimate_s(self) -> int:
        return sum(step.estimate_s for step in self.steps)


def parbench(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "parbench", *args)


def run(scale: Scale, tag: str, *args: str, warmup: int | None = None,
        repeats: int | None = None) -> tuple[str, ...]:
    """`parbench run` into the part's folder, at the scale's rounds, steps and warm-up."""
    return parbench("run", *args, "--repeats", str(repeats or scale.rounds), "--steps",
                    str(scale.steps), "--warmup", str(warmup or scale.warmup),
                    "--results-dir", "{folder}", "--tag", tag, "--progress", "off")


def pythonpath() -> str:
    """PYTHONPATH with this folder first, where pytest's `-p per_test_timeout` finds it."""
    return os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))


def pytest(*args: str, per_test_s: int) -> tuple[str, ...]:
    """pytest naming every test as it ends (-v), each kept to `per_test_s`, junit per part."""
    return (sys.executable, "-m", "pytest", *args, "-v", "-p", "no:cacheprovider",
            "-p", "per_test_timeout", "--per-test-limit", str(per_test_s),
            "--junitxml", "{folder}/{step}-junit.xml")


def gpu_test_names() -> list[str]:
    """Every test function of the GPU tests, in file order."""
    return re.findall(r"^def (test_\w+)\(", (ROOT / GPU_TESTS).read_text(), re.M)


def per_test_s(step: Step) -> str | None:
    """The per-test limit a pytest step passes, if it has one."""
    if "--per-test-limit" in step.argv:
        return step.argv[step.argv.index("--per-test-limit") + 1]
    return None


def parbench_commands(every: list[Part]) -> list[tuple[str, list[str]]]:
    """(step name, parbench's own arguments) of every step that runs parbench."""
    return [(step.name, list(step.argv[3:])) for part in every for step in part.steps
            if step.argv[1:3] == ("-m", "parbench")]
