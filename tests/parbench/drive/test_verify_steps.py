"""`parbench verify --steps N`: loss and parameters over many steps, with a tolerance that grows
as the baseline's rounding twins drift; a strategy whose update is off by a little each step
passes one step and fails many."""

from dataclasses import replace

import pytest

from parbench import strategies
from parbench.cli import main
from parbench.drive.verify import DRIFT_ALLOWANCE, _loss_tolerances, _Verifier, verify
from parbench.launch.worker import Trained
from parbench.plan.config import options_for
from parbench.strategies.model_parallel import ModelParallel
from tests.support import CPU2

# Enough steps for the rounding twins' envelope to grow past one step's tolerance, and for a
# strategy off by a little (OffByALittle.off_by, derived from that envelope in the test) to
# leave it.
STEPS = 3
# The baseline and its rounding twins step in this process: on both cores (the verdicts are the
# same as on one, the tolerance's growth and the strategy's exit from it included).
THREADS = 2
# A probe's part off (1 in 10,000 of every update), and how far past the envelope the strategy
# off by a little is aimed from the probe's losses.
PROBE = 1e-4
MARGIN = 20


class OffByALittle(ModelParallel):
    """Model parallelism whose optimiser steps a little too far, every step: `off_by` of every
    update."""

    off_by = 0.0

    def prepare_training(self, parameters, loss_device):
        super().prepare_training(parameters, loss_device)
        for group in self.optimizer.param_groups:
            group["lr"] *= 1 + self.off_by


@pytest.fixture
def off_by_a_little(monkeypatch):
    entry = strategies.REGISTRY["model-parallel"]
    monkeypatch.setitem(strategies.REGISTRY, "off-by-a-little", replace(entry, cls=OffByALittle))
    return "off-by-a-little"


@pytest.fixture
def workload(tiny_workload):  # verify's defaults: 64 px, learning rate 0.01
    return replace(tiny_workload, image_size=64, learning_rate=0.01)


@pytest.mark.slow  # a probe run beside the baseline and its rounding twins, 20 steps each
@pytest.mark.timeout(300)
def test_a_strategy_off_by_a_little_each_step_passes_one_step_and_fails_many(
        workload, off_by_a_little, monkeypatch):
    # How far off, from this machine's own rounding twins, as verify computes the tolerance:
    # model-parallel steps as its reference does, bit for bit, so its verdict is the twins'
    # envelope alone. A probe off by PROBE measures how far each step's loss moves per part
    # off (linear this close); the strategy is then off MARGIN times as much as takes one
    # step's loss to the envelope's edge, at the step where that takes least.
    check = _Verifier(workload, CPU2, 8, THREADS, STEPS)
    exact = check.verdict("model-parallel", options_for("model-parallel", {}), 1e-5)
    assert exact.ok and max(exact.loss_differences) == 0, exact
    monkeypatch.setattr(OffByALittle, "off_by", PROBE)
    probe = check.verdict(off_by_a_little, options_for(off_by_a_little, {}), 1e-5)
    off_by = MARGIN * min(tolerance / (moved / PROBE) for tolerance, moved in zip(
        exact.loss_tolerances, probe.loss_differences, strict=True) if moved > 0)
    monkeypatch.setattr(OffByALittle, "off_by", off_by)
    many = check.verdict(off_by_a_little, options_for(off_by_a_little, {}), 1e-5)
    assert not many.ok, (off_by, many)  # its loss curve leaves the rounding twins' envelope
    beyond = [k for k, (d, t) in enumerate(zip(many.loss_differences, many.loss_tolerances,
                                               strict=True)) if d > t]
    assert beyond and many.worst_loss_step in beyond
    [one] = verify(workload, CPU2, [off_by_a_little], 8, {}, tolerance=1e-5,
                   threads_per_device=THREADS)
    assert one.ok, (off_by, one)  # one step cannot tell it from rounding


@pytest.mark.slow  # every strategy verified over 20 steps
@pytest.mark.timeout(240)
def test_real_strategies_stay_within_the_grown_tolerance(workload):
    """The one-process pipeline, whose micro-batches round apart from its accumulating
    reference. (model-parallel's steps are its whole-batch reference's bit for bit: the
    command's test below checks that over 3 steps, and the strategy off by a little above is
    model-parallel over STEPS.)"""
    [verdict] = verify(workload, CPU2, ["pipeline"], 8, {"split_size": 2}, tolerance=1e-5,
                       steps=STEPS, threads_per_device=THREADS)
    assert verdict.ok, verdict
    assert len(verdict.losses) == len(verdict.reference_losses) == STEPS
    # the losses really moved, and each step's tolerance is at least its relative floor
    # (whether the twins' drift lifts it above that floor, and by how much, is this CPU's
    # rounding: on an Intel Xeon the last step's was below the first's; growth is checked on
    # made-up twins below)
    assert verdict.reference_losses[-1] != pytest.approx(verdict.reference_losses[0])
    assert all(t >= 1e-5 * abs(loss) for t, loss in zip(verdict.loss_tolerances,
                                                           verdict.reference_losses,
                                                           strict=True))
    # it rounds apart from its reference: something was compared
    assert max(verdict.loss_differences) > 0


def test_the_loss_tolerance_follows_the_twins_drift_above_its_floor():
    reference = [2.0, 1.0, 1.0, 0.5]
    twins = [Trained([2.0, 1.0 + 1e-4, 1.0 - 3e-4, 0.5], []),
             Trained([2.0 + 1e-7, 1.0, 1.0, 0.5 + 1e-4], [])]
    tolerances = _loss_tolerances(reference, twins, relative=1e-5)
    # the floor (1e-5 of the loss) where the twins are closer; then DRIFT_ALLOWANCE times the
    # farthest any twin has been by then, which never shrinks though the twins meet again
    assert tolerances == pytest.approx((2e-5, DRIFT_ALLOWANCE * 1e-4, DRIFT_ALLOWANCE * 3e-4,
                                        DRIFT_ALLOWANCE * 3e-4))


def test_the_command_prints_each_strategy_s_worst_loss_step(capsys):
    status = main(["verify", "--strategy", "model-parallel", "--devices", "cpu,cpu",
                   "--image-size", "32", "--batch-size", "4", "--steps", "3"])
    out = capsys.readouterr().out
    assert status == 0
    assert "3 SGD steps" in out and "rounding twins" in out
    row = next(line for line in out.splitlines() if line.startswith("model-parallel"))
    assert row.endswith("ok") and "0 (bit for bit)" in row  # one process, the same ops


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_several_steps_in_a_lower_precision_are_refused_in_one_line(capsys, precision):
    status = main(["verify", "--precision", precision, "--steps", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "--steps above 1 compares in --precision fp32 only" in err
    assert len(err.strip().splitlines()) == 1
