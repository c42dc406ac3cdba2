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
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from parbench.cli import main
from tests.support import TINY_FLAGS, child_pids, children, holds_tcp_socket

# ddp's ranks are frozen (SIGSTOP) once both are set up, before the signal: however busy
# the machine, they cannot end their steps first (the launcher ends ranks with SIGKILL, which
# a stopped process obeys). 5 steps: the first record is still a few steps' worth.
STEPS = 5
SWEEP = ["run", "--strategy", "single,ddp", "--devices", "cpu,cpu", *TINY_FLAGS,
         "--batch-size", "4,8", "--steps", str(STEPS), "--warmup", "1", "--progress", "off"]


def _servers(sweep: int) -> list[int]:
    """The sweep's fork server: a child of the sweep."""
    return [pid for pid, command in children(sweep) if b"forkserver" in command]


def _ranks(sweep: int) -> list[int]:
    """The sweep's workers: forked by its fork server."""
    return [rank for server in _servers(sweep) for rank, _ in children(server)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone_within(pids: list[int], since: float, seconds: float) -> list[int]:
    """Those of `pids` still alive `seconds` after `since` (waiting no longer than that)."""
    while any(_alive(p) for p in pids) and time.monotonic() - since < seconds:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _during_ddp(results: Path, ranks_of: Callable[[], list[int]]) -> list[int] | None:
    """Wait until the first record is on disk and ddp's two ranks are set up (each connected
    to the rendezvous store, so each has armed its death with its parent), then freeze them
    (SIGSTOP): their pids (None if that never happens). Frozen, they can never end their steps
    on their own, so whatever the signal then sent finds them, it found them mid-sweep."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = ranks_of()
        if (list(results.glob("*/records.json")) and len(ranks) == 2
                and all(holds_tcp_socket(rank) for rank in ranks)):
            for rank in ranks:
                os.kill(rank, signal.SIGSTOP)
            return ranks
        time.sleep(0.05)
    return None


def _records(results: Path) -> list[dict]:
    [folder] = list(results.iterdir())
    return json.loads((folder / "records.json").read_text())


@dataclasses.dataclass(frozen=True)
class Interrupted:
    """A sweep signalled during ddp, once it has exited: its results folder, the ranks that
    were running (and the fork server that forked them), its exit status, its stderr and when
    it was signalled."""

    results: Path
    ranks: list[int]
    returncode: int
    err: str = ""
    servers: list[int] = dataclasses.field(default_factory=list)
    signalled_at: float = 0.0


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory):
    """`parbench run` SIGKILLed during ddp, measured once for the module: the SIGKILL case, the
    fork server's case and the resume test (on a copy of its folder) read it. Its ranks are
    frozen (SIGSTOP, by _during_ddp) before the kill, so that they can never end their steps on
    their own: one that is gone was killed because its launcher died."""
    results = tmp_path_factory.mktemp("killed")
    sweep = subprocess.Popen([sys.executable, "-m", "parbench", *SWEEP, "--results-dir",
                              str(results)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    ranks: list[int] = []
    servers: list[int] = []
    try:
        ranks = _during_ddp(results, lambda: _ranks(sweep.pid)) or []
        servers = _servers(sweep.pid)
        assert len(ranks) == 2 and len(servers) == 1, "the sweep never reached ddp's ranks"
        sweep.kill()
        killed_at = time.monotonic()
        sweep.wait(timeout=30)
        yield Interrupted(results, ranks, sweep.returncode, servers=servers,
                          signalled_at=killed_at)
    finally:  # whatever happened above: nothing it started is left
        sweep.kill()
        sweep.wait()
        for pid in [*servers, *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _terminated(results: Path, capsys) -> Interrupted:
    """The sweep run in this process, as `parbench run` runs it (cli.main, which turns SIGTERM
    into KeyboardInterrupt), sent SIGTERM from a thread once ddp's ranks run (and are frozen:
    ddp is certain to be stopped by the signal, not to have finished first)."""
    done, sent = threading.Event(), {}

    def terminate_during_ddp() -> None:
        ranks = _during_ddp(results, lambda: [] if done.is_set() else child_pids())
        if ranks and not done.is_set():
            sent["ranks"] = ranks
            os.kill(os.getpid(), signal.SIGTERM)

    handler = signal.getsignal(signal.SIGTERM)
    watcher = threading.Thread(target=terminate_during_ddp, daemon=True)
    watcher.start()
    try:
        status = main([*SWEEP, "--results-dir", str(results)])
    finally:
        done.set()
        watcher.join()
        signal.signal(signal.SIGTERM, handler)
    assert "ranks" in sent, "the sweep never reached ddp's ranks"
    return Interrupted(results, sent["ranks"], status, capsys.readouterr().err)


# SIGKILL: no handler runs, and the ranks must die with the sweep on their own. SIGTERM:
# parbench's handler (cli._interrupt) raises KeyboardInterrupt, and from there on the sweep
# stops exactly as on Ctrl-C (SIGINT, whose KeyboardInterrupt is Python's own): launch.spawn
# kills the ranks, `parbench run` prints the resume hint and exits 130. A SIGINT case would
# measure that same path again, so there is none. The SIGTERM case runs the sweep in this
# process (cli.main, the command's own code: `python -m parbench` adds only sys.exit); a
# SIGKILL needs a process of its own to kill.
@pytest.mark.timeout(240)
# SIGKILL's case (13 s of two cores) in the slow tier, SIGTERM's in the README's command.
@pytest.mark.parametrize("signum", [pytest.param(signal.SIGKILL, marks=pytest.mark.slow),
                                    signal.SIGTERM])
def test_an_interrupted_sweep_keeps_its_records_and_leaves_no_worker(request, tmp_path, capsys,
                                                                     signum):
    sweep = (request.getfixturevalue("killed_sweep") if signum == signal.SIGKILL
             else _terminated(tmp_path, capsys))
    assert not _gone_within(sweep.ranks, time.monotonic(), 10), "a rank outlived the sweep"
    records = _records(sweep.results)
    assert records[0]["strategy"] == "single"
    assert records[0]["status"] == "ok" and len(records[0]["step_times_s"]) == STEPS
    if signum == signal.SIGKILL:  # no handler ran: the configuration it stopped in is absent
        assert sweep.returncode == -signal.SIGKILL
        assert len(records) == 1
    else:  # recorded as stopped, with what stopped it, for --resume to measure again
        assert [(r["strategy"], r["status"], r["reason"]) for r in records[1:]] == [
            ("ddp", "error", "interrupted by SIGTERM")]
        assert sweep.returncode == 130
        assert "interrupted by SIGTERM; 1 finished configuration(s) are recorded" in sweep.err
        assert "parbench run --resume" in sweep.err and "Traceback" not in sweep.err
        assert child_pids() == []


@pytest.mark.timeout(120)
def test_a_killed_sweeps_fork_server_and_ranks_exit_long_before_their_steps_end(killed_sweep):
    """SIGKILL runs no handler: the fork server must see its launcher gone and exit, and the
    ranks with it (PR_SET_PDEATHSIG). The ranks were frozen before the kill, so they could
    never end their steps: a rank that is gone was killed, not finished. (Running, the case
    above could not tell: its ranks' steps end within seconds anyway.)"""
    processes = [*killed_sweep.servers, *killed_sweep.ranks]
    assert len(processes) == 3
    left = _gone_within(processes, killed_sweep.signalled_at, 20)
    assert not left, f"{left} still running 20 s after the sweep was killed"


@pytest.mark.slow  # measures the killed sweep's missing configurations: about 9 s
@pytest.mark.timeout(300)
def test_resume_measures_only_what_is_missing(killed_sweep, tmp_path, capsys):
    [killed] = list(killed_sweep.results.iterdir())
    folder = tmp_path / killed.name  # a copy: the SIGKILL case reads the original
    shutil.copytree(killed, folder)
    first = _records(tmp_path)[0]
    status = main(["run", "--resume", str(folder), "--progress", "off"])
    err = capsys.readouterr().err
    assert status == 0, err
    assert "1 of 4 configurations already measured" in err
    assert "[1/4]" not in err and "[2/4] ddp" in err  # the kept one is not measured again
    records = _records(tmp_path)
    assert [(r["strategy"], r["global_batch"]) for r in records] == [
        ("single", 4), ("ddp", 4), ("single", 8), ("ddp", 8)]
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["step_times_s"] == first["step_times_s"]  # kept, not re-measured
    assert [r["config_index"] for r in records] == [0, 1, 2, 3]
    assert child_pids() == []


@pytest.mark.parametrize("argv, message", [
    (["--resume", "NOPE"], "is not a run folder (no records.json or command.json)"),
    (["--resume", "RUN", "--batch-size", "64"],
     "--batch-size 64 differs from the resumed run's 4,8"),
])
def test_resume_refuses_what_it_cannot_resume(tmp_path, capsys, argv, message):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "records.json").write_text("[]")
    (folder / "command.json").write_text(json.dumps({"batch_size": "4,8"}))
    argv = [str(folder) if a == "RUN" else str(tmp_path / a) if a == "NOPE" else a
            for a in argv]
    assert main(["run", *argv]) == 2
    assert message in capsys.readouterr().err
