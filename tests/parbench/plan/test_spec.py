"""The sweep spec is what a run folder keeps: written and read back whole, a spec of another
version refused, and a command file from before specs read as its flags were."""

import json
import re
from pathlib import Path

import pytest

from parbench.cli import parser
from parbench.commands.arguments import UsageError
from parbench.commands.run_spec import read_spec, spec_of
from parbench.families.workloads import COMPILE_MODES, CUDA_GRAPH_MODES
from parbench.plan import SPEC_VERSION, SpecError, Sweep, SweepSpec
from parbench.results.folder import RunFolder

ROOT = Path(__file__).resolve().parents[3]
SEED_1 = ROOT / "results" / "20261125T202329Z-prediction-holdout-seed1-v2"


def _parse_run(argv):
    return parser().parse_args(["run", *argv])


def _parse(*argv):
    return _parse_run(list(argv))


def test_a_spec_is_written_and_read_back_whole():
    spec = spec_of(_parse("--strategy", "single,pipeline", "--split-size", "2,4", "--devices",
                          "cpu,cpu", "--batch-size", "8", "--image-size", "32"))
    stored = json.loads(json.dumps(spec.to_json()))
    assert stored["spec_version"] == SPEC_VERSION
    assert SweepSpec.from_json(stored) == spec
    assert [options["split_size"] for options in spec.options] == [2, 4]


@pytest.mark.parametrize("flags, tag", [
    (["--model", "resnet18", "--image-size", "128", "--devices", "cpu,cpu"],
     "resnet18-128px-2cpu"),
    (["--model", "vit_b_16", "--image-size", "64", "--devices", "cpu,cpu", "--strategy",
      "single,ddp"], "vit_b_16-64px-2cpu"),
    (["--model", "resnet18,resnet50,vit_b_16", "--image-size", "32,64",
      "--devices", "cpu,cpu,cpu,cpu"], "3models-32px-64px-4cpu"),
])
def test_a_run_folder_is_named_after_what_it_sweeps(flags, tag):
    spec = spec_of(parser().parse_args(["run", *flags]))
    assert spec.folder_tag() == tag
    assert SweepSpec(None, ("resnet18",), (8,), (32,), ("cuda:0", "cuda:0,cuda:1")
                     ).folder_tag() == "resnet18-32px-1-2cuda"
    assert SweepSpec(None, ("resnet18",), (8,), (32,), ("cpu",),
                     experiment="tutorial").folder_tag() == "tutorial"
    assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", tag)  # a name --tag accepts


def test_a_spec_of_another_version_is_refused():
    stored = {**spec_of(_parse("--devices", "cpu")).to_json(), "spec_version": SPEC_VERSION + 1}
    with pytest.raises(SpecError, match=f"spec version {SPEC_VERSION + 1}; this parbench reads"):
        SweepSpec.from_json(stored)


def test_a_run_from_before_specs_is_read_as_its_flags_and_sweeps_what_it_measured():
    """The published seed-1 held-out run kept its flags (command.json from before specs): read
    back, it draws the same 28 configurations its records hold."""
    folder = RunFolder(SEED_1)
    spec = read_spec(folder, _parse_run)
    assert (spec.experiment, spec.seed, spec.repeats, spec.steps) == (
        "prediction-holdout", 1, 5, 2)
    keys = [config.key() for config in Sweep.build(spec).configs]
    assert keys == [record.config_key for record in folder.read_records()]


def test_a_command_file_that_cannot_be_read_is_one_line(tmp_path):
    folder = RunFolder.create(tmp_path)
    (folder.path / "command.json").write_text('{"spec_version": 99}')
    with pytest.raises(UsageError, match="spec version 99"):
        read_spec(folder, _parse_run)


@pytest.mark.parametrize("flags, compiles, modes", [
    ([], ("off",), ("default",)), (["--compile"], ("block",), ("default",)),
    (["--compile", "off"], ("off",), ("default",)),
    (["--compile", "on,off"], ("block", "off"), ("default",)),
    (["--compile", "ON, off, on, block"], ("block", "off"), ("default",)),
    (["--compile", "model,off,block"], ("model", "off", "block"), ("default",)),
    (["--compile", "model", "--compile-mode", "reduce-overhead,default,reduce-overhead"],
     ("model",), ("reduce-overhead", "default")),
    # A mode given while --compile is off compiles per block.
    (["--compile-mode", "max-autotune"], ("block",), ("max-autotune",)),
    (["--compile", "off,model", "--compile-mode", "max-autotune-no-cudagraphs"],
     ("off", "model"), ("max-autotune-no-cudagraphs",))])
def test_compile_is_an_axis_of_scopes_and_modes(flags, compiles, modes):
    spec = spec_of(_parse("--devices", "cpu", *flags))
    assert (spec.compiles, spec.compile_modes) == (compiles, modes)
    assert SweepSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize("flags, message", [
    (["--compile", "yes"], "--compile 'yes': give off, on (each block), block or model, or a "
                           "comma list of them to measure each"),
    (["--compile", "block,stage"], "--compile 'block,stage': give off, on"),
    (["--compile-mode", "fast"], "unknown compile mode 'fast'; available: default, "
                                 "reduce-overhead, max-autotune-no-cudagraphs, max-autotune"),
    (["--compile-mode", "reduce-overhead", "--warmup", "0"], "--compile needs --warmup 1")])
def test_a_bad_compile_value_is_one_line(flags, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        spec_of(_parse("--devices", "cpu", *flags))


def test_the_modes_offered_are_torchs_and_those_of_cuda_graphs_are_its_own():
    """Each mode is one torch.compile knows, and a mode captures CUDA graphs exactly where
    torch's own options for it turn them on."""
    import torch._inductor

    known = torch._inductor.list_mode_options()
    assert set(COMPILE_MODES) <= set(known)
    assert {mode for mode in COMPILE_MODES if known[mode].get("triton.cudagraphs")} == set(
        CUDA_GRAPH_MODES)


def test_runs_from_before_the_compile_axis_resume_as_they_were(tmp_path):
    """A spec, and a run's flags from before specs, kept `compile` as a bool."""
    stored = {**spec_of(_parse("--devices", "cpu")).to_json(), "compile": True}
    del stored["compiles"], stored["compile_modes"]
    assert SweepSpec.from_json(stored).compiles == ("block",)
    folder = RunFolder.create(tmp_path)
    flags = {"strategy": "single", "devices": ["cpu"], "compile": True, "warmup": 1}
    (folder.path / "command.json").write_text(json.dumps(flags))
    spec = read_spec(folder, _parse_run)
    assert (spec.compiles, spec.compile_modes) == (("block",), ("default",))


def test_a_spec_from_before_scopes_and_modes_reads_its_compile_axis_as_on_and_off():
    """`--compile on,off` was stored as [true, false], and no modes."""
    stored = {**spec_of(_parse("--devices", "cpu")).to_json(), "compiles": [True, False]}
    del stored["compile_modes"]
    spec = SweepSpec.from_json(json.loads(json.dumps(stored)))
    assert (spec.compiles, spec.compile_modes) == (("block", "off"), ("default",))
