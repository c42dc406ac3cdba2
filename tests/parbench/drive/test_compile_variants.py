"""`--compile off,block,model` and `--compile-mode`: each compiled scope in each mode a
configuration of its own (eager once), in the same rounds; the refused ones recorded as
skipped; each record saying how it was compiled; compiled records compared with those
compiled alike."""

from dataclasses import replace

import pytest

from parbench import cli
from parbench.commands.run import build_sweep, spec_of
from parbench.drive import runner
from parbench.drive.runner import add_comparisons, planned_fields
from parbench.plots.common import compile_label, config_label
from parbench.results.comparisons import compiled_as
from tests.support import ok_record

RO = "reduce-overhead"


def _sweep(*flags):
    return build_sweep(spec_of(cli.parser().parse_args(["run", *flags])))


def _variant(config):
    w = config.workload
    return (w.compile, w.compile_scope, w.compile_mode) if w.compile else "eager"


def test_each_scope_in_each_mode_is_a_configuration_and_eager_is_one():
    sweep = _sweep("--strategy", "single,pipeline", "--devices", "cpu,cpu", "--split-size", "2",
                   "--batch-size", "8", "--compile", "off,block,model", "--compile-mode",
                   f"default,{RO}", "--repeats", "2")
    assert [(c.strategy, c.options.get("accumulation_split"), _variant(c))
            for c in sweep.configs] == [
        ("single", None, "eager"), ("single", 2, "eager"), ("pipeline", None, "eager"),
        ("single", None, (True, "block", "default")), ("single", 2, (True, "block", "default")),
        ("pipeline", None, (True, "block", "default")),
        ("single", None, (True, "block", RO)), ("pipeline", None, (True, "block", RO)),
        ("single", None, (True, "model", "default")), ("single", 2, (True, "model", "default")),
        ("pipeline", None, (True, "model", "default")),
        ("single", None, (True, "model", RO)), ("pipeline", None, (True, "model", RO))]
    configs = sweep.configs
    assert len({c.key() for c in configs}) == len(configs)
    assert " fp32 on " in configs[0].label()
    assert " fp32 compiled on " in configs[3].label()
    assert " fp32 compiled whole reduce-overhead on " in configs[11].label()
    # pipeline refuses CUDA graphs (no accumulating baseline beside them): recorded as skipped
    assert "note: pipeline refuses 2 of its 5 configurations" in "\n".join(sweep.notes)
    refused = runner.run_config(configs[12], measure=lambda config: pytest.fail("measured"))
    assert refused.status == "skipped"
    assert "runs each stage on a thread of its own" in refused.reason
    # Every configuration that runs, in every round: interleaved.
    for r in (0, 1):
        assert {s.index for s in sweep.slots if s.round == r} == {
            i for i, c in enumerate(configs) if c.plan.runs}


def test_a_record_says_how_it_was_compiled_and_a_cpu_record_claims_no_cuda_graphs():
    eager, per_block, whole = (
        c for c in _sweep("--strategy", "single", "--devices", "cpu", "--compile",
                          "off,block,model", "--compile-mode", RO).configs)
    fields = [planned_fields(c) for c in (eager, per_block, whole)]
    assert [(f["compile"], f["compile_scope"], f["compile_mode"], f["cuda_graphs"])
            for f in fields] == [(False, None, None, None), (True, "block", RO, False),
                                 (True, "model", RO, False)]
    record = ok_record(**fields[2])
    assert compile_label(record.to_dict()) == "compiled whole reduce-overhead (no CUDA graphs)"
    assert runner._compile_fields(whole.workload, "cuda")["cuda_graphs"] is True
    assert runner._compile_fields(replace(whole.workload, compile_mode="max-autotune"),
                                  "cuda")["cuda_graphs"] is True
    assert runner._compile_fields(replace(whole.workload, compile_mode="default"),
                                  "cuda")["cuda_graphs"] is False


def _record(strategy, throughput, scope=None, mode=None, **fields):
    return ok_record(strategy, **{
        "devices": "cpu,cpu" if strategy == "model-parallel" else "cpu",
        "throughput_ips": throughput, "compile": scope is not None, "compile_scope": scope,
        "compile_mode": mode, **fields})


def test_compiled_records_are_compared_with_those_compiled_alike():
    records = [_record("single", 10.0), _record("single", 20.0, "block", "default"),
               _record("single", 40.0, "model", RO),
               _record("model-parallel", 12.0), _record("model-parallel", 30.0, "model", RO),
               # from before scopes and modes: per block, in the default mode
               _record("model-parallel", 25.0, None, None, compile=True)]
    add_comparisons(records)
    assert records[3].speedup_vs_baseline == pytest.approx(12 / 10)
    assert records[4].speedup_vs_baseline == pytest.approx(30 / 40)
    assert records[5].speedup_vs_baseline == pytest.approx(25 / 20)


def test_a_compiled_record_from_before_scopes_was_compiled_whole_until_per_block_came():
    """--compile compiled each module a strategy runs whole until 2026-11-26 21:59:57 UTC."""
    def old(timestamp):
        return replace(_record("single", 1.0, None, None, compile=True),
                       environment={"timestamp_utc": timestamp})

    before, after = old("2026-11-26T00:54:06+00:00"), old("2026-11-27T01:14:51+00:00")
    assert (compiled_as(before), compiled_as(after)) == (("model", "default"),
                                                         ("block", "default"))
    assert [compile_label(r.to_dict()) for r in (before, after)] == ["compiled whole",
                                                                     "compiled"]


def test_figures_name_the_scope_and_mode_and_leave_per_block_default_as_it_was():
    labels = [config_label(_record("single", 1.0, scope, mode).to_dict()) for scope, mode in
              ((None, None), ("block", "default"), ("model", "default"),
               ("block", "max-autotune-no-cudagraphs"))]
    assert labels == ["single", "single compiled", "single compiled whole",
                      "single compiled max-autotune-no-cudagraphs"]
    on_gpu = _record("single", 1.0, "model", RO, cuda_graphs=True).to_dict()
    assert compile_label(on_gpu) == "compiled whole reduce-overhead"
