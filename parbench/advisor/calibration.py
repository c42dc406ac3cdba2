"""What the timing models miss on emulated CPU devices, measured: each strategy's measured over
predicted throughput on the tuning workloads (calibration.json, fitted by
benchmarks/recommend/calibrate.py), applied to predictions for a CPU like the one fitted on."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import replace
from pathlib import Path

from parbench.advisor.models import Prediction

__all__ = ["CALIBRATION_FILE", "calibrated", "factor"]

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


@functools.cache
def _calibration() -> dict:
    return json.loads(CALIBRATION_FILE.read_text()) if CALIBRATION_FILE.exists() else {}


def factor(record: dict) -> float:
    """The measured over predicted throughput fitted for `record`'s strategy on its number of
    devices (on any number where that was not fitted), where it runs on one CPU (emulated
    devices, or one) with the cores and threads per device fitted on; 1 anywhere else (a GPU,
    another CPU, devices of their own): nothing is known there."""
    fitted = _calibration()
    devices = str(len(str(record.get("devices") or "cpu").split(",")))
    if (not fitted or record.get("device_kind") != "cpu"
            or not (_true(record.get("emulated")) or devices == "1")
            or _number(record.get("cpu_cores_available")) != fitted["cpu_cores"]
            or (_number(record.get("threads_per_device")) or 1) != fitted["threads_per_device"]):
        return 1.0
    strategy = str(record.get("strategy"))
    by_devices = fitted["factors"].get(devices, {})
    # One device communicates with none: another count's factor does not stand for it.
    over_all = fitted["factors"]["any"] if devices != "1" else {}
    return float(by_devices.get(strategy) or over_all.get(strategy) or 1.0)


def _true(value) -> bool:
    """A record's flag, as a table may hold it (a bool, "True", NaN where it has none)."""
    return value.lower() == "true" if isinstance(value, str) else bool(_number(value))


def _number(value) -> float | None:
    """A record's number; None where it has none (missing, empty, NaN in a table)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def calibrated(prediction: Prediction, record: dict) -> Prediction:
    """`prediction` at the throughput the calibration expects (its timeline stretched alike)."""
    scale = 1 / factor(record)
    if scale == 1.0:
        return prediction
    spans = tuple((*span[:3], span[3] * scale, span[4] * scale, *span[5:])
                  for span in prediction.spans)
    return replace(prediction, step_time_s=prediction.step_time_s * scale, spans=spans,
                   calibration=1 / scale)
