"""The GPU reference run's tools on CPU: the per-test limit that ends a hung test, reading
the commit without git, and the install's checks and the wheels it brings."""

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.support import GPU_REFERENCE, gpu_reference_modules

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = GPU_REFERENCE
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


@pytest.fixture(scope="module")
def gpu():
    with gpu_reference_modules() as modules:
        yield modules


@pytest.fixture(scope="module")
def per_test_timeout():
    spec = importlib.util.spec_from_file_location("per_test_timeout", SCRIPT.parent /
                                                  "per_test_timeout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _part(gpu, letter, *steps):
    return gpu.steps.Part(letter, "test", "the runner", steps)


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


def test_a_hung_test_fails_at_its_limit_and_the_step_goes_on(gpu, tmp_path, child_pids):
    # Without pytest-timeout (plugins not loaded), per_test_timeout keeps the limit.
    argv = gpu.steps.pytest(f"{_hangs(tmp_path)}::test_hangs", f"{_hangs(tmp_path)}::test_after",
                            per_test_s=2)
    step = gpu.steps.Step("tests", argv, gpu.estimates.Estimate(1, ""),
                          env={"PYTHONPATH": gpu.steps.pythonpath(),
                               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    folder = tmp_path / "z-tests"
    [entry] = gpu.reference.run_part(_part(gpu, "z", step), folder,
                                     {"z/tests": time.monotonic() + 60})
    assert entry["status"] == "exit 1" and entry["seconds"] < 20
    log = (folder / "tests.log").read_text()
    assert "per-test limit: per_test_timeout, at most 2 s" in log
    # -v: each test named as it starts and ends (the stack dump may come between the two)
    assert re.search(r"test_hangs\.py::test_hangs .*?FAILED", log, re.S)
    assert re.search(r"test_hangs\.py::test_after PASSED", log)
    assert "test_hangs.py::test_hangs ran past its 2 s limit" in log
    assert re.search(r'File ".*test_hangs\.py", line \d+ in test_hangs', log)  # its stack
    cases = ElementTree.parse(folder / "tests-junit.xml").getroot().iter("testcase")
    failed = {case.get("name"): case.find("failure") is not None for case in cases}
    assert failed == {"test_hangs": True, "test_after": False}
    assert child_pids() == []


def test_where_pytest_timeout_is_installed_it_keeps_the_same_limit(tmp_path):
    # The H100 host of 2026-11-27 had pytest-timeout: pyproject's 300 s, not --per-test-limit,
    # held a test until the step was killed, and no junit file was written.
    hangs = _hangs(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 300\n")
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"{hangs}::test_hangs", f"{hangs}::test_after", "-v",
         "-p", "pytest_timeout", "-p", "per_test_timeout", "--per-test-limit", "2",
         "-p", "no:cacheprovider", "--junitxml", str(tmp_path / "junit.xml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SCRIPT.parent),
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert time.monotonic() - start < 20
    assert done.returncode == 1
    assert "per-test limit: pytest-timeout, per_test_timeout's limits, at most 2 s" in done.stdout
    assert "Timeout (>2.0s) from pytest-timeout" in done.stdout + done.stderr
    assert "per_test_timeout:" not in done.stderr  # the cap, not a deadline, set the limit
    cases = ElementTree.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    failed = {case.get("name"): case.find("failure") is not None for case in cases}
    assert failed == {"test_hangs": True, "test_after": False}


def test_a_limit_cut_by_the_steps_end_is_said_in_the_log(tmp_path):
    hangs = _hangs(tmp_path)
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"{hangs}::test_after", "-p", "per_test_timeout",
         "--per-test-limit", "60", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(SCRIPT.parent), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
             "PARBENCH_DEADLINE": repr(start + 30)})
    took = time.time() - start
    assert done.returncode == 0
    said = re.search(r"per_test_timeout: .*test_after has (\d+) s, the time left before its "
                     r"step ends less 15 s", done.stderr)
    assert said, done.stderr
    # The deadline less END_MARGIN_S, less however long the child took to reach its test
    # (somewhere within `took`; at least 1 s), rounded to whole seconds.
    assert max(1.0, 15 - took) - 0.5 <= int(said[1]) <= 15


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
    steps = {step.name: step for part in gpu.plan.parts(gpu.steps.GPU, None, None)
             for step in part.steps}
    asv_run, suites = steps["asv-run"], steps["gpu-tests-suites"]
    assert "--set-commit-hash" not in asv_run.argv and "saves no results" in asv_run.note
    assert not any("test_asv" in arg for arg in suites.argv)
    assert "asv's test left out" in suites.note and suites.requires == ("pytest_benchmark",)
    with_git = {step.name: step for part in gpu.plan.parts(gpu.steps.GPU, None, COMMIT)
                for step in part.steps}
    assert with_git["asv-run"].argv[-2:] == ("--set-commit-hash", COMMIT)


def test_asv_is_handed_only_a_commit_its_git_holds(gpu):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert gpu.commit.asv_commit(ROOT, head) == head
    assert gpu.commit.asv_commit(ROOT, "f" * 40) is None  # a stale .git on the device


def test_a_step_whose_module_cannot_start_is_skipped_with_one_line(gpu, tmp_path, capsys,
                                                                   monkeypatch):
    # asv's wheel installed with --no-deps: its import fails on what it needs.
    (tmp_path / "asv").mkdir()
    (tmp_path / "asv" / "__init__.py").write_text("import json5_not_installed\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    every = gpu.plan.parts(gpu.steps.GPU, None, COMMIT)
    skipped = gpu.host.check([every[0], every[4]], set())
    assert list(skipped) == ["asv-machine", "asv-run"]  # (a) still runs
    message = skipped["asv-run"]
    assert len(message.splitlines()) == 1
    assert message.startswith("asv cannot start here: `python -c 'import asv'` failed: "
                              "ModuleNotFoundError: No module named 'json5_not_installed'")
    assert "--fetch-wheels DIR" in message and "--python-version 3.12" in message
    assert capsys.readouterr().out == f"note: asv-machine, asv-run skipped: {message}\n"


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
    folder = tmp_path / ".carried" / "wheels"
    gpu.host.fetch_wheels(folder)
    download, wheel = (" ".join(command[3:]) for command in commands)
    assert download.startswith("download asv setuptools --only-binary=:all: "
                               "--python-version 3.12 --implementation cp --abi cp312")
    assert "--platform manylinux_2_28_x86_64" in download
    assert download.endswith(f"-d {folder}")
    assert wheel == f"wheel GPUtil==1.4.0 --no-deps -w {folder}"
    assert (folder.parent / ".gitignore").read_text() == "*\n"  # git ignores what is carried


def test_wheels_of_what_the_host_has_are_left_alone(gpu, tmp_path):
    for name in ("numpy-1.0-py3-none-any.whl", "Nothing_Installed.Here-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    install, kept = gpu.host.split_wheels(tmp_path)
    assert [path.name for path in install] == ["Nothing_Installed.Here-1.0-py3-none-any.whl"]
    assert [name.split()[0] for name in kept] == ["numpy"]


def test_an_install_that_fails_is_a_note_and_only_a_changed_torch_stops_the_run(
        gpu, tmp_path, monkeypatch, capsys):
    (tmp_path / "asv-0.6.6-py3-none-any.whl").write_bytes(b"")
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(gpu.host.sysconfig, "get_paths", lambda: {"purelib": str(site)})
    monkeypatch.setattr(gpu.host, "ROOT", tmp_path / "tree")  # its link made there, not here
    torch_versions = iter(["2.11.0+cu130", "2.11.0+cu130", "2.11.0+cu130", "2.12.0"])
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        if command[1:3] == ["-m", "pip"]:
            return subprocess.CompletedProcess(command, 1)
        if "import torch" in command[-1]:
            return subprocess.CompletedProcess(command, 0, stdout=next(torch_versions))
        return subprocess.CompletedProcess(command, 0, stdout="", stderr="")

    monkeypatch.setattr(gpu.host.subprocess, "run", run)
    monkeypatch.setattr(gpu.host, "_installed_version", lambda name: None)
    assert gpu.host.install(tmp_path) == {"asv"}
    [wheels] = [command[7:] for command in commands if "install" in command]
    assert wheels == [str(tmp_path / "asv-0.6.6-py3-none-any.whl")]  # pip builds nothing
    assert (site / "parbench-source.pth").read_text() == (
        f"{tmp_path / 'tree' / 'benchmarks' / 'gpu' / '.carried' / 'site'}\n")  # nor parbench
    out = capsys.readouterr().out
    assert "note: pip install of 1 wheels failed" in out
    assert f"parbench from its source tree: {site / 'parbench-source.pth'} names" in out
    with pytest.raises(SystemExit, match="changed torch from 2.11.0"):
        gpu.host.install(None)


def test_a_path_file_makes_parbench_and_nothing_else_importable_from_its_tree(gpu, tmp_path,
                                                                             monkeypatch):
    """What the install writes, read by a fresh interpreter's site machinery outside the tree:
    parbench from the source tree, its strategies included, and no top-level strategies."""
    site = tmp_path / "site-packages"
    site.mkdir()
    tree = tmp_path / "tree"
    (tree / "benchmarks" / "gpu").mkdir(parents=True)
    (tree / "parbench").symlink_to(ROOT / "parbench", target_is_directory=True)
    monkeypatch.setattr(gpu.host.sysconfig, "get_paths", lambda: {"purelib": str(site)})
    written = gpu.host.install_source(tree)
    code = ("import importlib.util, site, sys; site.addsitedir(sys.argv[1]); "
            "print(importlib.util.find_spec('parbench.strategies').origin, "
            "importlib.util.find_spec('strategies'))")  # torch is never imported
    done = subprocess.run([sys.executable, "-I", "-c", code, str(site)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    origin, top_level = done.stdout.split()
    assert Path(origin).resolve() == (ROOT / "parbench" / "strategies" / "__init__.py").resolve()
    assert top_level == "None" and written == site / "parbench-source.pth"
    assert gpu.host.install_source(tree) == written  # a second install keeps the one link


def _commit_all(repo, message):
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                    message], cwd=repo, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_correctness_is_due_where_a_file_naming_cuda_changed_since_it_last_passed(gpu,
                                                                                 tmp_path):
    repo = tmp_path / "repo"
    (repo / "parbench").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "parbench" / "gpu.py").write_text("device = 'cuda'\n")
    (repo / "parbench" / "plain.py").write_text("x = 1\n")
    passed_at = _commit_all(repo, "first")
    results = repo / "results"
    assert "no GPU run under results/ has passed" in gpu.commit.correctness_due(repo, results)
    run = results / "20261128T000000Z-gpu-reference-h200"
    (run / "g-correctness").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"commit": passed_at}))
    (run / "g-correctness" / "steps.json").write_text(json.dumps(
        [{"step": "gpu-tests", "status": "exit 1"}]))
    assert gpu.commit.last_passed(results) is None  # a failed step: it did not pass
    (run / "g-correctness" / "steps.json").write_text(json.dumps(
        [{"step": "gpu-tests", "status": "ok"}, {"step": "verify-2", "status": "ok"}]))
    assert gpu.commit.last_passed(results) == (passed_at, run / "g-correctness")
    (repo / "parbench" / "plain.py").write_text("x = 2\n")  # names no CUDA
    _commit_all(repo, "plain")
    assert gpu.commit.correctness_due(repo, results) is None
    (repo / "parbench" / "gpu.py").write_text("device = 'cuda:0'\n")
    _commit_all(repo, "cuda")
    due = gpu.commit.correctness_due(repo, results)
    assert due.startswith(f"1 files naming CUDA changed since {passed_at[:10]}")
    assert due.endswith(": parbench/gpu.py")
