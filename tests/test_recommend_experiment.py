"""The recommend experiment's report: every workload's picks, regrets, share measured and memory
calls in its README, from experiment.json alone."""

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from parbench.advisor import recommend
from parbench.advisor.calibration import CALIBRATION_FILE
from parbench.machine.devices import cpu_cores

ROOT = Path(__file__).resolve().parents[1]


def _case(name: str, regret: float, calls: list[bool]) -> dict:
    return dict(
        workload=dict(name=name), sweep_size=20, ok=18, measured_by_recommend=4, contenders=5,
        final=f"{name}-final", sweep_best="single", sweep_confirmed_pick_regret=regret + 0.03,
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
    experiment.write_report(tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert ("| a | 20 (18) | 5 | ddp | fsdp: 10.0% [5%, 15%] | ddp: 0.0% | 4 of 20 (20%) | "
            "2 of 2 |") in text
    assert "| c | 20 (18) |" in text and "| no limit |" in text
    assert "regret at most 5% in 2 of 3 workloads; memory calls right: 3 of 4" in text
    assert "at most 5% in 2 of 3: a 3.0% (best single), b 11.0% (best single), c 3.0%" in text
    assert "median |error| 20.0%, worst 20.0%, 3 of 6 within 10%" in text  # memory
    # Throughput: |0.05|, |-0.2| and the regret (0, 0.08, 0) of each of the three workloads.
    assert ("throughput median |error| 5.0%, worst 20.0%, 6 of 9 within 10%; its order "
            "against the measured one, Spearman's rho by workload: 0.50, 0.50, 0.50") in text
    assert "ddp at the full batch) against the sweep's best: regret -, -, 25.0%" in text
    assert (tmp_path / "regret.png").stat().st_size > 1000


@pytest.mark.skipif(cpu_cores() != 2, reason="the calibration was fitted on a 2-core CPU, and "
                    "the models' sharing of the cores is this machine's")
def test_the_calibration_is_what_its_tuning_runs_fit(tmp_path, monkeypatch):
    """calibration.json, fitted again from the published tuning experiment (its profiles,
    contention and link kept in it), is the committed file: no factor is typed in by hand."""
    _experiment(monkeypatch)  # calibrate imports it by its own name
    monkeypatch.setitem(sys.modules, "experiment", sys.modules["recommend_experiment"])
    spec = importlib.util.spec_from_file_location(
        "recommend_calibrate", ROOT / "benchmarks" / "recommend" / "calibrate.py")
    calibrate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calibrate)
    fitted = tmp_path / "calibration.json"
    folder = ROOT / "results" / json.loads(CALIBRATION_FILE.read_text())["fitted_on"]
    assert calibrate.main([str(folder), "--into", str(fitted)]) == 0
    assert json.loads(fitted.read_text()) == json.loads(CALIBRATION_FILE.read_text())
