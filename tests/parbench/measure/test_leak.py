"""A real leak (a loss kept as a tensor, holding every step's graph) is flagged; a normal run is
not."""

import pytest

from parbench.cli import main
from parbench.drive.runner import run_config
from parbench.machine.devices import parse_devices
from parbench.measure import memory_growth
from parbench.measure.measurement import Measurement, merge
from parbench.plan.config import Config
from parbench.strategies.single import SingleDevice
from tests.support import TINY_FLAGS


@pytest.mark.parametrize("values, leaking", [
    ([100, 110, 120, 130, 140], True),
    ([100, 110, 105, 120, 130], True),  # one fall is noise
    ([100, 101, 100, 101, 100], False),
    ([100, 100.5, 101, 101.5, 102], False),  # under 1 MiB per step
    ([100, 118, 118, 145, 145, 154], True),  # a resident set grows in chunks
    ([874, 874, 874, 874, 874, 883], False),  # one late jump is not a trend
    ([100, 120], False),  # too few steps to say
])
def test_a_steady_rise_is_what_counts_as_a_leak(values, leaking):
    assert memory_growth(values)[1] is leaking


def test_ranks_memory_after_each_step_is_the_fullest_one_read():
    def rank(after_step_mib):
        return Measurement(
            step_times_s=[1.0] * 3, total_s=3.0, warmup_step_times_s=[], losses=[0.5] * 3,
            host_step_times_s=[0.5] * 3, traced_step_s=None,
            peak_memory_mib=[1.0], memory_source="x", physical_peak_memory_mib=[1.0],
            memory_after_step_mib=after_step_mib, torch_threads=1, partition=None,
            timeline=[], bubble_fraction=None, micro_batches=1, pipeline_stages=1,
            gpu_sampling="x", gpus={}, compute_step_times_s=[], communication={})

    # allocated_mib is None where neither malloc's count nor /proc/self/status can be read.
    merged = merge([rank([100.0, None, None]), rank([90.0, 120.0, None])])
    assert merged.memory_after_step_mib == [100.0, 120.0, None]
    assert memory_growth(merged.memory_after_step_mib) == (None, False)


def _leaky(monkeypatch):
    train_step = SingleDevice.train_step
    kept = []

    def train_step_keeping_the_loss(self, images, labels):
        loss = self.loss_fn(self._model(images), labels)  # graph and activations alive
        kept.append(loss)  # the classic bug: total_loss += loss, without .item()
        return train_step(self, images, labels)

    monkeypatch.setattr(SingleDevice, "train_step", train_step_keeping_the_loss)


def test_a_loss_kept_as_a_tensor_is_flagged_in_the_record_and_the_table(
        tiny_workload, monkeypatch, capsys, tmp_path):
    config = Config("single", tiny_workload, 16, parse_devices("cpu"), warmup=2, steps=8)
    clean = run_config(config)
    assert clean.memory_leak_suspected is False, clean.memory_after_step_mib
    _leaky(monkeypatch)
    leaking = run_config(config)
    assert leaking.memory_leak_suspected is True, leaking.memory_after_step_mib
    assert leaking.memory_growth_mib_per_step > 1
    assert len(leaking.memory_after_step_mib) == 8
    assert main(["run", "--strategy", "single", "--devices", "cpu", *TINY_FLAGS, "--batch-size",
                 "16", "--steps", "8", "--warmup", "2", "--progress", "off", "--results-dir",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "RISING" in out and "a leak?" in out
