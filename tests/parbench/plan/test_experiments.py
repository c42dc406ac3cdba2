"""Named experiments: every file is a valid `parbench run`, `--experiment` applies it under the
flags given, and the run says which experiment and commit made it."""

import json

import pytest

from parbench.cli import main, parser
from parbench.commands.run import build_sweep, spec_of
from parbench.plan import SPEC_VERSION, experiments, suite
from parbench.plan.planning import ConfigError
from tests.support import CPU2


@pytest.mark.parametrize("name", experiments.names())
def test_every_experiment_is_a_valid_run_with_intervals(name):
    experiment = experiments.load(name)
    assert experiment.description and experiment.source
    args = parser().parse_args(["run", *experiment.arguments])
    assert args.repeats is not None and args.repeats >= suite.REPEATS  # published: intervals
    sweep = build_sweep(spec_of(args), [CPU2])  # refused or planned
    assert any(config.plan.runs for config in sweep.configs)


def test_the_known_experiments_are_there():
    assert {"quick", "tutorial", "data-parallel-strong", "data-parallel-weak"} <= set(
        experiments.names())
    tutorial = experiments.load("tutorial").arguments
    assert tutorial[tutorial.index("--split-size") + 1] == "1,3,5,8,10,12,20,40,60"


def test_an_unknown_experiment_is_refused_with_the_names():
    with pytest.raises(ConfigError, match="unknown experiment 'nope'; available: .*tutorial"):
        experiments.load("nope")


def test_a_run_of_an_experiment_keeps_its_flags_under_the_ones_given(tmp_path, monkeypatch,
                                                                       capsys):
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "tiny.json").write_text(json.dumps(dict(
        description="one tiny configuration", source="this test",
        arguments=["--strategy", "single", "--batch-size", "4", "--image-size", "32",
                   "--steps", "2", "--warmup", "0", "--repeats", "3"])))
    monkeypatch.setattr(experiments, "FOLDER", folder)
    # --warmup 1 is the flag's default and still wins over the experiment's 0.
    status = main(["run", "--experiment", "tiny", "--repeats", "1", "--steps", "1",
                   "--warmup", "1", "--devices", "cpu",
                   "--results-dir", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert status == 0
    [run] = (tmp_path / "results").iterdir()
    assert run.name.endswith("Z-tiny")  # named after its experiment, no --tag given
    command = json.loads((run / "command.json").read_text())
    assert command["experiment"] == "tiny"
    assert command["spec_version"] == SPEC_VERSION
    assert (command["batch_sizes"], command["image_sizes"]) == ([4], [32])  # the experiment's
    assert (command["repeats"], command["steps"], command["warmup"]) == (1, 1, 1)  # typed win
    [record] = json.loads((run / "records.json").read_text())
    assert (record["global_batch"], record["measured_steps"], record["warmup_steps"]) == (
        4, 1, 1)
    assert main(["report", str(run)]) == 0
    assert ("Made by `parbench run --experiment tiny --repeats 1 --steps 1 --warmup 1 --devices "
            "cpu --results-dir") in (run / "README.md").read_text()
    assert "results:" in out
