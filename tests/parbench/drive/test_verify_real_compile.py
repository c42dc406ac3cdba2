"""`parbench verify --compile` with the real torch.compile (inductor, C++ on the CPU): single and
model-parallel compiled whole pass against the baseline eager within the tolerance verify
derives (DRIFT_ALLOWANCE times the eager step's distance from its float64 twin), and a
compiled step broken on purpose (its graph's logits scaled by 1 % inside the code inductor
generates) fails, with exit status 1 and the strategy's row FAILED.

Slow: inductor compiles each graph (forward and backward of the model, then of each stage)
from scratch where its cache is cold, some 110 s of two cores; 20 s where it is warm."""

import pytest
import torch

from parbench.cli import main
from parbench.drive.verify import DRIFT_ALLOWANCE, verify
from parbench.families.workloads import Workload
from tests.support import CPU2, TINY_FLAGS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WORKLOAD = Workload(model="resnet18", image_size=32, num_classes=10, compile=True,
                    compile_scope="model")
FLAGS = ["verify", "--compile", "model", *TINY_FLAGS, "--batch-size", "4", "--split-size", "2",
         "--devices", "cpu,cpu"]
SCALE = 1.01


def _logits_scaled(gm: torch.fx.GraphModule, example_inputs):
    """Inductor, on the dynamo graph with its first output (the logits) scaled by SCALE: a
    compiled step that computes another loss, and so other gradients, than eager's."""
    from torch._inductor.compile_fx import compile_fx

    output = next(node for node in gm.graph.nodes if node.op == "output")
    first, *rest = output.args[0]
    with gm.graph.inserting_before(output):
        scaled = gm.graph.call_function(torch.mul, (first, SCALE))
    output.args = ((scaled, *rest),)
    gm.recompile()
    return compile_fx(gm, example_inputs)


@pytest.fixture
def compiled_wrong(monkeypatch):
    """nn.Module.compile through _logits_scaled instead of inductor as it is."""
    real = torch.nn.Module.compile
    compiled = []

    def broken(self, *args, **kwargs):
        compiled.append(type(self).__name__)
        kwargs.pop("mode", None)  # a backend of one's own takes no inductor mode
        return real(self, *args, **{**kwargs, "backend": _logits_scaled})

    monkeypatch.setattr(torch.nn.Module, "compile", broken)
    return compiled


def test_compiled_strategies_match_the_baseline_eager_within_the_derived_tolerance(capsys):
    [single, model_parallel] = verify(WORKLOAD, CPU2, ["single", "model-parallel"], 4,
                                      {"split_size": 2}, 1e-5)
    for verdict in (single, model_parallel):
        assert verdict.error is None and verdict.ok, verdict
        # Compiled code rounds otherwise than eager (other fused sums), so the step differs
        # from eager's, but far less than the step moves the parameters.
        assert 0 < verdict.max_abs_difference <= verdict.tolerance
        assert verdict.tolerance >= 1e-5
        assert verdict.tolerance < verdict.baseline_update / DRIFT_ALLOWANCE
    # The command: its table, and exit 0.
    assert main([*FLAGS, "--strategy", "single,model-parallel"]) == 0
    out = capsys.readouterr().out
    assert "(32px, fp32, compiled whole) from seed 0, against single eager on cpu" in out
    rows = [line for line in out.splitlines() if line.split()[:1] in (["single"],
                                                                      ["model-parallel"])]
    assert len(rows) == 2 and all(row.endswith("ok") for row in rows), out


def test_a_compiled_step_that_computes_otherwise_fails(compiled_wrong, capsys):
    [verdict] = verify(WORKLOAD, CPU2, ["single"], 4, {"split_size": 2}, 1e-5)
    assert compiled_wrong  # the strategy's model went through the broken backend
    assert verdict.error is None and not verdict.ok
    assert verdict.max_abs_difference > 10 * verdict.tolerance
    assert main([*FLAGS, "--strategy", "single"]) == 1
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("single ")]
    assert row.endswith("FAILED"), out
