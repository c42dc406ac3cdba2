"""benchmarks/gpu/reference.py on CPU: its dry run, the chunks and their limits, the chunk runner
that keeps each step's output, fills in what an earlier step found and stops a step at the
chunk's time limit, the per-test limit that ends a hung test, reading the commit without git,
and the install's checks and the wheels it brings."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import types
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "reference.py"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HANGS = """
import signal
import time


def test_hangs():
    time.sleep(60)


def test_after():
    pass


def test_stuck_in_c():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # the soft stage cannot reach it
    time.sleep(60)
"""


MODULES = {"reference": "reference", "chunks": "reference_chunks", "host": "reference_host",
           "commit": "reference_commit"}


@pytest.fixture(scope="module")
def gpu():
    """The script's modules, imported from its folder as they import each other when it runs:
    gpu.reference (the runner), gpu.chunks, gpu.host (wheels, install, checks), gpu.commit."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        yield types.SimpleNamespace(**{short: importlib.import_module(name)
                                       for short, name in MODULES.items()})
    finally:
        sys.path.remove(str(SCRIPT.parent))
        for name in MODULES.values():
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def per_test_timeout():
    spec = importlib.util.spec_from_file_location("per_test_timeout", SCRIPT.parent /
                                                  "per_test_timeout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dry_run(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_dry_run_prints_every_chunk_in_priority_order_and_runs_nothing(tmp_path):
    out = _dry_run("--results-dir", str(tmp_path))
    names = ["gpu-tests", "gpu-tests-slow", "gpu-tests-suites", "resnet50-224",
             "resnet50-224-large", "tutorial", "data-parallel", "pytest-benchmark", "asv",
             "predicted"]
    positions = [out.index(f"chunk {n} {name}:") for n, name in enumerate(names, 1)]
    assert positions == sorted(positions)
    assert "-m pytest -m gpu tests/gpu/test_gpu.py --deselect" in out
    assert out.count(" -v -p no:cacheprovider -p per_test_timeout --per-test-limit ") == 4
    for n, name in [(1, "gpu-tests"), (2, "gpu-tests-slow"), (3, "gpu-tests-suites"),
                    (8, "pytest-benchmark")]:
        assert f"--junitxml RUN/{n}-{name}/junit.xml" in out
    assert "predict --profile-device cuda" in out and "--devices 2,4,8" in out
    assert "--split-size 1,3,5,8,10,12,20,40,60" in out and "--devices cuda:0,cuda:0" in out
    assert "--batch-size '<max-batch'\"'\"'s answer>'" in out  # filled in at run time
    assert "[skipped: timm's benchmark.py is a script in timm's repository" in out
    estimates = [int(line.split()[1]) for line in out.splitlines()
                 if line.startswith("  estimated ")]
    assert len(estimates) == 10 and max(estimates) <= 570  # each chunk inside 10 minutes
    assert f"total estimated {sum(estimates)} s" in out
    assert "within 12 minutes: chunks 1,2." in out
    # What the install brings and checks, and the per-test limit.
    assert "wheels: none given" in out and "--fetch-wheels DIR" in out
    assert "asv (chunks 3,9): pip check, import, python -m asv --version" in out
    assert "per-test limit (chunks 1,2,3,8): benchmarks/gpu/per_test_timeout.py" in out
    assert "each test at most 150 s" in out
    assert list(tmp_path.iterdir()) == []


def test_the_dry_run_lists_what_a_wheels_folder_brings_and_lacks(tmp_path):
    for name in ("numpy-1.0-py3-none-any.whl", "nothing_installed_here-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    out = _dry_run("--wheels", str(tmp_path), "--chunks", "9")
    assert f"wheels from {tmp_path}: installs nothing_installed_here-1.0-py3-none-any.whl" in out
    assert re.search(r"keeps the host's numpy \d", out)
    assert "lacks asv, scipy, setuptools, tqdm, GPUtil" in out


def test_unknown_chunks_are_refused(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--chunks", "2,11"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith("--chunks: there are chunks 1 to 10, got 2,11")


def test_every_gpu_test_runs_in_one_chunk_each_kept_inside_its_time(gpu):
    every = gpu.chunks.chunks("cuda:0", None, COMMIT)
    assert [c.number for c in every] == list(range(1, 11))
    source = (ROOT / gpu.chunks.GPU_TESTS).read_text()
    named = gpu.chunks.SLOW_TESTS + gpu.chunks.SUITE_TESTS
    assert all(re.search(rf"^def {name}\(", source, re.M) for name in named)
    argv = [c.steps[0].argv for c in every[:3]]
    deselected = [argv[0][i + 1].split("::")[1] for i, a in enumerate(argv[0])
                  if a == "--deselect"]
    assert sorted(deselected) == sorted(named)
    assert [a.split("::")[1] for a in argv[1] if "::" in a] == list(gpu.chunks.SLOW_TESTS)
    assert [a.split("::")[1] for a in argv[2] if "::" in a] == list(gpu.chunks.SUITE_TESTS)
    assert all(c.estimate_s <= gpu.chunks.CHUNK_LIMIT_S for c in every)
    for chunk in every[:3]:
        assert int(gpu.chunks.per_test_s(chunk)) < gpu.chunks.CHUNK_LIMIT_S - 15
    # One test hung to its limit leaves the others their share of the estimate.
    for chunk, tests in zip(every[1:3], (gpu.chunks.SLOW_TESTS, gpu.chunks.SUITE_TESTS),
                            strict=True):
        others_s = chunk.estimate_s * (len(tests) - 1) / len(tests)
        assert int(gpu.chunks.per_test_s(chunk)) + others_s <= gpu.chunks.CHUNK_LIMIT_S


def test_a_chunk_keeps_each_step_and_stops_a_step_at_its_time_limit(gpu, tmp_path,
                                                                   child_pids):
    python = sys.executable
    write = "import pathlib, sys; pathlib.Path(sys.argv[1], 'found').write_text('64')"
    steps = (
        gpu.chunks.Step("finds", (python, "-c", write, "{folder}"), 1,
                       finds=("batch", lambda folder: (folder / "found").read_text())),
        gpu.chunks.Step("uses", (python, "-c", "print('batch', {batch})"), 1),
        gpu.chunks.Step("elsewhere", (python, "-c", ""), 1, needs="no such tool here"),
        gpu.chunks.Step("sleeps", (python, "-c", "import time; time.sleep(60)"), 1),
        gpu.chunks.Step("never", (python, "-c", "print('never')"), 1),
    )
    chunk = gpu.chunks.Chunk(1, "test", "the runner", steps,
                            summarise=lambda folder: {"batch": 64})
    folder = tmp_path / "1-test"
    gpu.reference.run_chunk(chunk, folder, {}, limit_s=4)
    entries = json.loads((folder / "steps.json").read_text())
    assert [e["step"] for e in entries] == ["finds", "uses", "elsewhere", "sleeps"]
    assert [e["status"] for e in entries[:3]] == ["ok", "ok", "skipped"]
    assert entries[0]["batch"] == "64"
    assert (folder / "uses.log").read_text() == "batch 64\n"
    assert entries[2]["reason"] == "no such tool here"
    assert entries[3]["status"].startswith("timeout after") and entries[3]["seconds"] < 30
    assert not (folder / "never.log").exists()
    assert json.loads((folder / "summary.json").read_text()) == {"batch": 64}
    assert child_pids() == []


def test_a_step_is_not_started_once_the_chunk_has_no_time_left(gpu, tmp_path):
    steps = (gpu.chunks.Step("late", (sys.executable, "-c", "print('late')"), 1),)
    folder = tmp_path / "1-late"
    gpu.reference.run_chunk(gpu.chunks.Chunk(1, "late", "", steps), folder, {}, limit_s=0)
    [entry] = json.loads((folder / "steps.json").read_text())
    assert entry["status"] == "not started: the chunk's time ran out"
    assert not (folder / "late.log").exists()


def test_a_step_is_told_when_it_will_be_killed_and_keeps_its_note(gpu, tmp_path):
    show = "import os; print(os.environ['PARBENCH_DEADLINE'])"
    steps = (gpu.chunks.Step("told", (sys.executable, "-c", show), 1, note="runs differently"),)
    folder = tmp_path / "1-told"
    gpu.reference.run_chunk(gpu.chunks.Chunk(1, "told", "", steps), folder, {}, limit_s=100)
    assert abs(int((folder / "told.log").read_text()) - (time.time() + 100)) < 10
    [entry] = json.loads((folder / "steps.json").read_text())
    assert entry["note"] == "runs differently"


def test_the_per_test_limit_is_the_least_of_mark_cap_and_the_deadline(per_test_timeout):
    limit = per_test_timeout.limit_s
    assert limit(None, None, None, None, now=0) is None
    assert limit(None, 300, None, None, now=0) == 300  # the ini value
    assert limit(600, 300, None, None, now=0) == 600  # a mark wins over the ini value
    assert limit(600, 300, 180, None, now=0) == 180  # no more than the cap
    assert limit(600, 0, 180, 100, now=0) == 100 - per_test_timeout.END_MARGIN_S
    assert limit(None, None, None, 10, now=100) == 1.0  # past the deadline: at once


def _hangs(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's configuration
    path = tmp_path / "test_hangs.py"
    path.write_text(HANGS)
    return path


def test_a_hung_test_fails_at_its_limit_and_the_chunk_goes_on(gpu, tmp_path, child_pids):
    # No pytest-timeout, as on the GPU hosts: per_test_timeout keeps the limit.
    argv = gpu.chunks._pytest(f"{_hangs(tmp_path)}::test_hangs", f"{_hangs(tmp_path)}::test_after",
                             per_test_s=2)
    step = gpu.chunks.Step("tests", argv, 1, env={"PYTHONPATH": gpu.chunks._pythonpath(),
                                                 "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    folder = tmp_path / "1-tests"
    [entry] = gpu.reference.run_chunk(gpu.chunks.Chunk(1, "tests", "", (step,)), folder, {},
                                  limit_s=60)
    assert entry["status"] == "exit 1" and entry["seconds"] < 20
    log = (folder / "tests.log").read_text()
    assert "per-test limit: per_test_timeout, at most 2 s" in log
    # -v: each test named as it starts and ends (the stack dump may come between the two)
    assert re.search(r"test_hangs\.py::test_hangs .*?FAILED", log, re.S)
    assert re.search(r"test_hangs\.py::test_after PASSED", log)
    assert "test_hangs.py::test_hangs ran past its 2 s limit" in log
    assert re.search(r'File ".*test_hangs\.py", line \d+ in test_hangs', log)  # its stack
    cases = ElementTree.parse(folder / "junit.xml").getroot().iter("testcase")
    failed = {case.get("name"): case.find("failure") is not None for case in cases}
    assert failed == {"test_hangs": True, "test_after": False}
    assert child_pids() == []


def test_a_test_stuck_past_python_ends_the_process_with_its_stack(tmp_path):
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"{_hangs(tmp_path)}::test_stuck_in_c", "-v",
         "-p", "per_test_timeout", "--per-test-limit", "1", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SCRIPT.parent),
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert time.monotonic() - start < 20
    assert done.returncode == 1
    assert "test_hangs.py::test_stuck_in_c" in done.stdout  # -v named it before it hung
    assert "Timeout (0:00:06)!" in done.stderr  # faulthandler, GRACE_S past the limit
    assert re.search(r'File ".*test_hangs\.py", line \d+ in test_stuck_in_c', done.stderr)


def _git_dir(root: Path, head: str, refs: dict[str, str], packed: str = "") -> Path:
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text(head + "\n")
    for name, commit in refs.items():
        (root / ".git" / name).write_text(commit + "\n")
    if packed:
        (root / ".git" / "packed-refs").write_text(packed)
    return root / ".git"


def test_the_commit_is_read_from_git_files_without_git(gpu, tmp_path):
    loose = _git_dir(tmp_path / "loose", "ref: refs/heads/main", {"refs/heads/main": COMMIT})
    assert gpu.commit.read_head(loose) == COMMIT
    packed = _git_dir(tmp_path / "packed", "ref: refs/heads/main", {},
                      f"# pack-refs with: peeled\n{COMMIT} refs/heads/main\n")
    assert gpu.commit.read_head(packed) == COMMIT
    assert gpu.commit.read_head(_git_dir(tmp_path / "detached", COMMIT, {})) == COMMIT
    # A worktree: .git is a file naming its folder, whose refs are in the common one.
    worktree = loose / "worktrees" / "other"
    worktree.mkdir(parents=True)
    (worktree / "HEAD").write_text("ref: refs/heads/main\n")
    (worktree / "commondir").write_text("../..\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".git").write_text(f"gitdir: {worktree}\n")
    assert gpu.commit.read_head(tmp_path / "other" / ".git") == COMMIT
    assert gpu.commit.read_head(tmp_path / "nowhere" / ".git") is None
    assert gpu.commit.read_head(_git_dir(tmp_path / "broken", "ref: refs/heads/x", {})) is None


def test_without_git_the_commit_comes_from_files_or_is_given_and_asv_is_not_handed_one(
        gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    monkeypatch.delenv("PARBENCH_COMMIT", raising=False)
    copy = tmp_path / "copy"  # a copy of the repository without .git
    copy.mkdir()
    assert gpu.commit.source_commit(copy) == (
        None, "no git, no .git, no --commit and no $PARBENCH_COMMIT")
    assert gpu.commit.source_commit(copy, "abc") == ("abc", "--commit")
    monkeypatch.setenv("PARBENCH_COMMIT", "def")
    assert gpu.commit.source_commit(copy) == ("def", "$PARBENCH_COMMIT")
    monkeypatch.delenv("PARBENCH_COMMIT")
    _git_dir(copy, "ref: refs/heads/main", {"refs/heads/main": COMMIT})
    assert gpu.commit.source_commit(copy) == (COMMIT, ".git's files, without git")
    assert gpu.commit.asv_commit(copy, COMMIT) is None  # asv reads commits through git
    every = gpu.chunks.chunks("cuda:0", None, None)
    asv_run = every[8].steps[1]
    assert "--set-commit-hash" not in asv_run.argv and "saves no results" in asv_run.note
    suites = every[2].steps[0]
    assert not any("test_asv" in arg for arg in suites.argv)
    assert "asv's test left out" in suites.note and every[2].requires == ("pytest_benchmark",)
    with_git = gpu.chunks.chunks("cuda:0", None, COMMIT)
    assert with_git[8].steps[1].argv[-2:] == ("--set-commit-hash", COMMIT)


def test_main_runs_on_a_copy_without_git(tmp_path):
    copy = tmp_path / "copy"
    (copy / "benchmarks" / "gpu").mkdir(parents=True)
    for module in SCRIPT.parent.glob("*.py"):
        (copy / "benchmarks" / "gpu" / module.name).write_text(module.read_text())
    done = subprocess.run(
        [sys.executable, str(copy / "benchmarks" / "gpu" / "reference.py"), "--dry-run",
         "--chunks", "9"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "commit: none (no git, no .git" in done.stdout
    assert "asv run --python=same --quick  [asv reads a commit only through git" in done.stdout


def test_a_chunk_whose_module_cannot_start_is_skipped_with_one_line(gpu, tmp_path, capsys,
                                                                    monkeypatch):
    # asv's wheel installed with --no-deps: its import fails on what it needs.
    (tmp_path / "asv").mkdir()
    (tmp_path / "asv" / "__init__.py").write_text("import json5_not_installed\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    asv_chunk = gpu.chunks.chunks("cuda:0", None, COMMIT)[8]
    predicted = gpu.chunks.chunks("cuda:0", None, COMMIT)[9]
    skipped = gpu.host.check([asv_chunk, predicted], set())
    assert list(skipped) == [9]  # chunk 10 still runs
    message = skipped[9]
    assert len(message.splitlines()) == 1
    assert message.startswith("asv cannot start here: `python -c 'import asv'` failed: "
                              "ModuleNotFoundError: No module named 'json5_not_installed'")
    assert "--fetch-wheels DIR" in message and "--python-version 3.12" in message
    assert capsys.readouterr().out == f"note: chunks 9 skipped: {message}\n"


def test_a_step_leaves_nothing_running_in_its_session(gpu, tmp_path):
    """asv runs its benchmark in a process group of its own: the step's killpg misses it,
    and it would train on the GPU while the next chunk measures. Its session is ended."""
    script = ("import os, subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
              " process_group=0)\n"  # as asv's setpgid
              "time.sleep(0.5)\n")
    step = gpu.chunks.Step("leaves", (sys.executable, "-c", script), 1)
    entry = gpu.reference.run_step(step, list(step.argv), tmp_path, 30)
    assert entry["status"] == "ok" and len(entry["killed_left_over"]) == 1
    time.sleep(0.2)
    assert not Path(f"/proc/{entry['killed_left_over'][0]}").exists() or "Z" in Path(
        f"/proc/{entry['killed_left_over'][0]}/stat").read_text().split(")")[1].split()[0]


def test_pip_check_names_every_missing_dependency_of_what_was_brought(gpu, monkeypatch):
    report = ("asv 0.6.6 requires build, which is not installed.\n"
              "asv 0.6.6 requires json5, which is not installed.\n"
              "virtualenv 21.0 requires distlib, which is not installed.\n"
              "unrelated 1.0 requires other, which is not installed.\n")
    monkeypatch.setattr(gpu.host.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 1, stdout=report, stderr=""))
    assert gpu.host.cannot_start("asv", {"virtualenv"}) == (
        "build, distlib, json5 not installed (pip check)")


def test_fetch_wheels_downloads_for_the_host_and_builds_gputil(gpu, tmp_path,
                                                              monkeypatch):
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(gpu.host.subprocess, "run", run)
    gpu.host.fetch_wheels(tmp_path / "wheels")
    download, wheel = (" ".join(command[3:]) for command in commands)
    assert download.startswith("download asv scipy setuptools tqdm --only-binary=:all: "
                               "--python-version 3.12 --implementation cp --abi cp312")
    assert "--platform manylinux_2_28_x86_64" in download
    assert download.endswith(f"-d {tmp_path / 'wheels'}")
    assert wheel == f"wheel GPUtil==1.4.0 --no-deps -w {tmp_path / 'wheels'}"


def test_wheels_of_what_the_host_has_are_left_alone(gpu, tmp_path):
    for name in ("numpy-1.0-py3-none-any.whl", "Nothing_Installed.Here-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    install, kept = gpu.host.split_wheels(tmp_path)
    assert [path.name for path in install] == ["Nothing_Installed.Here-1.0-py3-none-any.whl"]
    assert [name.split()[0] for name in kept] == ["numpy"]
