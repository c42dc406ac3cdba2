"""The GPU reference run in one command: install parbench beside the host's PyTorch, then run
the reference chunks in priority order, each in a folder of its own and inside 10 minutes.

    python benchmarks/gpu/reference.py --dry-run       # each chunk's commands and time estimate
    python benchmarks/gpu/reference.py                 # install, then every chunk
    python benchmarks/gpu/reference.py --chunks 1,2 --archive /tmp/out/gpu-run.tar.gz
    python benchmarks/gpu/reference.py --fetch-wheels DIR   # with network: the host's wheels

A chunk's steps write their output under RUN/<chunk>/ as they finish (parbench's own run
folders, a log per step and steps.json), so a chunk cut short, or a later chunk that fails,
loses nothing already measured. Estimates are 1.5 times each step's time on an H200, planning
figures where a step has not run on a GPU yet.
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
from pathlib import Path

from reference_chunks import (
    ASV_UNSAVED,
    CHUNK_LIMIT_S,
    ROOT,
    TIMM_HELP,
    Chunk,
    Step,
    chunks,
    per_test_s,
)
from reference_commit import asv_commit, source_commit
from reference_host import HOST_PYTHON, check, fetch_wheels, install, install_plan

# A 15-minute loan of device time, less the minutes a bare GPU machine takes to start.
LEASE_S = 12 * 60
# When a step will be killed (seconds since the epoch): per_test_timeout ends a test before.
DEADLINE_ENV = "PARBENCH_DEADLINE"
PER_TEST_HELP = ("benchmarks/gpu/per_test_timeout.py, loaded with -p as pytest-timeout is not on "
                 "the GPU hosts: a test past its limit fails with every thread's stack and the "
                 "chunk goes on; one stuck in C code is ended 5 s later, with the process, by "
                 "faulthandler; no test runs past 15 s before its chunk's end, so pytest still "
                 "writes junit.xml (pytest-timeout keeps the limits instead where it is installed)")
def _fill(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [arg.format(**values) if "{" in arg else arg for arg in argv]


def run_step(step: Step, argv: list[str], folder: Path, timeout_s: float) -> dict:
    """Run one step, its output into folder/<step>.log; its process group is stopped at the
    timeout, which it is told in $PARBENCH_DEADLINE. Returns what steps.json keeps of it."""
    entry = {"step": step.name, "command": shlex.join(argv), "estimate_s": step.estimate_s,
             **({"note": step.note} if step.note else {})}
    if step.needs:
        return {**entry, "status": "skipped", "reason": step.needs}
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


def run_chunk(chunk: Chunk, folder: Path, values: dict[str, str],
              limit_s: float = CHUNK_LIMIT_S) -> list[dict]:
    """Every step of `chunk` into `folder`, steps.json rewritten after each; a step that
    fails or runs out of the chunk's time ends the chunk."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {**values, "folder": str(folder)}
    deadline, done = time.monotonic() + limit_s, []
    for step in chunk.steps:
        remaining = deadline - time.monotonic()
        if remaining < 1:
            entry = {"step": step.name, "status": "not started: the chunk's time ran out"}
            done.append(entry)
            (folder / "steps.json").write_text(json.dumps(done, indent=2) + "\n")
            print(f"  {step.name}: {entry['status']}", flush=True)
            break
        entry = run_step(step, _fill(step.argv, values), folder, remaining)
        if entry["status"] == "ok" and step.finds:
            name, read = step.finds
            try:
                values[name] = read(folder)
                entry[name] = values[name]
            except (OSError, RuntimeError, ValueError, KeyError) as error:
                entry["status"] = f"found no {name}: {error}"
        done.append(entry)
        (folder / "steps.json").write_text(json.dumps(done, indent=2) + "\n")
        print(f"  {step.name}: {entry['status']}"
              + (f" in {entry['seconds']} s" if "seconds" in entry else ""), flush=True)
        if entry["status"] not in ("ok", "skipped"):
            break
    if chunk.summarise:
        summary = chunk.summarise(folder)
        (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print("  " + json.dumps(summary), flush=True)
    return done


def _skip_chunk(chunk: Chunk, folder: Path, reason: str) -> None:
    """A chunk that cannot run here, recorded as skipped in its steps.json."""
    folder.mkdir(parents=True, exist_ok=True)
    steps = [{"step": step.name, "status": "skipped", "reason": reason} for step in chunk.steps]
    (folder / "steps.json").write_text(json.dumps(steps, indent=2) + "\n")
    print(f"  skipped: {reason}", flush=True)


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


def _dry_run(selected: list[Chunk], wheels: Path | None, commit: tuple[str | None, str],
             asv: str | None, limit_s: float = CHUNK_LIMIT_S) -> None:
    install_plan(selected, wheels)
    limited = [str(chunk.number) for chunk in selected if per_test_s(chunk)]
    if limited:
        print(f"per-test limit (chunks {','.join(limited)}): {PER_TEST_HELP}")
    print(f"commit: {commit[0] or 'none'} ({commit[1]}); "
          + ("asv saves its results under it" if asv else ASV_UNSAVED))
    total, fitting = 0, []
    for chunk in selected:
        total += chunk.estimate_s
        if total <= LEASE_S:
            fitting.append(str(chunk.number))
        print(f"chunk {chunk.number} {chunk.name}: {chunk.purpose}")
        per_test = per_test_s(chunk)
        print(f"  estimated {chunk.estimate_s} s (limit {limit_s:.0f} s"
              + (f", each test at most {per_test} s" if per_test else "")
              + f"), {total} s from the start")
        values = {"folder": f"RUN/{chunk.folder_name}", "max_batch": "<max-batch's answer>"}
        for step in chunk.steps:
            env = [f"{key}={shlex.quote(value)} " for key, value in step.env.items()]
            note = (f"  [skipped: {step.needs}]" if step.needs
                    else f"  [{step.note}]" if step.note else "")
            print(f"    ~{step.estimate_s:>3} s  {''.join(env)}"
                  f"{shlex.join(_fill(step.argv, values))}{note}")
    print(f"total estimated {total} s ({total / 60:.1f} min) for {len(selected)} chunks; "
          f"within {LEASE_S // 60} minutes: chunks {','.join(fitting) or 'none'}. Estimates "
          "are 1.5 times what each step took on an H200, planning figures for the steps that have "
          "not run on a GPU yet (chunks 3 and 9, timm's loop)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", help="chunk numbers to run, comma separated (default all)")
    parser.add_argument("--device", default="cuda:0", help="the GPU (default cuda:0)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the install, each chunk's commands and estimated time; run "
                        "nothing")
    parser.add_argument("--results-dir", default=str(ROOT / "results"))
    parser.add_argument("--timm-benchmark", help=TIMM_HELP)
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install first "
                        "(asv with its dependencies, scipy, GPUtil, ...), without their "
                        "dependencies or an index; those of what the host has are left alone")
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR",
                        help="on a machine with network: download every wheel the host needs "
                        f"(Python {HOST_PYTHON}) into DIR, build GPUtil's, and stop")
    parser.add_argument("--commit", help="the source's commit, where neither git nor .git can "
                        "tell it (also $PARBENCH_COMMIT)")
    parser.add_argument("--no-install", action="store_true", help="parbench is installed")
    parser.add_argument("--archive", type=Path,
                        help="after each chunk, write the whole run folder to this .tar.gz")
    parser.add_argument("--chunk-limit-s", type=float, default=CHUNK_LIMIT_S,
                        help=f"seconds each chunk may run (default {CHUNK_LIMIT_S}); less where "
                        "the install and the archive must fit the same 10-minute command too")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.fetch_wheels:
        fetch_wheels(args.fetch_wheels)
        return 0
    commit = source_commit(ROOT, args.commit)
    asv = asv_commit(ROOT, commit[0])
    every = chunks(args.device, args.timm_benchmark, asv)
    try:
        wanted = {int(n) for n in args.chunks.split(",")} if args.chunks else None
    except ValueError:
        parser.error(f"--chunks takes chunk numbers like 1,2, got {args.chunks!r}")
    selected = [c for c in every if wanted is None or c.number in wanted]
    if wanted and len(selected) < len(wanted):
        parser.error(f"--chunks: there are chunks 1 to {len(every)}, got {args.chunks}")
    if args.chunk_limit_s <= 0:
        parser.error("--chunk-limit-s takes a number of seconds above 0, got "
                     f"{args.chunk_limit_s:g}")
    if args.dry_run:
        _dry_run(selected, args.wheels, commit, asv, args.chunk_limit_s)
        return 0
    brought = set() if args.no_install else install(args.wheels)
    skipped = check(selected, brought)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(args.results_dir) / f"{stamp}-gpu-reference-{_device_slug()}"
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps({"commit": commit[0], "commit_from": commit[1],
                                               "asv_commit": asv}, indent=2) + "\n")
    print(f"commit: {commit[0] or 'none'} ({commit[1]})", flush=True)
    if commit[0]:  # what parbench's records say where git cannot tell them
        os.environ["PARBENCH_COMMIT"] = commit[0]
    failed = 0
    for chunk in selected:
        print(f"chunk {chunk.number} {chunk.name} -> {root / chunk.folder_name}", flush=True)
        if chunk.number in skipped:
            _skip_chunk(chunk, root / chunk.folder_name, skipped[chunk.number])
            continue
        steps = run_chunk(chunk, root / chunk.folder_name, {}, args.chunk_limit_s)
        failed += any(s["status"] not in ("ok", "skipped") for s in steps)
        if args.archive:
            _archive(root, args.archive)
    print(f"results: {root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
