"""Every GPU figure that README.md, docs/*.md and results/README.md quote: the pages quoting it,
the exact text, the GPU run's file it comes from, and how it is recomputed from that file
(tests/published_figures.py holds the models' error figures, GPU ones included). Numbers on
those pages' GPU passages (tests/gpu_passages.py) that are not measured figures are listed in
NOT_MEASURED, each with why. tests/test_published_gpu_figures.py recomputes each figure, finds
each text in its pages, and fails on a GPU figure in a scanned page that neither lists.

A new GPU figure is one entry: its pages, its text as the page reads it (as page_text gives
it), its source, and a function that writes the text again from that source.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from tests import gpu_run_files as runs
from tests.gpu_passages import ROOT
from tests.published_figures import Figure

README, RES, HOSTS = "README.md", "results/README.md", "docs/gpu-hosts.md"
EVIDENCE = "docs/evidence.md"
METHODOLOGY, PREDICTION, STRATEGIES = "docs/methodology.md", "docs/prediction.md", \
    "docs/strategies.md"
HISTORY = "docs/history.md"
SCANNED_DOCS_LEFT_OUT: tuple[str, ...] = ()  # a page to leave out of the scan, while rewritten
# Sections of a scanned page left out, by their heading line, because another test holds their
# figures to their source: the GPU table's data-sheet figures (docs/prediction.md) are
# tests/parbench/machine/test_gpus.py's, held to parbench/machine/gpus.py.
SECTIONS_LEFT_OUT: dict[str, tuple[str, ...]] = {
    PREDICTION: ("## Carrying a profile to another GPU",)}
SCANNED = sorted({README, RES, *(str(path.relative_to(ROOT)) for path in
                                 (ROOT / "docs").glob("*.md"))} - set(SCANNED_DOCS_LEFT_OUT))
_WORDS = {1: "one", 2: "two", 7: "seven"}


def _results(path: str) -> str:
    return f"results/{path}"


# ---- tests passed ---------------------------------------------------------------------

def _junit_total(*paths: str) -> tuple[int, int, int]:
    """Tests run, passed and skipped over junit files."""
    counts = [runs.junit(path) for path in paths]
    return (sum(sum(c.values()) for c in counts), sum(c["passed"] for c in counts),
            sum(c["skipped"] for c in counts))


FIRST_H200_JUNIT = (f"{runs.FIRST_H200}/1-gpu-tests/junit.xml",
                    f"{runs.FIRST_H200}/2-gpu-tests-slow/junit.xml")
SECOND_H200_JUNIT = (f"{runs.SECOND_H200}/1-parts-a-e/a-correctness/gpu-tests-junit.xml",
                     f"{runs.PART_E}/gpu-tests-slow-junit.xml")
H100_TESTS_LOG = f"{runs.H100}/1-default/a-correctness/gpu-tests.log"


def _first_h200_tests() -> str:
    run, passed, _ = _junit_total(*FIRST_H200_JUNIT)
    return f"{passed} of {run} passed on the first H200"


def _first_h200_tests_collected() -> str:
    run, passed, _ = _junit_total(*FIRST_H200_JUNIT)
    collected = runs.collected(f"{runs.FIRST_H200}/1-gpu-tests/gpu-tests.log")  # its 3 slow too
    return f"{run} of the {collected} GPU tests ran and all but {_WORDS[run - passed]} passed"


def _h100_tests() -> str:
    outcomes, selected = runs.log_outcomes(H100_TESTS_LOG)
    assert outcomes["FAILED"] == 0
    return (f"{outcomes['PASSED']} of {selected} passed and {outcomes['SKIPPED']} skipped "
            "before their step was cut on the H100")


def _second_h200_tests() -> str:
    run, passed, skipped = _junit_total(*SECOND_H200_JUNIT)
    return f"{passed} of the {run} run on a second H200 passed and {skipped} skipped"


def _second_h200_tests_hosts() -> str:
    run, passed, skipped = _junit_total(*SECOND_H200_JUNIT)
    return f"{passed} of its {run} GPU tests passed and {skipped} skipped"


def _first_h200_timings() -> str:
    """The first H200's GPU tests: pytest's time for the fast ones and their step's, and the
    three slowest's pytest time."""
    fast, slow = (runs.junit_suite(path) for path in FIRST_H200_JUNIT)
    step = runs.step_seconds(f"{runs.FIRST_H200}/1-gpu-tests/steps.json", "gpu-tests")
    return (f"{fast['tests']} in {fast['time']:.1f} s of pytest's time ({step:.1f} s for the "
            f"step), the three slowest (a cold `torch.compile`, the `max-batch` search, "
            f"torchrun) in {slow['time']:.1f} s")


def _estimates(template: str, *names: str) -> Callable[[], str]:
    """A text of the GPU plan's estimates (benchmarks/gpu/reference_estimates.py, whose
    figures tests/test_gpu_reference.py holds to the runs' files), filled from the module."""
    def text() -> str:
        module = runs.estimates()
        return template.format(*(getattr(module, name) for name in names))
    return text


# ---- single resnet50 at 224 px ---------------------------------------------------------

def _ips(found: dict) -> str:
    return f"{found['throughput_ips']:.0f}"


def _timm(lead: str, between: str) -> str:
    measured = runs.summary(runs.H100_TIMM)
    return (f"{lead}{measured['parbench_img_s']:.0f} img/s{between}"
            f"{measured['timm_img_s']:.0f}")


def _compiled() -> dict:
    return runs.record(runs.H200_COMPILED, compile=True)


def _first_h200_224() -> str:
    fp32 = runs.record(runs.H200_224, precision="fp32")
    searched = runs.record(runs.H200_224, precision="bf16", channels_last=True,
                           cudnn_benchmark=True)
    assert not _compiled()["cudnn_benchmark"]
    return (f"{_ips(fp32)} img/s in fp32, {_ips(searched)} in bf16 with channels_last and "
            f"cuDNN's search, {_ips(_compiled())} with the whole model compiled (cuDNN's "
            "search off)")


def _compiled_against_eager() -> str:
    """The first H200's compiled step against the second's eager one at the same settings."""
    compiled, eager = _compiled(), runs.record(runs.SECOND_H200_CHANNELS_LAST)
    for field in ("model", "image_size", "precision", "channels_last", "cudnn_benchmark",
                  "global_batch"):
        assert compiled[field] == eager[field], field
    assert not eager["compile"]
    return f"{_ips(compiled)} img/s compiled against {_ips(eager)} eager"


def _flops() -> str:
    counts = {r["flops_per_image"] for r in runs.records(runs.FIRST_H200, model="resnet50",
                                                         image_size=224)}
    [count] = counts
    return f"{count / 1e9:.1f} GFLOP per image for resnet50 at 224 px"


# ---- --compile per block ---------------------------------------------------------------

def _compile_ratios() -> str:
    """Each compiled configuration of the H100's part b over its eager twin, step by step."""
    ratios = []
    for compiled in runs.records(runs.H100_PART_B, compile=True):
        eager = runs.record(runs.H100_PART_B, compiled["strategy"], compile=False,
                            options=compiled["strategy_options"])
        ratios.append(compiled["step_time_median_s"] / eager["step_time_median_s"])
    assert len(ratios) == 6
    return f"{min(ratios):.2f} to {max(ratios):.2f} times the eager one"


@cache
def _compile_test() -> tuple[float, float]:
    """The second H200's failed compile test: compiled and eager img/s from its assertion."""
    text = runs.junit_text(SECOND_H200_JUNIT[1])
    for setting in ('"global_batch": 32', '"image_size": 128', '"precision": "bf16"',
                    '"model": "resnet50"'):
        assert setting in text, setting
    [(compiled, eager)] = set(re.findall(r"assert ([\d.]+) > \(0\.9 \* ([\d.]+)\)", text))
    return float(compiled), float(eager)


def _compile_test_text(between: str) -> str:
    compiled, eager = _compile_test()
    return f"{compiled:.0f} img/s against {between}{eager:.0f}"


# ---- the tutorial's job at 128 px ------------------------------------------------------

def _accumulating(folder: str) -> list[dict]:
    return [r for r in runs.records(folder, "single") if r["micro_batches"] > 1]


def _micro_batch_costs() -> str:
    costs = [r["step_time_median_s"] / r["micro_batches"] * 1e3
             for r in _accumulating(runs.H200_TUTORIAL)]
    return f"{min(costs):.1f} to {max(costs):.1f} ms"


def _best_micro_batch_effect() -> str:
    best = max(r["micro_batch_effect"] for r in _accumulating(runs.H200_TUTORIAL))
    return f"a micro-batch effect of {best:.2f} at best"


def _first_model_parallel() -> str:
    found = runs.record(runs.H200_TUTORIAL, "model-parallel")
    return f"Its model-parallel step ({found['speedup_vs_baseline']:.2f}x single)"


def _h100_model_parallel() -> str:
    """The H100's eager model-parallel trial against single's in the same round."""
    model_parallel = runs.trials(runs.record(runs.H100_PART_B, "model-parallel", compile=False))
    single = runs.trials(runs.record(runs.H100_PART_B, "single", compile=False, options={}))
    [(round_, [step])] = model_parallel.items()
    low, high = sorted(single[round_])
    return (f"{step * 1e3:.2f} ms a step against single's {low * 1e3:.2f} and "
            f"{high * 1e3:.2f} ms in the same round")


def _h100_rounds() -> str:
    """Part b's rounds measured, of those asked (it was stopped during its third)."""
    found = runs.records(runs.H100_PART_B)
    measured = {trial["round"] for r in found for trial in r["trials"]}
    [asked] = {r["repeats"] for r in found}
    return f"({len(measured)} of {asked} rounds, emulated)"


# ---- data parallel on one rank --------------------------------------------------------

def _part_e_rounds() -> str:
    """Rounds 1 and 2 of part e: each one-rank configuration's step over single's mean in the
    same round."""
    single = runs.trials(runs.record(runs.PART_E_RUN, "single"))
    over: dict[str, list[float]] = {"ddp": [], "fsdp": []}
    for strategy, extra in over.items():
        for found in runs.records(runs.PART_E_RUN, strategy):
            steps = runs.trials(found)
            extra += [(steps[r][0] - statistics.mean(single[r])) * 1e3 for r in (1, 2)]
    single_ms = runs.record(runs.PART_E_RUN, "single")["step_time_median_s"] * 1e3
    return (f"one-rank ddp {min(over['ddp']):.1f} to {max(over['ddp']):.1f} ms over single's "
            f"{single_ms:.1f} ms, fsdp {min(over['fsdp']):.0f} to {max(over['fsdp']):.0f} ms "
            "(rounds 1 and 2)")


def _part_e_round_zero() -> str:
    """Round 0 against the mean of rounds 1 and 2, in the spawned configurations slower by
    more than 10% there."""
    slow = []
    for found in runs.records(runs.PART_E_RUN):
        if found["strategy"] != "single":
            steps = runs.trials(found)
            excess = steps[0][0] / statistics.mean([steps[1][0], steps[2][0]]) - 1
            slow += [excess] if excess > 0.10 else []
    return (f"the command's first {_WORDS[len(slow)]} trials ran {min(slow):.0%} to "
            f"{max(slow):.0%} slow")


def _ddp_one_rank() -> dict:
    return runs.record(runs.H200_DATA_PARALLEL, "ddp", options={"world_size": 1})


# ---- the profile and the memory diagnosis --------------------------------------------

def _profile_rows() -> list[dict[str, str]]:
    """profile-check.md's table (tests/test_published_results.py holds the page to what
    benchmarks/gpu/profile_check.py writes from the run's records and profiles)."""
    return runs.markdown_table(f"{runs.FIRST_H200}/profile-check.md")


def _whole_batch_error() -> str:
    [whole] = [r["error"] for r in _profile_rows() if r["micro-batches x images"] == "1 x 120"]
    return whole.lstrip("+")


def _memory_low() -> str:
    short = [-int(r["difference (MiB)"]) for r in _profile_rows()]
    assert min(short) > 0
    return f"{min(short)} to {max(short)} MiB low"


DIAGNOSIS = f"{runs.SECOND_H200}/2-memory-diagnosis/diag.txt"


def _transients() -> str:
    transient = runs.diagnosis(DIAGNOSIS)
    held = runs.record(runs.PART_E_RUN, "single")["peak_memory_max_mib"]
    return (f"{transient[120]:.0f} MiB at micro-batch 120 and {transient[2]:.0f} MiB at 2, "
            f"where the run's whole step held {held:.0f} MiB")


# ---- the published tables (results/published-tables/comparison.md) -------------------

def _points(row: str) -> float:
    return float(runs.published_tables()[row]["error (points)"])


def _published_summary() -> str:
    return (f"DLE ResNet-50 8-GPU efficiency {_points('dle-resnet50-tf32-8gpu'):+.1f} points "
            f"(TF32), {_points('dle-resnet50-amp-8gpu'):+.1f} (AMP); torchgpipe pipeline-8 "
            f"{_points('torchgpipe-resnet101-pipeline-8'):+.1f}")


def _goal_rows() -> str:
    rows = [r for r in runs.published_tables().values() if r["GPUs"] == "8"]
    met = sum(r["within 5"] == "yes" for r in rows)
    return f"is met in {met} of {len(rows)} rows"


def _pipelines_low() -> str:
    low = [-_points(f"torchgpipe-resnet101-pipeline-{n}") for n in (2, 4, 8)]
    return f"The pipelines come out {min(low):.0f} to {max(low):.0f} points low"


def _amp_loss() -> str:
    efficiency = float(runs.published_tables()["dle-resnet50-amp-8gpu"]["published efficiency"])
    return f"DLE's AMP run {(1 - efficiency) * 100:.0f} points at 8 GPUs"


PUBLISHED = "results/published-tables/comparison.md"
CARRIED = "results/20261128T210300Z-published-tables-carried"


@cache
def _carried() -> tuple[list[dict], list[dict], list[dict]]:
    """The carried tables' predictions, and their scaling and one-GPU comparisons, as
    benchmarks/published/compare_carried.py reads them."""
    import importlib.util
    import sys
    from pathlib import Path

    path = ROOT / "benchmarks" / "published" / "compare_carried.py"
    spec = importlib.util.spec_from_file_location("compare_carried_figures", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    rows = module._rows(Path(ROOT / CARRIED))
    return rows, module.scaling_rows(rows), module.level_rows(rows)


def _carried_summary() -> str:
    _, scaling, levels = _carried()
    pipes = [row["error"] for row in scaling if "torchgpipe" in row["name"] and row["devices"] > 1]
    dle = {row["name"].split(",")[0]: row["error"] for row in scaling if "dle" in row["name"]}
    within = sum(abs(row["error"]) <= 15 for row in levels)
    return (f"torchgpipe pipeline-2, 4 and 8 {pipes[0]:+.2f}, {pipes[1]:+.2f} and "
            f"{pipes[2]:+.2f} points; DLE's 8-GPU {dle['dle-dgxa100-resnet50-tf32']:+.2f} (TF32) "
            f"and {dle['dle-dgxa100-resnet50-amp']:+.2f} (AMP), within 0.1 point of perfect "
            "scaling's guess; "
            f"one GPU {within} of {len(levels)} within 15%")


def _carried_levels() -> str:
    _, _, levels = _carried()
    error = {row["name"].split(" (")[0]: f"{row['error']:+.1f}%" for row in levels}
    return (f"DLE's A100 TF32 {error['dle-dgxa100-resnet50-tf32']} and parbench's H100 "
            f"{error['parbench-h100-resnet50-bf16']} (within 15%), DLE's A100 AMP "
            f"{error['dle-dgxa100-resnet50-amp']} and parbench's H200 "
            f"{error['parbench-h200-resnet50-bf16']} (not)")


def _carried_shares() -> str:
    rows, _, _ = _carried()
    shares = [float(row["share_of_roofline"]) for row in rows]
    return f"reach {min(shares):.1%} to {max(shares):.1%} of their operations' rooflines"


def _bf16_share() -> str:
    rows, _, _ = _carried()
    [share] = {float(r["share_of_roofline"]) for r in rows
               if r["setup"] == "dle-dgxa100-resnet50-amp"}
    return f"({share:.0%} for the H200's bf16 step)"


ESTIMATES = ("benchmarks/gpu/reference_estimates.py (each held to the GPU runs' steps.json, "
             "junit.xml and records.json by tests/test_gpu_reference.py)")
TUTORIAL, PART_B = _results(f"{runs.H200_TUTORIAL}/records.json"), _results(
    f"{runs.H100_PART_B}/records.json")
PROFILE_CHECK = _results(f"{runs.FIRST_H200}/profile-check.md")

GPU_FIGURES: tuple[Figure, ...] = (
    Figure((EVIDENCE,), "29 of 30 passed on the first H200", " and ".join(
        _results(p) for p in FIRST_H200_JUNIT), _first_h200_tests),
    Figure((RES,), "30 of the 32 GPU tests ran and all but one passed",
           _results(f"{runs.FIRST_H200}/1-gpu-tests/junit.xml, gpu-tests.log and "
                    "2-gpu-tests-slow/junit.xml"), _first_h200_tests_collected),
    Figure((EVIDENCE,), "23 of 26 passed and 1 skipped before their step was cut on the H100",
           _results(H100_TESTS_LOG), _h100_tests),
    Figure((EVIDENCE,), "29 of the 32 run on a second H200 passed and 1 skipped",
           " and ".join(_results(p) for p in SECOND_H200_JUNIT), _second_h200_tests),
    Figure((HOSTS,), "29 of its 32 GPU tests passed and 1 skipped",
           " and ".join(_results(p) for p in SECOND_H200_JUNIT), _second_h200_tests_hosts),
    Figure((HOSTS,), "27 in 62.6 s of pytest's time (71.6 s for the step), the three slowest "
           "(a cold `torch.compile`, the `max-batch` search, torchrun) in 102.3 s",
           " and ".join(_results(p) for p in FIRST_H200_JUNIT) + " and 1-gpu-tests/steps.json",
           _first_h200_timings),
    Figure((HOSTS,), "`parbench run`'s start (12.0 s) and each trial's set-up (0.49 s)",
           ESTIMATES, _estimates("`parbench run`'s start ({} s) and each trial's set-up ({} s)",
                                 "RUN_START_S", "TRIAL_S")),
    Figure((HOSTS,), "a spawned rank's 1.6 s and the forkserver's 7.7 s", ESTIMATES,
           _estimates("a spawned rank's {} s and the forkserver's {} s", "SPAWN_TRIAL_S",
                      "FORKSERVER_S")),
    Figure((HOSTS,), "cuDNN's search (10.7 s); a compile (43.3 s); timm's run (15.3 s) and "
           "asv's (73.3 s) whole; the install (31 s, when it still built parbench)", ESTIMATES,
           _estimates("cuDNN's search ({} s); a compile ({} s); timm's run ({} s) and asv's "
                      "({} s) whole; the install ({:.0f} s, when it still built parbench)",
                      "SEARCH_S", "COMPILE_S", "TIMM_S", "ASV_RUN_S", "INSTALL_S")),
    Figure((EVIDENCE,), "3913 img/s at 224 px bf16, timm's own loop 3873",
           _results(f"{runs.H100_TIMM}/summary.json"),
           lambda: _timm("", " at 224 px bf16, timm's own loop ")),
    Figure((RES,), "trains at 3913 img/s; timm's own loop on the same job, 3873",
           _results(f"{runs.H100_TIMM}/summary.json"),
           lambda: _timm("trains at ", "; timm's own loop on the same job, ")),
    Figure((RES,), "2191 img/s in fp32, 4617 in bf16 with channels_last and cuDNN's search, "
           "6461 with the whole model compiled (cuDNN's search off)",
           _results(f"{runs.H200_224} and {runs.H200_COMPILED} (records.json)"), _first_h200_224),
    Figure((EVIDENCE, METHODOLOGY, STRATEGIES), "6461 img/s compiled against 4647 eager",
           _results(f"{runs.H200_COMPILED} and {runs.SECOND_H200_CHANNELS_LAST} (records.json)"),
           _compiled_against_eager),
    Figure((METHODOLOGY,), "24.3 GFLOP per image for resnet50 at 224 px",
           _results(f"{runs.FIRST_H200} (records.json, flops_per_image)"), _flops),
    Figure((EVIDENCE, METHODOLOGY, RES, STRATEGIES), "1.27 to 1.87 times the eager one", PART_B,
           _compile_ratios),
    Figure((EVIDENCE, STRATEGIES), "893 img/s against eager's 1837",
           _results(SECOND_H200_JUNIT[1]),
           lambda: _compile_test_text("eager's ")),
    Figure((RES,), "893 img/s against 1837", _results(SECOND_H200_JUNIT[1]),
           lambda: _compile_test_text("")),
    Figure((EVIDENCE, RES, STRATEGIES), "12.8 to 20.4 ms", TUTORIAL, _micro_batch_costs),
    Figure((RES,), "a micro-batch effect of 0.54 at best", TUTORIAL, _best_micro_batch_effect),
    Figure((RES,), "Its model-parallel step (0.72x single)", TUTORIAL, _first_model_parallel),
    Figure((RES,), "(2 of 3 rounds, emulated)", PART_B, _h100_rounds),
    Figure((EVIDENCE, RES), "25.33 ms a step against single's 24.71 and 24.91 ms in the same "
           "round", PART_B, _h100_model_parallel),
    Figure((RES,), "one-rank ddp 2.1 to 3.2 ms over single's 21.7 ms, fsdp 5 to 18 ms "
           "(rounds 1 and 2)", _results(f"{runs.PART_E_RUN}/records.json"), _part_e_rounds),
    Figure((RES,), "the command's first seven trials ran 22% to 65% slow",
           _results(f"{runs.PART_E_RUN}/records.json"), _part_e_round_zero),
    Figure((STRATEGIES,), "one-rank ddp's 5.2 ms",
           _results(f"{runs.H200_DATA_PARALLEL}/records.json"),
           lambda: f"one-rank ddp's {_ddp_one_rank()['exposed_comm_time_s'] * 1e3:.1f} ms"),
    Figure((STRATEGIES,), "47 ms of forward against a 29 ms step",
           _results(f"{runs.H200_DATA_PARALLEL}/records.json"),
           lambda: f"{_ddp_one_rank()['ddp_forward_time_s'] * 1e3:.0f} ms of forward against "
                   f"a {_ddp_one_rank()['step_time_median_s'] * 1e3:.0f} ms step"),
    Figure((EVIDENCE,), "the whole batch +19.2%", PROFILE_CHECK,
           lambda: f"the whole batch +{_whole_batch_error()}"),
    Figure((PREDICTION,), "single resnet50 step at 128 px 19.2% slow", PROFILE_CHECK,
           lambda: f"single resnet50 step at 128 px {_whole_batch_error()} slow"),
    Figure((EVIDENCE, PREDICTION), "49 to 130 MiB low", PROFILE_CHECK, _memory_low),
    Figure((HISTORY,), "4096 MiB at micro-batch 120 and 4300 MiB at 2, where the run's "
           "whole step held 3519 MiB", _results(f"{DIAGNOSIS} and {runs.PART_E_RUN}/records.json"),
           _transients),
    Figure((PREDICTION,), "(4 GiB at micro-batch 120)", _results(DIAGNOSIS),
           lambda: f"({runs.diagnosis(DIAGNOSIS)[120] / 1024:.0f} GiB at micro-batch 120)"),
    Figure((HISTORY,), "is met in 1 of 3 rows", PUBLISHED, _goal_rows),
    Figure((HISTORY,), "The pipelines come out 5 to 6 points low", PUBLISHED,
           _pipelines_low),
    Figure((HISTORY,), "DLE's AMP run 16 points at 8 GPUs", PUBLISHED, _amp_loss),
    Figure((PREDICTION,), "AMP's 16 points stay unexplained", PUBLISHED,
           lambda: _amp_loss().replace("DLE's AMP run", "AMP's").replace(
               " at 8 GPUs", " stay unexplained")),
    Figure((PREDICTION,), "the same rows from this CPU's shape were 5 to 6 points low",
           PUBLISHED, lambda: _pipelines_low().replace(
               "The pipelines come out", "the same rows from this CPU's shape were")),
    Figure((EVIDENCE,), "torchgpipe pipeline-2, 4 and 8 -0.53, -2.49 and +4.35 points; DLE's "
           "8-GPU +3.37 (TF32) and +15.79 (AMP), within 0.1 point of perfect scaling's guess; "
           "one GPU 2 of 4 within 15%", f"{CARRIED}/predictions.csv and comparison.md",
           _carried_summary),
    Figure((PREDICTION,), "DLE's A100 TF32 -7.3% and parbench's H100 -12.6% (within 15%), "
           "DLE's A100 AMP -25.3% and parbench's H200 +15.4% (not)",
           f"{CARRIED}/predictions.csv", _carried_levels),
    Figure((PREDICTION,), "reach 40.1% to 49.6% of their operations' rooflines",
           f"{CARRIED}/predictions.csv", _carried_shares),
    Figure((PREDICTION,), "(43% for the H200's bf16 step)", f"{CARRIED}/predictions.csv",
           _bf16_share),
)



@dataclass(frozen=True)
class NotMeasured:
    """A number on a GPU passage that is no figure measured here, and why."""

    pages: tuple[str, ...]
    text: str
    why: str


NOT_MEASURED: tuple[NotMeasured, ...] = (
    NotMeasured((README,), "whiskers 95% intervals", "the intervals' confidence level"),
    NotMeasured((RES,), "NVIDIA H100 80GB", "the GPU's name (env.json: NVIDIA H100 80GB HBM3)"),
    NotMeasured((METHODOLOGY, HOSTS), "989 TFLOP/s bf16/fp16 and 495 TF32 for an H100 SXM or "
                "H200",
                "NVIDIA's data sheets' dense peaks, as parbench/measure/flops.py lists them"),
    NotMeasured((METHODOLOGY,), "fsdp's ranks over gloo grew their data segment by 410-460 MiB "
                "at resnet18 64 px whatever the batch (8 to 64), ddp's by 240-340 MiB, for 97 "
                "and 186-234 MiB of counted tensors", "measured on CPU ranks, not on a GPU"),
    NotMeasured((PREDICTION,), "a 128 B all-reduce across H100 nodes took 62 us "
                "(NVIDIA/nccl#1453)", "published in NVIDIA/nccl#1453, named there"),
    NotMeasured((HISTORY,), "(8 A100s' all-reduce at 200 GB/s, nccl-tests#149; PCIe 3 at "
                "12.6 GB/s)", "published link figures, each with its source named"),
    NotMeasured((HISTORY,), "The goal (8-GPU scaling efficiency within 5 points)",
                "the goal, not a figure"),
    NotMeasured((HISTORY,), "the model gives DDP's all-reduce of ResNet-50's 102 MB of fp32 "
                "gradients about 1 ms behind a 104 ms step",
                "the timing model's prediction of a published table's job"),
    NotMeasured((HISTORY,), "the TF32 run's smaller loss lands within 5 points because its "
                "step is 2.6 times longer", "the goal, and DLE's published single-GPU "
                "throughputs (parbench/advisor/tables/published_tables.py: 938 and 2470 img/s)"),
    NotMeasured((HISTORY,), "its slowest of 8 stages is 1.49 times the average",
                "this CPU's profile of the table's model, not a GPU's"),
    NotMeasured(("docs/results.md",), "at least 90% of the step", "host_bound's threshold"),
    NotMeasured(("docs/results.md",), "every 0.2 s", "the GPU sampler's period, a setting"),
    NotMeasured(("docs/multi-node.md",), "15000 + the job id modulo 17000",
                "a port number's rule"),
    NotMeasured((HOSTS,), "costing under 1% of a step", "the GPU test's threshold"),
    NotMeasured(("docs/options.md",), "'H100 SXM5 80 GB'", "a GPU's name in the GPU table"),
    NotMeasured((HOSTS,), "of at most 9 minutes (540 s)", "the reference run's limit"),
    NotMeasured((HOSTS,), "each inside 540 s too", "the reference run's limit"),
    NotMeasured((HOSTS,), "3600 s timeouts", "asv.conf.json's benchmark timeout, a setting"),
    NotMeasured((HOSTS,), "each test at most 60 s", "the correctness part's per-test limit"),
    NotMeasured((HOSTS,), "at 128 and 224 px", "image sizes profiled, settings"),
    NotMeasured((HOSTS,), "Each estimate is 1.2 times", "the plan's margin, a setting"),
    NotMeasured((HOSTS,), "is ended 5 s later", "per_test_timeout's grace, a setting"),
    NotMeasured((HOSTS,), "no test runs past 15 s before its step's end",
                "per_test_timeout's margin, a setting"),
    NotMeasured((HOSTS,), "their 50 MB would not travel",
                "the size of those wheels, on the index, not a GPU's figure"),
)
