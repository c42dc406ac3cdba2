"""The commit a copy of the repository was made from, with git, without it (.git's files read
by hand), or as given, for the run's record and for asv, which reads one only through git; and
whether git says a CUDA code path changed since the correctness part last passed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path


def _is_commit(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", text) is not None


def _git_dir(dotgit: Path) -> Path | None:
    """The repository folder: .git itself, or where a worktree's .git file points."""
    if dotgit.is_dir():
        return dotgit
    if dotgit.is_file():
        text = dotgit.read_text().strip()
        if text.startswith("gitdir:"):
            return dotgit.parent / text.removeprefix("gitdir:").strip()
    return None


def read_head(dotgit: Path) -> str | None:
    """HEAD's commit read from .git's files, without git: HEAD, then its ref's file or
    packed-refs (in a worktree's common folder too)."""
    try:
        gitdir = _git_dir(dotgit)
        if gitdir is None:
            return None
        head = (gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if _is_commit(head) else None
        ref = head.removeprefix("ref:").strip()
        common = gitdir / ((gitdir / "commondir").read_text().strip()
                           if (gitdir / "commondir").is_file() else ".")
        for folder in (gitdir, common):
            if (folder / ref).is_file():
                commit = (folder / ref).read_text().strip()
                return commit if _is_commit(commit) else None
        packed = common / "packed-refs"
        for line in packed.read_text().splitlines() if packed.is_file() else []:
            commit, _, name = line.partition(" ")
            if name == ref and _is_commit(commit):
                return commit
    except OSError:
        return None
    return None


def _git_head(root: Path) -> str | None:
    if shutil.which("git") is None or not (root / ".git").exists():
        return None  # no git; or, without .git, git would answer for a folder above
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and _is_commit(commit) else None


def source_commit(root: Path, given: str | None = None) -> tuple[str | None, str]:
    """The commit of the source run, and where it was read: --commit, $PARBENCH_COMMIT, git,
    or .git's files read by hand; (None, why) where none of them says."""
    if given:
        return given, "--commit"
    if os.environ.get("PARBENCH_COMMIT"):
        return os.environ["PARBENCH_COMMIT"], "$PARBENCH_COMMIT"
    commit = _git_head(root)
    if commit:
        return commit, "git"
    commit = read_head(root / ".git")
    if commit:
        return commit, ".git's files, without git"
    return None, "no git, no .git, no --commit and no $PARBENCH_COMMIT"


def asv_commit(root: Path, commit: str | None) -> str | None:
    """The commit asv can save results under: it reads one only through git and .git, and
    only one that .git holds (a device's copy of .git may be older than the tree it came with)."""
    if commit is None or shutil.which("git") is None or not (root / ".git").exists():
        return None
    try:
        known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root,
                               capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return commit if known else None


# Where the CUDA code paths live: a Python file under these that names CUDA is one of them.
CUDA_CODE = ("parbench", "tests/gpu")
CORRECTNESS = "correctness"  # the name of the part whose steps must all have passed


def _git(root: Path, *args: str) -> str | None:
    if shutil.which("git") is None or not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def last_passed(results: Path) -> tuple[str, Path] | None:
    """The commit and folder of the newest GPU run under `results` whose correctness part
    ran every step and passed them all (its run.json names the commit)."""
    passed = []
    for steps in results.glob(f"*gpu-reference*/**/*-{CORRECTNESS}/steps.json"):
        try:
            done = json.loads(steps.read_text())
        except (OSError, ValueError):
            continue
        if not done or any(step.get("status") != "ok" for step in done):
            continue
        for folder in steps.parents:
            run = folder / "run.json"
            if run.is_file():
                commit = json.loads(run.read_text()).get("commit")
                if commit:
                    passed.append((commit, steps.parent))
                break
    # Run folders are named by their UTC start: the greatest path is the newest run.
    return max(passed, key=lambda found: str(found[1])) if passed else None


def correctness_due(root: Path, results: Path) -> str | None:
    """Why the correctness part must run again (None: git says no CUDA code path changed
    since it last passed): no committed run passed it, git cannot tell (no git, or a .git
    that lacks that run's commit), or the files under CUDA_CODE that name CUDA and differ, as
    the tree here has them, from that run's commit."""
    passed = last_passed(results)
    if passed is None:
        return "no GPU run under results/ has passed every step of it"
    commit, folder = passed
    where = folder.relative_to(results) if folder.is_relative_to(results) else folder
    # The tree as it is here, not its HEAD: a copy may carry changes its .git has not.
    naming = _git(root, "grep", "-il", "cuda", "--", *CUDA_CODE)
    changed = _git(root, "diff", "--name-only", commit, "--", *CUDA_CODE)
    if naming is None or changed is None:
        return f"git cannot tell what changed since {commit[:10]} ({where}) here"
    cuda = set(naming.splitlines())
    files = [name for name in changed.splitlines() if name in cuda and name.endswith(".py")]
    if not files:
        return None
    shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    return (f"{len(files)} files naming CUDA changed since {commit[:10]}, when it last passed "
            f"({where}): {shown}")
