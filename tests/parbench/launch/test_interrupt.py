"""Real interruptions of a real sweep (SIGKILL, and SIGTERM, which parbench turns into Ctrl-C's
KeyboardInterrupt): what was measured is on disk and complete, no worker outlives the sweep, and
--resume measures only what is missing."""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Enough that ddp's ranks (1 + 10 steps, then 1 + 10 without communication: some 2.5 s on 2
# cores) are still training when the signal comes, 0.5 s after both have started.
STEPS = 10
SWEEP = ["run", "--strategy", "single,ddp", "--devices", "cpu,cpu", "--model", "resnet18",
         "--image-size", "32", "--num-classes", "10", "--batch-size", "4,8",
         "--steps", str(STEPS), "--warmup", "1", "--progress", "off"]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(stat.parent.name))
        except (OSError, IndexError):
            continue
    return found


def _servers(sweep: int) -> list[int]:
    """The sweep's fork server: a child of the sweep."""
    servers = []
    for pid in _children(sweep):
        try:
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                servers.append(pid)
        except OSError:
            continue
    return servers


def _ranks(sweep: int) -> list[int]:
    """The sweep's workers: forked by its fork server."""
    return [rank for server in _servers(sweep) for rank in _children(server)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(results: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "parbench", *SWEEP, "--results-dir",
                             str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


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


@dataclasses.dataclass(frozen=True)
class Interrupted:
    """A sweep signalled during ddp, once it has exited: its results folder, the ranks that
    were running, its exit status and its stderr."""

    results: Path
    ranks: list[int]
    returncode: int
    err: str


def _interrupted(results: Path, signum: int) -> Interrupted:
    sweep = _start(results)
    ranks = _interrupt_during_ddp(sweep, results, signum)
    _, err = sweep.communicate(timeout=60)
    return Interrupted(results, ranks, sweep.returncode, err)


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory) -> Interrupted:
    """A sweep SIGKILLed during ddp, measured once for the module: the SIGKILL case checks it
    and the resume test resumes a copy of its folder."""
    return _interrupted(tmp_path_factory.mktemp("killed"), signal.SIGKILL)


# SIGKILL: no handler runs, and the ranks must die with the sweep on their own. SIGTERM:
# parbench's handler (cli._interrupt) raises KeyboardInterrupt, and from there on the sweep
# stops exactly as on Ctrl-C (SIGINT, whose KeyboardInterrupt is Python's own): launch.spawn
# kills the ranks, `parbench run` prints the resume hint and exits 130. A SIGINT case would
# measure that same path again, so there is none.
@pytest.mark.timeout(240)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_an_interrupted_sweep_keeps_its_records_and_leaves_no_worker(request, tmp_path, signum):
    sweep = (request.getfixturevalue("killed_sweep") if signum == signal.SIGKILL
             else _interrupted(tmp_path, signum))
    deadline = time.monotonic() + 10
    while any(_alive(r) for r in sweep.ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(r) for r in sweep.ranks), "a rank outlived the sweep"
    records = _records(sweep.results)
    assert [r["strategy"] for r in records] == ["single"]
    assert records[0]["status"] == "ok" and len(records[0]["step_times_s"]) == STEPS
    if signum == signal.SIGKILL:
        assert sweep.returncode == -signal.SIGKILL
    else:
        assert sweep.returncode == 130
        assert "interrupted; 1 configuration(s) are recorded" in sweep.err
        assert "parbench run --resume" in sweep.err and "Traceback" not in sweep.err


@pytest.mark.timeout(120)
def test_a_killed_sweeps_fork_server_and_ranks_exit_long_before_their_steps_end(tmp_path):
    """SIGKILL runs no handler: the fork server must see its launcher gone and exit, and the
    ranks with it (PR_SET_PDEATHSIG), though their configuration has steps for a minute more.
    (The case above cannot tell: its ranks' steps end within seconds anyway, and
    communicate() waits for them.)"""
    sweep = subprocess.Popen([sys.executable, "-m", "parbench", "run", "--strategy", "ddp",
                              "--devices", "cpu,cpu", "--model", "resnet18", "--image-size",
                              "32", "--num-classes", "10", "--batch-size", "4", "--steps",
                              "1000", "--warmup", "1", "--progress", "off", "--results-dir",
                              str(tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(_ranks(sweep.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        processes = [*_servers(sweep.pid), *_ranks(sweep.pid)]
        assert len(processes) == 3, "the sweep never started ddp's two ranks"
        sweep.kill()
        sweep.wait(timeout=30)
        killed = time.monotonic()
        while any(_alive(p) for p in processes) and time.monotonic() - killed < 20:
            time.sleep(0.1)
        left = [p for p in processes if _alive(p)]
        assert not left, f"{left} still running 20 s after the sweep was killed"
    finally:
        sweep.kill()
        for pid in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(300)
def test_resume_measures_only_what_is_missing(killed_sweep, tmp_path):
    [killed] = list(killed_sweep.results.iterdir())
    folder = tmp_path / killed.name  # a copy: the SIGKILL case reads the original
    shutil.copytree(killed, folder)
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
