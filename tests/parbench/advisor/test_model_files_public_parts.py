"""The model files' parts that scripts take apart are the models' own: a contention
measurement's slowdowns read from the answers it measured, and a record's modelled prediction
equal to its prediction wherever the models cover it."""

from parbench.advisor.models.links import NO_LINK
from parbench.advisor.profiling import contention
from parbench.advisor.profiling.fixed_costs import FixedCosts
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.runs.records import modelled_prediction, predict_record
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


def test_a_slowdown_is_read_from_the_answers_its_processes_gave(monkeypatch):
    def measure_answers(workload, micro_batch, processes, threads, *rest):
        assert (workload, micro_batch, processes, threads) == (WORKLOAD, 2, 2, 1)
        return ANSWERS

    monkeypatch.setattr(contention, "measure_answers", measure_answers)
    slowdowns = contention.measure_slowdown(WORKLOAD, 2, 2)
    # Rounds 0 and 1: together (1+2)/2 and (2+1)/2 over 1 alone; lock-step 2 and 2.2.
    assert slowdowns == contention.read_slowdowns(ANSWERS)
    assert slowdowns == {"slowdown": 1.5, "lockstep_slowdown": 2.1}


def test_a_modelled_prediction_is_the_record_s_even_where_the_models_leave_it_out():
    costs = FixedCosts(per_step_s=0.25)
    record = _record("ddp")
    assert modelled_prediction(record, _profile_at, NO_LINK, costs) == predict_record(
        record, _profile_at, NO_LINK, costs)
    compiled = {**record, "compile": True}
    assert predict_record(compiled, _profile_at, NO_LINK) is None
    assert modelled_prediction(compiled, _profile_at, NO_LINK) == predict_record(
        record, _profile_at, NO_LINK)
