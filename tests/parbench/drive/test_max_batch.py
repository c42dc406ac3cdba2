"""Running out of memory under a real cap (CPU, RLIMIT_DATA): recorded as oom, the sweep goes on,
and max-batch finds the boundary."""

import json
import re

import pytest

from parbench.cli import main
from parbench.drive.max_batch import find_max_batch, first_batch
from parbench.drive.runner import run_config
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config
from tests.support import CPU2, TINY_FLAGS

TINY = [*TINY_FLAGS, "--steps", "1", "--warmup", "1", "--progress", "off"]


def test_an_out_of_memory_configuration_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    status = main(["run", "--strategy", "single", "--devices", "cpu", "--batch-size",
                   "8,2048,16", "--memory-cap-mib", "400", "--results-dir", str(tmp_path),
                   *TINY])
    assert status == 0
    [folder] = list(tmp_path.iterdir())
    records = json.loads((folder / "records.json").read_text())
    assert [(r["global_batch"], r["status"]) for r in records] == [
        (8, "ok"), (2048, "oom"), (16, "ok")]
    assert "can't allocate memory" in records[1]["reason"]
    assert all(r["memory_cap_mib"] == 400 for r in records)


@pytest.mark.timeout(120)
def test_a_rank_that_runs_out_of_memory_makes_the_configuration_oom(tiny_workload, child_pids):
    config = Config("ddp", tiny_workload, 4096, CPU2, warmup=0, steps=1,
                    memory_cap_mib=400, timeout_s=90)
    record = run_config(config)
    assert record.status == "oom", record.reason
    assert record.reason.startswith("LaunchError: rank ")
    assert child_pids() == []


@pytest.mark.timeout(180)
def test_max_batch_finds_the_largest_batch_that_trains_under_the_cap(tiny_workload):
    # Each trial is a fresh capped process (under a second each): start well below the
    # boundary, found here at batch 39 to 44, and 54 to 59 where the fork server was started
    # before any measurement pinned malloc's thresholds (as in the whole suite; with a cap of
    # 250 MiB, 121 and 175). Every trial at most 64: trials from 128 up that ran out of memory
    # now and then crashed the process instead (SIGSEGV, at 128 to 256), an error that ends
    # the search.
    config = Config("single", tiny_workload, 8, parse_devices("cpu"), warmup=1, steps=1,
                    memory_cap_mib=195)
    batch, limited, trials = find_max_batch(config, limit=4096)
    # The cap binds: the heap's pinned 1 GiB pad, held when the cap was set, once raised it
    # to batch 1263.
    assert not limited and 8 < batch < 512
    outcome = {r.global_batch: r.status for r in trials}
    assert outcome[batch] == "ok" and outcome[batch + 1] == "oom"
    assert list(outcome)[:2] == [8, 16]  # doubling first


def test_max_batch_prints_the_answer_and_writes_every_trial(tmp_path, capsys):
    status = main(["max-batch", "--strategy", "single", "--devices", "cpu", "--model",
                   "resnet18", "--image-size", "32", "--num-classes", "10", "--memory-cap-mib",
                   "400", "--start", "64", "--limit", "128", "--precision", "bf16",
                   "--channels-last", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "largest global batch that trains (resnet18, 32px, cpu, 400 MiB per process)" in out
    [folder] = list(tmp_path.iterdir())
    trials = json.loads((folder / "records.json").read_text())
    assert trials[0]["global_batch"] == 64
    # Which batches fit is this machine's; the answer printed is the trials' own: the largest
    # that trained, every one that ran out larger (the search never tries past a known failure
    # nor below a known fit), and the limit named where nothing ran out.
    fit = [r["global_batch"] for r in trials if r["status"] == "ok"]
    out_of_memory = [r["global_batch"] for r in trials if r["status"] == "oom"]
    assert len(fit) + len(out_of_memory) == len(trials)
    assert max(fit, default=0) < min(out_of_memory, default=129)
    answer = max(fit) if fit else "none (not even the smallest)"
    limited = "" if out_of_memory else " (the --limit 128 stopped the search)"
    assert re.search(rf"^  single +{re.escape(str(answer) + limited)}$", out, re.M), out
    assert {(r["precision"], r["channels_last"]) for r in trials} == {("bf16", True)}


def test_the_search_starts_at_the_first_batch_the_strategy_can_train(tiny_workload):
    """--start in whole units, rounded up, then past what the model family cannot train on
    (resnet18 at 32 px: 2 images a forward pass): never below --start, never a refused one."""
    assert first_batch(Config("ddp", tiny_workload, 3, CPU2), limit=64) == 4  # 2 per replica
    assert first_batch(Config("ddp", tiny_workload, 1, CPU2), limit=64) == 4  # 2 was 1 each
    assert first_batch(Config("single", tiny_workload, 1, parse_devices("cpu")), limit=64) == 2
    # None up to the limit: the rounded start, whose plan says why
    assert first_batch(Config("single", tiny_workload, 1, parse_devices("cpu")), limit=1) == 1
