"""The model files' parts under public names call the models' own functions: the same
predictions, paths and slowdowns, and a contention measurement's answers kept as read."""

from pathlib import Path

from parbench.advisor import model_parts
from parbench.advisor.model_parts import (
    measure_probe,
    measure_slowdown_answers,
    modelled_prediction,
    probe_path,
    read_slowdowns,
)
from parbench.advisor.models.links import NO_LINK
from parbench.advisor.profiling import contention, fixed_costs
from parbench.advisor.profiling.fixed_costs import FixedCosts, probe_records
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.records import predict_record
from parbench.families.workloads import Workload

WORKLOAD = Workload(model="resnet18", image_size=32, num_classes=10)
BLOCKS = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=2**20, parameter_sizes=(2**20,),
                            saved_bytes=2**21) for name in ("stem", "a", "b", "head"))
NAN = float("nan")
ANSWERS = [(0, 1.0, 1.0, 2.0), (0, NAN, 2.0, 2.0), (1, 1.0, 2.0, 2.2), (1, NAN, 1.0, 2.2)]


def _profile_at(micro_batch: int) -> Profile:
    return Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, micro_batch, 3, BLOCKS)


def _record(strategy: str, **fields) -> dict:
    return {"strategy": strategy, "model": "resnet18", "image_size": 32, "precision": "fp32",
            "num_classes": 10, "device_kind": "cpu", "threads_per_device": 1,
            "devices": "cpu,cpu", "world_size": 2, "emulated": True, "status": "ok",
            "strategy_options": {}, "global_batch": 16, **fields}


def test_a_measurement_s_answers_are_kept_and_read_as_the_model_reads_them(monkeypatch):
    original = contention._slowdowns

    def measure_slowdown(workload, micro_batch, processes, threads=1):
        assert (workload, micro_batch, processes, threads) == (WORKLOAD, 2, 2, 1)
        return contention._slowdowns(ANSWERS)  # as the real one reads its processes' answers

    monkeypatch.setattr(contention, "measure_slowdown", measure_slowdown)
    slowdowns, answers = measure_slowdown_answers(WORKLOAD, 2, 2)
    assert answers == ANSWERS
    assert slowdowns == read_slowdowns(ANSWERS) == original(ANSWERS)
    assert contention._slowdowns is original  # put back


def test_a_modelled_prediction_is_the_record_s_even_where_the_models_leave_it_out():
    costs = FixedCosts(per_step_s=0.25)
    record = _record("ddp")
    assert modelled_prediction(record, _profile_at, NO_LINK, costs) == predict_record(
        record, _profile_at, NO_LINK, costs)
    compiled = {**record, "compile": True}
    assert predict_record(compiled, _profile_at, NO_LINK) is None
    assert modelled_prediction(compiled, _profile_at, NO_LINK) == predict_record(
        record, _profile_at, NO_LINK)


def test_a_probe_is_kept_where_load_or_probe_keeps_it_and_measured_as_it_measures(monkeypatch):
    [probe] = probe_records(_record("ddp"))
    assert probe_path(Path("c"), probe, WORKLOAD) == fixed_costs._path(Path("c"), probe, WORKLOAD)
    monkeypatch.setattr(fixed_costs, "_measured", lambda probe, workload: {"step_s": 0.5})
    assert measure_probe(probe, WORKLOAD) == {"step_s": 0.5}
    assert model_parts.__all__ == sorted(model_parts.__all__)
