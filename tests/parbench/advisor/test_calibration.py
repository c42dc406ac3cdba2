"""The calibration scales a prediction by the measured over predicted throughput fitted for its
strategy and device count, only on a CPU like the one it was fitted on."""

import json

import pytest

from parbench.advisor import calibration
from parbench.advisor.memory import RankMemory
from parbench.advisor.models import Prediction

FITTED = dict(cpu_cores=2, threads_per_device=1, factors={
    "2": {"pipeline-1f1b": 0.8}, "any": {"pipeline-1f1b": 0.9, "ddp": 0.5}})


@pytest.fixture
def fitted(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(FITTED))
    monkeypatch.setattr(calibration, "CALIBRATION_FILE", path)
    calibration._calibration.cache_clear()
    yield
    calibration._calibration.cache_clear()


def _record(**changes):
    return dict(dict(strategy="pipeline-1f1b", device_kind="cpu", devices="cpu,cpu",
                     emulated=True, cpu_cores_available=2, threads_per_device=1), **changes)


def test_the_factor_is_the_strategys_on_its_device_count_else_over_all(fitted):
    assert calibration.factor(_record()) == 0.8
    assert calibration.factor(_record(devices="cpu,cpu,cpu,cpu")) == 0.9
    assert calibration.factor(_record(strategy="ddp")) == 0.5
    assert calibration.factor(_record(strategy="fsdp")) == 1.0  # never fitted


def test_nothing_is_scaled_off_the_machine_it_was_fitted_on(fitted):
    assert calibration.factor(_record(device_kind="cuda")) == 1.0
    assert calibration.factor(_record(cpu_cores_available=16)) == 1.0
    assert calibration.factor(_record(threads_per_device=2)) == 1.0
    assert calibration.factor(_record(emulated=False)) == 1.0  # CPUs of their own
    assert calibration.factor(_record(strategy="ddp", devices="cpu")) == 1.0  # no other's


def test_a_table_row_without_the_fields_is_not_scaled(fitted):
    nan = float("nan")
    assert calibration.factor(_record(cpu_cores_available=nan)) == 1.0
    assert calibration.factor(_record(emulated=nan)) == 1.0
    assert calibration.factor(_record(emulated="True", cpu_cores_available=2.0)) == 0.8


def test_a_calibrated_prediction_is_slower_by_the_factor_and_says_so(fitted):
    memory = (RankMemory.of(1, 1),)
    predicted = Prediction("pipeline-1f1b", 8, 1.0, memory, spans=((0, 0, "F", 0.2, 0.4, 0),))
    scaled = calibration.calibrated(predicted, _record())
    assert scaled.step_time_s == pytest.approx(1.25) and scaled.calibration == 0.8
    assert scaled.throughput_ips == pytest.approx(0.8 * predicted.throughput_ips)
    assert scaled.spans[0][3:5] == pytest.approx((0.25, 0.5))
    assert calibration.calibrated(predicted, _record(device_kind="cuda")) is predicted
