"""The slowdown of emulated devices computing at once: measured in real processes that all
end, and read back from the cache."""

import json

import pytest

from parbench.predict import contention
from parbench.workloads import Workload

TINY = Workload(model="resnet18", image_size=32, num_classes=10)


def test_two_processes_at_once_are_timed_against_one_alone():
    slowdown = contention.measure_slowdown(TINY, micro_batch=2, processes=2, steps=1,
                                           timeout_s=120)
    assert 0.3 < slowdown < 10  # a ratio of two real step times, not a default


def test_a_measured_slowdown_is_cached_and_read_back(tmp_path, monkeypatch):
    measured = []
    monkeypatch.setattr(contention, "measure_slowdown",
                        lambda *args: measured.append(args) or 1.25)
    first = contention.load_or_measure_slowdown(tmp_path, TINY, 4, processes=2)
    again = contention.load_or_measure_slowdown(tmp_path, TINY, 4, processes=2)
    assert first == again == 1.25 and len(measured) == 1
    path = contention.slowdown_path(tmp_path, TINY, 4, processes=2)
    assert json.loads(path.read_text())["slowdown"] == pytest.approx(1.25)
