"""`parbench verify --compile`: each strategy compiled against the baseline eager, held to what
rounding alone does to the baseline's step (its steps in float64 are one more rounding twin).

What runs, not what the compiler makes of it: torch.compile is made the identity, so the
first test checks in seconds which runs verify makes (the baseline eager, each strategy
compiled, the float64 twin of each reference micro-batch) and the tolerance's floor, and the others
which strategies the command checks or leaves out; the verdicts themselves, with inductor
compiling for real and a compiled step broken on purpose, are test_verify_real_compile's
(slow)."""

import pytest
import torch

from parbench import launch
from parbench.cli import main
from parbench.drive.verify import _Verifier, verify
from parbench.families.workloads import Workload
from tests.support import CPU2


@pytest.fixture
def compiling_nothing(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)


def test_a_compiled_strategy_is_checked_against_the_baseline_eager(compiling_nothing,
                                                                    monkeypatch):
    trained = []
    real = launch.verify_training

    def spy(config, *args):
        trained.append((config.strategy, config.workload.compile))
        return real(config, *args)

    monkeypatch.setattr(launch, "verify_training", spy)
    exact = []
    real_exact = _Verifier.exact

    def exact_spy(self, split):
        exact.append(split)
        return real_exact(self, split)

    monkeypatch.setattr(_Verifier, "exact", exact_spy)
    workload = Workload(model="resnet18", image_size=32, num_classes=10, compile=True)
    [single, pipeline] = verify(workload, CPU2, ["single", "pipeline"], 4, {"split_size": 2},
                                1e-5, threads_per_device=2)
    assert trained == [("single", False), ("single", True), ("single", False),
                       ("pipeline", True)]
    # Each held to DRIFT_ALLOWANCE times the distance of its reference from the same steps in
    # float64 (the whole batch's, the micro-batches'), at least --tolerance.
    assert exact == [None, 2]
    for verdict in (single, pipeline):
        assert verdict.ok and verdict.max_abs_difference == 0  # compiled as the identity
        assert verdict.tolerance >= 1e-5


def test_verify_compile_checks_single_too_and_leaves_out_what_refuses_it(capsys, monkeypatch):
    from parbench.commands import verify as command

    checked = []
    monkeypatch.setattr(command, "verify", lambda workload, devices, names, *rest: checked.extend(
        (name, workload.compile) for name in names) or [])
    assert main(["verify", "--compile", "--devices", "cpu,cpu"]) == 0
    names = [name for name, _ in checked]
    assert names[0] == "single" and {"pipeline-gpipe", "ddp", "fsdp"} <= set(names)
    assert {compiled for _, compiled in checked} == {True}
    out = capsys.readouterr().out
    for name in ("pipeline-zero-bubble", "pipeline-zbv", "pipeline-dualpipev", "data-parallel"):
        assert name not in names and f"note: left out {name}: " in out
    assert "(64px, fp32, compiled) from seed 0, against single eager on cpu" in out


def test_verify_compiles_whole_in_a_mode_and_leaves_out_what_refuses_its_cuda_graphs(
        capsys, monkeypatch):
    from parbench.commands import verify as command

    checked = []
    monkeypatch.setattr(command, "verify", lambda workload, devices, names, *rest: checked.extend(
        (name, workload) for name in names) or [])
    assert main(["verify", "--compile", "model", "--compile-mode", "reduce-overhead",
                 "--devices", "cpu,cpu"]) == 0
    assert [name for name, _ in checked] == ["single", "model-parallel"]
    assert {(w.compile_scope, w.compile_mode) for _, w in checked} == {
        ("model", "reduce-overhead")}
    out = capsys.readouterr().out
    for name in ("pipeline", "pipeline-gpipe", "ddp", "fsdp"):
        assert f"note: left out {name}: " in out
    assert "(64px, fp32, compiled whole reduce-overhead) from seed 0, against single eager" in out
