"""Each step's time estimate for the GPU reference run, from what one H200 measured on
2026-11-26 (results/20261126T004029Z-gpu-reference-h200) and, where it measured more, one H100
on 2026-11-27 (results/20261127T011008Z-gpu-reference-h100): each step's seconds in its
steps.json, each test's in junit.xml, each configuration's step times, first step and compile
in its run's records.json. A step's estimate is that arithmetic on the new step's work
(configurations x trials x steps, plus the starts, set-ups and compiles those times hold),
times MARGIN; where neither measured anything comparable, a planning figure, labelled as such."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "results" / "20261126T004029Z-gpu-reference-h200"
H100 = ROOT / "results" / "20261127T011008Z-gpu-reference-h100"
# Every estimate is 1.2 times its arithmetic: an H100 (less memory bandwidth than the H200)
# may be lent, a new code path may be slower, and the arithmetic below leaves out what was
# not measured (the compiled steps are taken as long as the eager ones).
MARGIN = 1.2

# parbench run's own time beyond its trials (start, imports, CUDA, environment, writing) and
# each in-process trial's set-up: a fit over the H200's eager runs, each step's seconds less
# its records' warm-up and measured steps (4 bf16-channels-last 11.8 s for 1 configuration,
# 4 ablation 13.4 s for 2, 5 largest-batch 12.9 s for 1, 6 tutorial 21.9 s for 20).
RUN_START_S, TRIAL_S = 12.0, 0.49
# A process's first spawned rank (forkserver's start): the first ddp test on cuda:0,cuda:0
# (test_peak_memory_per_logical_device..., 9.84 s) less the same ddp test later (2.16 s).
FORKSERVER_S = 7.7
# Each spawned trial beyond its steps: the ddp and fsdp tests on cuda:0,cuda:0 (2.16 and
# 3.86 s) less their 7 steps and 6 compute-only steps (0.74 and 2.22 s). With the two above
# this gives 7 data-parallel's 38.1 s back: 12.0 + 0.49 + 7.7 + 4 x 1.6 + its steps 11.5.
SPAWN_TRIAL_S = 1.6
# pytest's own start and end: 1 gpu-tests' 71.6 s less pytest's 62.6 s (also a process that
# imports torch and parbench, as `parbench verify` does).
PYTEST_START_S = 9.0
# The first torch.compile in a process: the H100's 2-part-b, single acc=20's compile_time_s
# 43.3 s (the H200's 5 compiled: 30.8 s, plus 4.0 s beyond an eager run's start).
COMPILE_S = 43.3
# Another static shape compiled in the same process, over the first compile: the H100's
# 2-part-b, model-parallel's (batch 120) and pipeline split=60's first compiled trials, 40.9 and
# 40.1 s against their 2.4 and 3.2 s once compiled: 38.5 and 36.9 s, 0.87 of the first; a new
# model of a shape already compiled reused the code (single compiled at batch 120: 2.1 s).
RECOMPILE = 0.87
# A compiled step over the eager one, the model compiled block by block: the H100's 2-part-b,
# the median of six kinds' ratios of their median steps (1.27 to 1.87; both host-bound there).
COMPILED_STEP = 1.42
# cuDNN's algorithm search (torch.backends.cudnn.benchmark) on the first step: 4
# bf16-channels-last's first step 11.06 s less 4 ablation's bf16 first step 0.33 s.
SEARCH_S = 10.7
# The install and its checks: the H100's command start to its first step, 31 s in both of its
# runs that installed (1-default, 3-part-a: their wall time less their steps'), when pip still
# built parbench's editable install there; a path file builds nothing now, so it errs long.
INSTALL_S = 31.0
ARCHIVE_S = 1.0  # tar.gz of a run folder of a few MB
# Steps the H100 measured whole (1-default's steps.json): timm's benchmark.py on the 224 px
# job, asv's machine file and its --quick run of the suite.
TIMM_S, ASV_MACHINE_S, ASV_RUN_S = 15.3, 0.3, 73.3
UNMEASURED_TEST_S = 10.0  # a GPU test the H200 did not run


@dataclass(frozen=True)
class Measured:
    """A configuration as the H200 measured it: its median step, its first (warm-up) step,
    and for ddp and fsdp the compute-only steps parbench times after the measured ones."""

    step_s: float
    first_s: float  # with cuDNN's search where `searched`
    source: str
    compute_s: float = 0.0
    searched: bool = False


_TUTORIAL = "6 tutorial (resnet50, batch 120, 128 px, fp32)"
_DP = "7 data-parallel (resnet50, batch 128, 128 px, fp32)"
_224 = "resnet50, batch 256, 224 px"
MEASURED = {
    "single": Measured(0.0216, 0.49, _TUTORIAL),
    "single acc=20": Measured(0.1074, 0.21, _TUTORIAL),
    "single acc=60": Measured(0.0409, 0.15, _TUTORIAL),
    "model-parallel": Measured(0.0294, 0.04, _TUTORIAL),
    "pipeline split=20": Measured(0.1237, 0.26, _TUTORIAL),
    "pipeline split=60": Measured(0.0454, 0.09, _TUTORIAL),
    "ddp N=1": Measured(0.0292, 0.64, _DP, compute_s=0.0240),
    "fsdp N=1": Measured(0.0566, 0.83, _DP, compute_s=0.0404),
    "bf16 channels_last search": Measured(0.0555, 11.06, f"4 bf16-channels-last ({_224})",
                                          searched=True),
    "bf16": Measured(0.1059, 0.33, f"4 ablation ({_224})"),
}


@dataclass(frozen=True)
class Estimate:
    """A step's time: `raw_s` from `basis`; `seconds` is what the plan allows it."""

    raw_s: float
    basis: str
    planning: bool = False

    @property
    def seconds(self) -> int:
        return math.ceil(round(self.raw_s * MARGIN, 6))


def planning(raw_s: float, why: str) -> Estimate:
    return Estimate(raw_s, f"PLANNING figure: {why}", planning=True)


def junit_times() -> dict[str, float]:
    """Each GPU test's seconds on the H200, by its name with parameters."""
    times: dict[str, float] = {}
    for chunk in ("1-gpu-tests", "2-gpu-tests-slow"):
        path = H200 / chunk / "junit.xml"
        if path.is_file():
            for case in ElementTree.parse(path).getroot().iter("testcase"):
                times[case.get("name", "")] = float(case.get("time", 0))
    return times


def pytest_estimate(names: Iterable[str], selected: Sequence[str],
                    planned: Mapping[str, float] | None = None) -> Estimate:
    """pytest over the tests `names` (function names) that `selected` keeps, each as long as
    the H200's junit.xml says; one it did not run as long as `planned` says (PLANNING), else
    UNMEASURED_TEST_S."""
    times, planned = junit_times(), planned or {}
    measured, count, unmeasured = 0.0, 0, []
    for name in names:
        if name not in selected:
            continue
        runs = [t for case, t in times.items() if case.split("[")[0] == name]
        measured, count = measured + sum(runs), count + bool(runs)
        if not runs:
            unmeasured.append(name)
    guessed = sum(planned.get(name, UNMEASURED_TEST_S) for name in unmeasured)
    basis = (f"pytest's start {PYTEST_START_S} s + {count} test functions' {measured:.1f} s in "
             "the H200's junit.xml")
    if unmeasured:
        basis += (f" + PLANNING {guessed:g} s for those it did not run ({', '.join(unmeasured)}"
                  f"; {UNMEASURED_TEST_S:g} s each unless said)")
    return Estimate(PYTEST_START_S + measured + guessed, basis, planning=not count)


@dataclass(frozen=True)
class Trials:
    """`count` configurations of one measured kind in every round of a parbench run."""

    kind: str
    count: int = 1
    spawned: bool = False  # ranks in processes of their own (ddp, fsdp)
    compiled: bool = False  # steps taken as the eager ones; its compile is counted apart
    extra_steps: int = 0  # untimed steps after the measured ones (tensor count, trace)


def _trial_s(trials: Trials, warmup: int, steps: int) -> float:
    """One trial: its set-up, its first step (cuDNN's search and a compile counted apart),
    the other warm-up, measured and untimed steps, and ddp's and fsdp's compute-only ones."""
    kind = MEASURED[trials.kind]
    step_s = kind.step_s * (COMPILED_STEP if trials.compiled else 1.0)
    first = step_s if trials.compiled else kind.first_s - SEARCH_S * kind.searched
    seconds = (SPAWN_TRIAL_S if trials.spawned else TRIAL_S) + first
    seconds += (warmup - 1 + steps + trials.extra_steps) * step_s
    return seconds + (steps + 1) * kind.compute_s


def run_estimate(trials: Sequence[Trials], rounds: int, warmup: int, steps: int,
                 compiles: int = 0, searches: int = 0, fresh_compiles: int = 0) -> Estimate:
    """A parbench run: its start, `rounds` rounds of `trials`, the forkserver's start if any
    trial is spawned, the model compiled at `compiles` batch shapes (a compile each, the
    rounds after the first reusing it), `fresh_compiles` more compiles from scratch (another
    scope or mode of torch.compile) and `searches` cuDNN searches."""
    per_round = sum(t.count * _trial_s(t, warmup, steps) for t in trials)
    raw = RUN_START_S + rounds * per_round
    parts = [f"start {RUN_START_S} s", f"{rounds} round{'s' * (rounds > 1)} x {per_round:.1f} s"]
    spawned = any(t.spawned for t in trials)
    if spawned:
        raw += FORKSERVER_S
        parts.append(f"forkserver {FORKSERVER_S} s")
    if compiles:
        compiling = COMPILE_S * (1 + RECOMPILE * (compiles - 1))
        raw += compiling
        parts.append(f"compiled at {compiles} batch shapes {compiling:.1f} s (the first "
                     f"{COMPILE_S} s, each other {RECOMPILE} of it: H100)")
    if fresh_compiles:
        raw += fresh_compiles * COMPILE_S
        parts.append(f"{fresh_compiles} compile{'s' * (fresh_compiles > 1)} of another scope "
                     f"or mode x {COMPILE_S} s (PLANNING: each as long as the H100's first)")
    if searches:
        raw += searches * SEARCH_S
        parts.append(f"{searches} cuDNN search{'es' * (searches > 1)} x {SEARCH_S} s")
    kinds = ", ".join(f"{t.count} x {t.kind}{' compiled' if t.compiled else ''} "
                      f"{MEASURED[t.kind].step_s * 1000:.1f} ms"
                      + (f" x {COMPILED_STEP}" if t.compiled else "")
                      + (f" (+{t.extra_steps} untimed steps)" if t.extra_steps else "")
                      for t in trials)
    each = f"set-up {TRIAL_S} s" + (f", spawned {SPAWN_TRIAL_S} s and {steps + 1} compute-only "
                                     "steps" if spawned else "")
    sources = sorted({MEASURED[t.kind].source for t in trials})
    return Estimate(raw, f"{' + '.join(parts)}; a round: {kinds}, each {warmup} warm-up + "
                    f"{steps} steps ({each}); H200 {'; '.join(sources)}")
