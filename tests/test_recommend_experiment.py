"""The recommend experiment's report: every workload's picks, regrets, share measured and memory
calls in its README, from experiment.json; the baselines beside the pick (always single, the
best of K drawn at random) from the stored sweeps and finals; the published README is what
the report writes from them."""

import importlib.util
import itertools
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy.stats import binomtest

from parbench.advisor.recommend import recommend
from tests.support import same_figure

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "results" / "20261126T110536Z-recommend-experiment"
# A sweep of five layouts (images/s, the same in each of 3 rounds; None: out of memory) and
# its final, the contenders measured again.
SWEPT = dict(single=100.0, ddp=98.0, fsdp=80.0, pipeline=50.0, **{"model-parallel": 40.0})
FINAL = dict(single=100.0, ddp=96.0)


def _records(folder: Path, throughputs: dict) -> None:
    """A run folder's records.json: each layout (no options) ok at its images/s in 3 rounds,
    or out of memory."""
    folder.mkdir()
    folder.joinpath("records.json").write_text(json.dumps([dict(
        config_key=json.dumps(dict(strategy=name, options={}), sort_keys=True), strategy=name,
        status="oom" if ips is None else "ok", throughput_ips=ips,
        trials=[] if ips is None else [dict(round=r, status="ok", twin=False, throughput_ips=ips)
                                       for r in range(3)]) for name, ips in throughputs.items()]))


def _case(name: str, regret: float, calls: list[bool]) -> dict:
    return dict(
        workload=dict(name=name), sweep_size=20, ok=18, measured_by_recommend=4, contenders=5,
        run=f"{name}-sweep", final=f"{name}-final", sweep_best="single",
        sweep_confirmed_pick_regret=regret + 0.03,
        share_measured=0.2, best="ddp", predicted_pick="fsdp", predicted_pick_regret=0.1,
        predicted_pick_regret_interval=[0.05, 0.15], confirmed_pick="ddp" if not regret
        else "fsdp", confirmed_pick_regret=regret, confirmed_pick_regret_interval=None
        if not regret else [regret - 0.01, regret + 0.01],
        memory_calls=[dict(right=right) for right in calls],
        memory_errors=[dict(error=0.01), dict(error=-0.2)],
        memory_calls_right=sum(calls), control_regret_in_sweep=None if calls else 0.25,
        throughput=dict(errors=[0.05, -0.2, regret], spearman=0.5))


def _experiment(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "recommend"))  # its report module
    spec = importlib.util.spec_from_file_location(
        "recommend_experiment", ROOT / "benchmarks" / "recommend" / "experiment.py")
    experiment = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, experiment)  # its dataclass looks itself up
    spec.loader.exec_module(experiment)
    return experiment


def test_a_resumed_workload_measures_only_the_steps_it_lacks(tmp_path, monkeypatch):
    experiment = _experiment(monkeypatch)
    steps, saved = [], []
    monkeypatch.setattr(experiment, "measure_sweep",
                        lambda spec, out, repeats: steps.append("sweep") or "the-sweep")
    monkeypatch.setattr(experiment, "_confirm",
                        lambda spec, out, repeats: steps.append("confirm") or "the-confirm")
    spec = experiment.WORKLOADS[0]
    swept = experiment.measure_missing(spec, tmp_path, {}, 3, True, saved.append)
    assert steps == ["sweep"] and swept == dict(name=spec.name, run="the-sweep")
    done = experiment.measure_missing(spec, tmp_path, swept, 3, False, saved.append)
    assert steps == ["sweep", "confirm"] and done["confirmation"] == "the-confirm"
    assert experiment.measure_missing(spec, tmp_path, done, 3, False, saved.append) == done
    assert steps == ["sweep", "confirm"] and saved == [swept, done]  # each step saved as it ends


def test_the_experiment_predicts_and_ranks_by_the_commands_function(tmp_path, monkeypatch):
    experiment = _experiment(monkeypatch)
    calls, found = [], SimpleNamespace(table="the table", ranked="the ranking")
    monkeypatch.setattr(recommend, "recommend_layouts",
                        lambda *args: calls.append(args) or found)
    spec = next(case for case in experiment.WORKLOADS if case.memory_mib)
    assert experiment._predicted(spec, ["configs"], tmp_path) == ("the table", "the ranking")
    assert calls == [(["configs"], spec.devices, spec.memory_mib, recommend.COUNTED, None,
                      tmp_path / "profiles")]


def test_the_report_says_how_often_the_confirmed_pick_was_within_five_percent(tmp_path,
                                                                               monkeypatch):
    experiment = _experiment(monkeypatch)
    (tmp_path / "experiment.json").write_text(json.dumps(dict(
        predictor_version=5, repeats=3, warmup=1, steps=3, confirm=3, final_within=0.2,
        final_rounds=6,
        workloads=[_case("a", 0.0, [True, True]), _case("b", 0.08, [True, False]),
                   _case("c", 0.0, [])])))
    for name in ("a", "b"):
        _records(tmp_path / f"{name}-sweep", SWEPT)
        _records(tmp_path / f"{name}-final", FINAL)
    _records(tmp_path / "c-sweep", dict(SWEPT, single=None))  # single out of memory
    _records(tmp_path / "c-final", dict(ddp=98.0, fsdp=80.0))
    experiment.write_report(tmp_path)
    text = (tmp_path / "README.md").read_text()
    # Random 4 of 5: the best drawn is single (4 draws in 5) or ddp (4% in the final); of c's
    # 4 that ran, always ddp, the final's best.
    assert ("| a | 20 (18) | 5 | ddp | fsdp: 10.0% [5%, 15%] | ddp: 0.0% | 0.0% | "
            "4 of 5: 0.8%, 100% | 4 of 20 (20%) | 2 of 2 |") in text
    assert "| fsdp: 8.0% [7%, 9%] | 0.0% | 4 of 5: 0.8%, 100% |" in text
    assert "| ddp: 0.0% | out of memory | 4 of 4: 0.0%, 100% |" in text
    assert ("after --confirm 3 in 2 of 3 workloads (67% [9%, 99%]); always single in 2 of 3 "
            "(67% [9%, 99%]; out of memory, a miss, in 1); the best of 4 layouts") in text
    assert "in 3.00 of 3 expected (100% [29%, 100%], the interval at that" in text
    assert ("Mean regret: the pick 2.7%, single 0.0% on the 2 workloads where it fits (the "
            "pick 4.0% on those), random 0.5% expected. The three hit rates' intervals "
            "overlap") in text
    assert "| c | 20 (18) |" in text and "| no limit |" in text
    assert "regret at most 5% in 2 of 3 workloads; memory calls right: 3 of 4" in text
    assert "at most 5% in 2 of 3: a 3.0% (best single), b 11.0% (best single), c 3.0%" in text
    assert "median |error| 20.0%, worst 20.0%, 3 of 6 within 10%" in text  # memory
    # Throughput: |0.05|, |-0.2| and the regret (0, 0.08, 0) of each of the three workloads.
    assert ("throughput median |error| 5.0%, worst 20.0%, 6 of 9 within 10%; its order "
            "against the measured one, Spearman's rho by workload: 0.50, 0.50, 0.50") in text
    assert "ddp at the full batch) against the sweep's best: regret -, -, 25.0%" in text
    assert (tmp_path / "regret.png").stat().st_size > 1000


def _baselines(monkeypatch):
    _experiment(monkeypatch)  # puts its folder on the path
    import experiment_baselines

    return experiment_baselines


def test_the_best_of_k_at_random_is_exact_over_every_draw(monkeypatch):
    """Four layouts, two drawn: the best is the fastest in 3 of the 6 draws, the second in 2,
    the third in 1; so 92 images/s expected, within 5% of the best (100 or 96) in 5 of 6."""
    baselines = _baselines(monkeypatch)
    ips = dict(a=100.0, b=96.0, c=60.0, d=30.0)
    regret = {name: 1 - value / 100 for name, value in ips.items()}
    hit = {name: float(value <= 0.05) for name, value in regret.items()}
    assert baselines.best_of_random(ips, ips, 2) == pytest.approx((3 * 100 + 2 * 96 + 60) / 6)
    assert baselines.best_of_random(ips, ips, 2) == pytest.approx(92.0)
    assert baselines.best_of_random(ips, hit, 2) == pytest.approx(5 / 6)
    assert baselines.best_of_random(ips, regret, 2) == pytest.approx((2 * 0.04 + 0.4) / 6)
    draws = list(itertools.combinations(ips, 3))  # and by enumeration, three drawn
    assert baselines.best_of_random(ips, ips, 3) == pytest.approx(
        sum(max(ips[name] for name in draw) for draw in draws) / len(draws))
    assert baselines.best_of_random(ips, ips, 9) == 100.0  # more than there are: all of them


def test_a_layout_is_judged_in_the_final_where_it_was_a_contender(monkeypatch):
    baselines = _baselines(monkeypatch)
    swept = {name: {r: ips for r in range(3)} for name, ips in SWEPT.items()}
    final = {name: {r: ips for r in range(3)} for name, ips in FINAL.items()}
    regrets = baselines.judged_regrets(swept, final)
    assert regrets["single"] == 0.0 and regrets["ddp"] == pytest.approx(0.04)  # the final
    assert regrets["fsdp"] == pytest.approx(0.2) and regrets["pipeline"] == pytest.approx(0.5)
    assert baselines.judged_regrets(swept, None)["ddp"] == pytest.approx(0.02)


def test_a_hit_rate_has_its_clopper_pearson_interval(monkeypatch):
    baselines = _baselines(monkeypatch)
    low, high = baselines.clopper_pearson(4, 5)
    exact = binomtest(4, 5).proportion_ci(confidence_level=0.95, method="exact")
    assert (low, high) == pytest.approx((exact.low, exact.high))
    assert (low, high) == pytest.approx((0.2836, 0.9949), abs=1e-4)
    assert baselines.clopper_pearson(0, 5)[0] == 0.0 and baselines.clopper_pearson(5, 5)[1] == 1
    rates = dict(a=dict(interval=(0.3, 0.99)), b=dict(interval=(0.05, 0.85)),
                 c=dict(interval=(0.0, 0.2)))
    assert baselines.within_noise(rates) == [("a", "c")]  # apart; a-b and b-c overlap


def test_the_published_report_is_what_its_stored_measurements_write(tmp_path, monkeypatch):
    """README.md and regret.png written again from experiment.json and the records of every
    sweep and final (nothing else: no profile, no model) equal the published ones."""
    experiment = _experiment(monkeypatch)
    shutil.copy(PUBLISHED / "experiment.json", tmp_path)
    for case in json.loads((PUBLISHED / "experiment.json").read_text())["workloads"]:
        for run in filter(None, (case["run"], case.get("final"))):
            (tmp_path / run).mkdir()
            shutil.copy(PUBLISHED / run / "records.json", tmp_path / run)
    experiment.write_report(tmp_path)
    assert (tmp_path / "README.md").read_text() == (PUBLISHED / "README.md").read_text(), (
        "README.md differs from what the report writes: regenerate it with `python "
        f"benchmarks/recommend/experiment_report.py {PUBLISHED.relative_to(ROOT)}`")
    for name in ("regret.png",):
        assert same_figure((tmp_path / name).read_bytes(), (PUBLISHED / name).read_bytes()), (
            f"{name} differs from what the report writes: regenerate it with `python "
            f"benchmarks/recommend/experiment_report.py {PUBLISHED.relative_to(ROOT)}`")
