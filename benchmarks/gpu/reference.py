"""The GPU reference run in one command of at most 9 minutes: install parbench beside the
host's PyTorch, then the parts no GPU run has measured yet, each in a folder of its own: (a) the
attribution after the harness fix, (b) torch.compile's scopes and CUDA graphs against eager and
timm's own loop, (c) one-rank ddp and fsdp in bf16 at torch's defaults and tuned, (d)
per-operation profiles, (e) asv; then correctness, where git says a CUDA code path changed since
it last passed, with the time left. The same plan runs on a CPU, shrunk, as a rehearsal.

    python benchmarks/gpu/reference.py --dry-run       # each step, its estimate and its basis
    python benchmarks/gpu/reference.py --archive $OUT/gpu-run.tar.gz   # the default run
    python benchmarks/gpu/reference.py --parts f       # a later run's part
    python benchmarks/gpu/reference.py --rehearse      # every part's commands on this CPU
    python benchmarks/gpu/reference.py --fetch-wheels  # with network: the host's wheels

Each step writes its output under RUN/<part>/ as it finishes (parbench's run folders, a log
per step, steps.json, summary.json), and the archive is rewritten after each part, so nothing
measured is lost when a later step fails or the command is killed. Each step has its own time
limit: the run's start plus every estimate up to its own (time an earlier step left unused is
its too), never past --limit-s; a part whose estimate no longer fits the time left is skipped,
saying so; a step that fails ends no other, but one whose `after` step failed is skipped.
Estimates: reference_estimates.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

from reference_commit import asv_commit, correctness_due, source_commit
from reference_estimates import ARCHIVE_S, INSTALL_S, MARGIN, planning
from reference_host import HOST_PYTHON, check, fetch_wheels, install, install_plan
from reference_plan import in_default_run, parts
from reference_steps import (
    CARRIED,
    GPU,
    REHEARSAL,
    ROOT,
    TIMM_BENCHMARK,
    Part,
    Step,
    per_test_s,
)

LIMIT_S = 540  # of 15 minutes on a GPU: the machine's start, and a rerun's room after a fix
INSTALL = planning(INSTALL_S, "pip install of parbench and the carried wheels, its checks")
ARCHIVE = planning(ARCHIVE_S, "the run folder written to --archive after each part")
# When a step will be killed (seconds since the epoch): per_test_timeout ends a test before.
DEADLINE_ENV = "PARBENCH_DEADLINE"
PER_TEST_HELP = ("benchmarks/gpu/per_test_timeout.py, loaded with -p: where pytest-timeout is "
                 "installed (it was, 2.5.0, on every GPU host so far) it keeps the same limits; "
                 "where it is not, a test past its limit fails with every thread's stack and the "
                 "step goes on, one stuck in C code is ended 5 s later, with the process, by "
                 "faulthandler; no test runs past 15 s before its step's end, so pytest still "
                 "writes junit.xml")
REHEARSAL_LIMIT_S = 3600  # a CPU compiles and trains slower: each step has the whole limit


def _fill(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [arg.format(**values) if "{" in arg else arg for arg in argv]


def run_step(step: Step, argv: list[str], folder: Path, timeout_s: float) -> dict:
    """Run one step, its output into folder/<step>.log; its process group is stopped at the
    timeout, which it is told in $PARBENCH_DEADLINE. Returns what steps.json keeps of it."""
    entry = {"step": step.name, "command": shlex.join(argv), "estimate_s": step.estimate_s,
             **({"note": step.note} if step.note else {})}
    start = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           DEADLINE_ENV: f"{time.time() + timeout_s:.0f}", **step.env}
    with open(folder / f"{step.name}.log", "w") as log:
        try:
            process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True)
        except OSError as error:
            return {**entry, "status": f"cannot start: {error}"}
        try:
            code = process.wait(timeout=timeout_s)
            status = "ok" if code == 0 else f"exit {code}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = f"timeout after {timeout_s:.0f} s"
    left = end_session(process.pid)
    if left:  # e.g. asv's benchmark process, in a process group of its own
        entry["killed_left_over"] = left
    return {**entry, "status": status, "seconds": round(time.monotonic() - start, 1)}


def _session(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session


def end_session(session: int) -> list[int]:
    """Kill what a step left running in its session (the step started one: its pid), so
    that no process of it trains on the GPU while the next step measures; returns their pids.
    Process groups of their own (asv's benchmark process) are in the session too."""
    left = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _session(pid) == session]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def schedule(selected: list[Part], install_s: int = 0, archive_s: int = 0,
             limit_s: float = LIMIT_S) -> dict[str, float]:
    """Each step's deadline in seconds from the run's start ('letter/step'): the install, every
    estimate up to its own and the archives before it; never past `limit_s` less the last
    archive."""
    deadlines, total = {}, float(install_s)
    for part in selected:
        for step in part.steps:
            total += step.estimate_s
            deadlines[f"{part.letter}/{step.name}"] = min(total, limit_s - archive_s)
        total += archive_s
    return deadlines


def _why_not(step: Step, done: list[dict], skipped: dict[str, str]) -> str | None:
    if step.needs:
        return step.needs
    if step.name in skipped:
        return skipped[step.name]
    before = next((e for e in done if e["step"] == step.after), None)
    if step.after and (before is None or before["status"] != "ok"):
        return f"it needs {step.after}, which ended: {before['status'] if before else 'not run'}"
    return None


def run_part(part: Part, folder: Path, deadlines: dict[str, float],
             skipped: dict[str, str] | None = None, ends_at: float | None = None) -> list[dict]:
    """Every step of `part` into `folder` until its deadline (time.monotonic()), steps.json
    rewritten after each; a failed step ends none but those `after` it. A part whose steps
    that can run no longer fit their estimates before `ends_at` is skipped whole, saying so:
    half a part measures nothing it is for."""
    folder.mkdir(parents=True, exist_ok=True)
    left = None if ends_at is None else ends_at - time.monotonic()
    runs = sum(step.estimate_s for step in part.steps
               if not step.needs and step.name not in (skipped or {}))
    too_long = (f"needs ~{runs} s, {max(left, 0):.0f} s were left of the run's limit"
                if left is not None and left < runs else None)
    done: list[dict] = []
    for step in part.steps:
        reason, remaining = too_long or _why_not(step, done, skipped or {}), 0.0
        if reason:
            entry = {"step": step.name, "status": "skipped", "reason": reason}
        elif (remaining := deadlines[f"{part.letter}/{step.name}"] - time.monotonic()) < 1:
            entry = {"step": step.name, "status": "not started: its time had run out"}
        else:
            values = {"folder": str(folder), "step": step.name}
            entry = run_step(step, _fill(step.argv, values), folder, remaining)
        done.append(entry)
        (folder / "steps.json").write_text(json.dumps(done, indent=2) + "\n")
        print(f"  {step.name}: {entry['status']}"
              + (f" in {entry['seconds']} s" if "seconds" in entry else ""), flush=True)
    if part.summarise and not too_long:
        try:
            summary = part.summarise(folder)
        except Exception as error:  # a summary never ends the run: its part's files stand
            summary = {"error": f"{type(error).__name__}: {error}"}
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print("  " + json.dumps(summary), flush=True)
    return done


def _device_slug() -> str:
    try:
        import torch

        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-gpu"
    except ImportError:
        name = "no-torch"
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")


def _archive(root: Path, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(root, arcname=root.name)


def _line(estimate_s: int, total: int, what: str) -> str:
    return f"  ~{estimate_s:>3} s  {total:>3} s  {what}"


def _print_steps(part: Part, total: int) -> int:
    """A part's header and each step's command, estimate and basis; returns the new total."""
    print(f"({part.letter}) {part.name}: {part.purpose}")
    values = {"folder": f"RUN/{part.folder_name}"}
    for step in part.steps:
        total += step.estimate_s
        env = "".join(f"{key}={shlex.quote(value)} " for key, value in step.env.items())
        note = (f"  [skipped: {step.needs}]" if step.needs
                else f"  [{step.note}]" if step.note else "")
        limit = f"; each test at most {per_test_s(step)} s" if per_test_s(step) else ""
        print(_line(step.estimate_s, total, f"{step.name}: {env}"
                    f"{shlex.join(_fill(step.argv, {**values, 'step': step.name}))}{note}"))
        print(f"              from: {step.estimate.raw_s:.1f} s = {step.estimate.basis}{limit}")
    return total


def dry_run(selected: list[Part], later: list[Part], install_s: int, archive_s: int,
            limit_s: float = LIMIT_S) -> int:
    """Print every step, its estimate and basis and the running total; returns the total of
    the planned parts (a due part after them runs with the time they leave)."""
    total = install_s
    print(f"estimate = {MARGIN} x the arithmetic after 'from:'; then the running total")
    if install_s:
        print(_line(install_s, total, "install (left out with --no-install)"))
    planned = [part for part in selected if part.due is None]
    for part in planned:
        total = _print_steps(part, total)
        if archive_s:
            total += archive_s
            print(_line(archive_s, total, "archive"))
    print(f"total estimated {total} s ({total / 60:.1f} min) of the {limit_s:.0f} s limit for "
          f"parts {','.join(p.letter for p in planned)}"
          + ("" if total <= limit_s else ": OVER, the last steps will be cut short"))
    for part in selected:
        if part.due is not None:
            print(f"then, with the time left ({limit_s - total:.0f} s; it needs "
                  f"~{part.estimate_s} s, else it is skipped, saying so): due because "
                  f"{part.due}")
            _print_steps(part, total)
    for part in later:
        print(f"later runs: --parts {part.letter} ({part.name}, ~{part.estimate_s} s): "
              f"{part.purpose}")
    return total


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", help="part letters to run, comma separated (default: "
                        "a,b,c,d,e, and g where git says it is due)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the install, every step and its estimate; run nothing")
    parser.add_argument("--rehearse", action="store_true", help=(
        "run the parts' own commands on this machine's CPU at a small scale (a ResNet-18 at "
        "32 px, 2 rounds of 2 steps): the same strategies, flags, parsing and refusals, so a "
        "refusal, a crash or a missing file is found before a GPU is spent on it"))
    parser.add_argument("--results-dir", default=str(ROOT / "results"))
    parser.add_argument("--timm-benchmark", type=Path, default=TIMM_BENCHMARK,
                        help=f"timm's benchmark.py (default {TIMM_BENCHMARK.relative_to(ROOT)})")
    parser.add_argument("--wheels", type=Path, default=CARRIED / "wheels",
                        help="wheels to install first, without their dependencies or an "
                        "index, those of what the host has left alone (default "
                        f"{(CARRIED / 'wheels').relative_to(ROOT)}, where it exists)")
    parser.add_argument("--fetch-wheels", type=Path, nargs="?", const=CARRIED / "wheels",
                        metavar="DIR", help="on a machine with network: download the wheels "
                        f"the host lacks (Python {HOST_PYTHON}) into DIR, build GPUtil's, stop")
    parser.add_argument("--commit", help="the source's commit, where neither git nor .git can "
                        "tell it (also $PARBENCH_COMMIT)")
    parser.add_argument("--no-install", action="store_true", help="parbench is installed")
    parser.add_argument("--archive", type=Path,
                        help="after each part, write the whole run folder to this .tar.gz")
    parser.add_argument("--limit-s", type=float, help=f"seconds the run may take in all "
                        f"(default {LIMIT_S}; {REHEARSAL_LIMIT_S} with --rehearse)")
    return parser


def _selected(parser: argparse.ArgumentParser, every: list[Part],
              letters: str | None) -> list[Part]:
    wanted = [x.strip() for x in letters.split(",")] if letters else None
    known = [p.letter for p in every]
    if wanted and any(letter not in known for letter in wanted):
        parser.error(f"--parts: there are parts {','.join(known)}, got {letters}")
    return [p for p in every if (in_default_run(p) if wanted is None else p.letter in wanted)]


def _run(args: argparse.Namespace, selected: list[Part], wheels: Path | None,
         commit: tuple[str | None, str], asv: str | None) -> int:
    """Install, then every selected part into a new run folder; 1 if any step failed."""
    start = time.monotonic()
    install_s = 0 if args.no_install else INSTALL.seconds
    archive_s = ARCHIVE.seconds if args.archive else 0
    brought = set() if args.no_install else install(wheels)
    skipped = check(selected, brought)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    kind = "gpu-rehearsal-cpu" if args.rehearse else f"gpu-reference-{_device_slug()}"
    root = Path(args.results_dir) / f"{stamp}-{kind}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps({"commit": commit[0], "commit_from": commit[1],
                                               "asv_commit": asv,
                                               "rehearsal": args.rehearse}, indent=2) + "\n")
    print(f"commit: {commit[0] or 'none'} ({commit[1]})", flush=True)
    if commit[0]:  # what parbench's records say where git cannot tell them
        os.environ["PARBENCH_COMMIT"] = commit[0]
    if args.rehearse:  # every step may take the whole limit, and no part is skipped for time
        deadlines = {f"{part.letter}/{step.name}": start + args.limit_s
                     for part in selected for step in part.steps}
        ends_at = None
    else:
        deadlines = {key: start + seconds for key, seconds in
                     schedule(selected, install_s, archive_s, args.limit_s).items()}
        ends_at = start + args.limit_s - archive_s
    failed = 0
    for part in selected:
        print(f"({part.letter}) {part.name} -> {root / part.folder_name}", flush=True)
        steps = run_part(part, root / part.folder_name, deadlines, skipped, ends_at)
        failed += any(s["status"] not in ("ok", "skipped") for s in steps)
        if args.archive:
            _archive(root, args.archive)
    print(f"results: {root}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.fetch_wheels:
        fetch_wheels(args.fetch_wheels)
        return 0
    if args.limit_s is None:
        args.limit_s = REHEARSAL_LIMIT_S if args.rehearse else LIMIT_S
    if args.limit_s <= 0:
        parser.error(f"--limit-s takes a number of seconds above 0, got {args.limit_s:g}")
    commit = source_commit(ROOT, args.commit)
    asv = asv_commit(ROOT, commit[0])
    due = correctness_due(ROOT, ROOT / "results")
    every = parts(REHEARSAL if args.rehearse else GPU, args.timm_benchmark, asv, due)
    selected = _selected(parser, every, args.parts)
    if args.parts:  # asked for: planned, not left to the time the default run leaves
        selected = [replace(part, due=None) for part in selected]
    wheels = args.wheels if args.wheels.is_dir() or args.wheels != CARRIED / "wheels" else None
    if args.dry_run:
        install_plan(selected, wheels)
        if any(per_test_s(step) for part in selected for step in part.steps):
            print(f"per-test limit: {PER_TEST_HELP}")
        print(f"commit: {commit[0] or 'none'} ({commit[1]}); "
              + ("asv saves its results under it" if asv else "asv cannot save its results"))
        print("correctness: " + (f"due, {due}" if due else "not due: git says no CUDA code "
                                 "path changed since it last passed"))
        install_s = 0 if args.no_install else INSTALL.seconds
        dry_run(selected, [p for p in every if p not in selected], install_s, ARCHIVE.seconds,
                args.limit_s)
        return 0
    return _run(args, selected, wheels, commit, asv)


if __name__ == "__main__":
    sys.exit(main())
