"""Real interruptions of a real sweep (SIGKILL, SIGTERM, Ctrl-C): what was measured is on disk
and complete, no worker outlives the sweep, and --resume measures only what is missing."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SWEEP = ["run", "--strategy", "single,ddp", "--devices", "cpu,cpu", "--model", "resnet18",
         "--image-size", "32", "--num-classes", "10", "--batch-size", "4,8", "--steps", "20",
         "--warmup", "1", "--progress", "off"]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(stat.parent.name))
        except (OSError, IndexError):
            continue
    return found


def _ranks(sweep: int) -> list[int]:
    """The sweep's workers: forked by its fork server, a child of the sweep."""
    servers = []
    for pid in _children(sweep):
        try:
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                servers.append(pid)
        except OSError:
            continue
    return [rank for server in servers for rank in _children(server)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _default_sigint() -> None:
    # As in a terminal: a test run started in the background (`pytest &` without job
    # control) ignores SIGINT, and its children would inherit that and never see Ctrl-C.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(results: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "parbench", *SWEEP, "--results-dir",
                             str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_sigint)


def _interrupt_during_ddp(sweep: subprocess.Popen, results: Path, signum: int) -> list[int]:
    """Wait until the first record is on disk and ddp's ranks are running, then signal."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        folders = list(results.glob("*/records.json"))
        ranks = _ranks(sweep.pid)
        if folders and len(ranks) == 2:
            time.sleep(0.5)
            sweep.send_signal(signum)
            return ranks
        time.sleep(0.05)
    sweep.kill()
    pytest.fail("the sweep never reached ddp")


def _records(results: Path) -> list[dict]:
    [folder] = list(results.iterdir())
    return json.loads((folder / "records.json").read_text())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_sweep_keeps_its_records_and_leaves_no_worker(tmp_path, signum):
    sweep = _start(tmp_path)
    ranks = _interrupt_during_ddp(sweep, tmp_path, signum)
    _, err = sweep.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(r) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(r) for r in ranks), "a rank outlived the sweep"
    records = _records(tmp_path)
    assert [r["strategy"] for r in records] == ["single"]
    assert records[0]["status"] == "ok" and len(records[0]["step_times_s"]) == 20
    if signum == signal.SIGKILL:
        assert sweep.returncode == -signal.SIGKILL
    else:
        assert sweep.returncode == 130
        assert "interrupted; 1 configuration(s) are recorded" in err
        assert "parbench run --resume" in err and "Traceback" not in err


@pytest.mark.timeout(300)
def test_resume_measures_only_what_is_missing(tmp_path):
    sweep = _start(tmp_path)
    _interrupt_during_ddp(sweep, tmp_path, signal.SIGKILL)
    sweep.wait(timeout=60)
    [folder] = list(tmp_path.iterdir())
    first = _records(tmp_path)[0]
    resumed = subprocess.run([sys.executable, "-m", "parbench", "run", "--resume", str(folder),
                              "--progress", "off"], capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 of 4 configurations already measured" in resumed.stderr
    assert "[1/4]" not in resumed.stderr  # the kept one is not measured again
    records = _records(tmp_path)
    assert [(r["strategy"], r["global_batch"]) for r in records] == [
        ("single", 4), ("ddp", 4), ("single", 8), ("ddp", 8)]
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["step_times_s"] == first["step_times_s"]  # kept, not re-measured
    assert [r["config_index"] for r in records] == [0, 1, 2, 3]


@pytest.mark.parametrize("argv, message", [
    (["--resume", "NOPE"], "is not a run folder (no records.json or command.json)"),
    (["--resume", "RUN", "--batch-size", "64"],
     "--batch-size 64 differs from the resumed run's 4,8"),
])
def test_resume_refuses_what_it_cannot_resume(tmp_path, capsys, argv, message):
    from parbench.cli import main
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "records.json").write_text("[]")
    (folder / "command.json").write_text(json.dumps({"batch_size": "4,8"}))
    argv = [str(folder) if a == "RUN" else str(tmp_path / a) if a == "NOPE" else a
            for a in argv]
    assert main(["run", *argv]) == 2
    assert message in capsys.readouterr().err
