"""The GPU reference run in one command: install parbench beside the host's PyTorch, then run
the reference chunks in priority order, each in a folder of its own and inside 10 minutes.

    python benchmarks/gpu/reference.py --dry-run       # each chunk's commands and time estimate
    python benchmarks/gpu/reference.py                 # install, then every chunk
    python benchmarks/gpu/reference.py --chunks 1,2 --archive /tmp/out/gpu-run.tar.gz

A chunk's steps write their output under RUN/<chunk>/ as they finish (parbench's own run
folders, a log per step and steps.json), so a chunk cut short, or a later chunk that fails,
loses nothing already measured. Estimates are planning figures for one H100, not measurements.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHUNK_LIMIT_S = 570  # each chunk ends well inside a 10-minute command
# A 30-minute loan of a bare GPU machine, less the minutes it takes to start.
LEASE_S = 27 * 60
SPLITS = "1,3,5,8,10,12,20,40,60"  # the tutorial's split-size sweep
TIMM_HELP = ("timm's benchmark.py is a script in timm's repository, not in its wheel: pass "
             "--timm-benchmark PATH to a copy of it at the host's timm version")


@dataclass(frozen=True)
class Step:
    """One command of a chunk. `{name}` in its arguments is filled from what earlier steps
    found (`finds`: a name and how to read it from the step's folder)."""

    name: str
    argv: tuple[str, ...]
    estimate_s: int
    env: dict = field(default_factory=dict)
    finds: tuple[str, Callable[[Path], str]] | None = None
    needs: str | None = None  # why it cannot run here, if it cannot (recorded as skipped)


@dataclass(frozen=True)
class Chunk:
    number: int
    name: str
    purpose: str
    steps: tuple[Step, ...]
    summarise: Callable[[Path], dict] | None = None  # what the chunk's records say, to print

    @property
    def folder_name(self) -> str:
        return f"{self.number}-{self.name}"

    @property
    def estimate_s(self) -> int:
        return sum(step.estimate_s for step in self.steps)


def _parbench(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "parbench", *args)


def _run(tag: str, *args: str, steps: int = 20, warmup: int = 5) -> tuple[str, ...]:
    return _parbench("run", *args, "--steps", str(steps), "--warmup", str(warmup),
                     "--results-dir", "{folder}", "--tag", tag, "--progress", "off")


def _largest_batch(folder: Path) -> str:
    """max-batch's answer: the largest batch among its trials that trained."""
    trials = [r for records in (folder / "max-batch").glob("*/records.json")
              for r in json.loads(records.read_text())]
    batches = [r["global_batch"] for r in trials if r["status"] == "ok"]
    if not batches:
        raise RuntimeError(f"max-batch found no batch that trains (trials in {folder})")
    return str(max(batches))


def _records(folder: Path) -> list[dict]:
    """The records of the parbench runs a chunk's steps wrote (max-batch's trials apart)."""
    return [r for path in sorted(folder.glob("*/records.json"))
            for r in json.loads(path.read_text())]


def _timm_ratio(chunk_folder: Path) -> dict:
    """parbench `single` against timm's own training loop on the same job (bf16 autocast,
    channels_last, batch 256, 224 px), both measured in this chunk."""
    ours = [r for r in _records(chunk_folder) if r["status"] == "ok" and r["precision"] == "bf16"
            and r["channels_last"] and r["global_batch"] == 256 and not r["compile"]]
    log = chunk_folder / "timm.log"
    found = re.findall(r'"(?:train_)?samples_per_sec":\s*([0-9.]+)',
                       log.read_text() if log.exists() else "")
    summary = {"parbench_img_s": ours[0]["throughput_ips"] if ours else None,
               "timm_img_s": float(found[-1]) if found else None}
    if summary["parbench_img_s"] and summary["timm_img_s"]:
        summary["parbench_over_timm"] = summary["parbench_img_s"] / summary["timm_img_s"]
    return summary


def _throughputs(chunk_folder: Path) -> dict:
    """Each measured configuration's img/s and MFU, by its label."""
    return {f"{r['strategy']} {r['precision']}{' channels_last' if r['channels_last'] else ''}"
            f"{' compiled' if r['compile'] else ''} batch {r['global_batch']}":
            {"img_s": r["throughput_ips"], "mfu": r.get("mfu")}
            for r in _records(chunk_folder) if r["status"] == "ok"}


def chunks(device: str, timm_benchmark: str | None) -> list[Chunk]:
    """The reference run, in priority order."""
    return (_one_gpu_chunks(device, timm_benchmark) + _emulated_chunks(f"{device},{device}")
            + [_prediction_chunk()])


def _prediction_chunk() -> Chunk:
    """Chunk 8: from this GPU's profile, the tutorial's job PREDICTED on 2, 4 and 8 such GPUs
    over NVLink: each schedule's best split, ddp and fsdp (issue 24's part 6)."""
    return Chunk(8, "predicted", "the tutorial's job (resnet50, batch 120, 128 px) PREDICTED "
                 f"on 2, 4 and 8 of this GPU over nvlink4 at splits {SPLITS}, from a "
                 "profile of this GPU", (
                     Step("predicted-sweep", _parbench(
                         "predict", "--profile-device", "cuda", "--model", "resnet50",
                         "--image-size", "128", "--batch-size", "120", "--devices", "2,4,8",
                         "--split-size", SPLITS, "--link", "nvlink4", "--profile-cache",
                         "{folder}/profiles", "--csv", "{folder}/predicted-sweep.csv",
                         "--figure", "{folder}/predicted-sweep.png"), 240),))


def _one_gpu_chunks(device: str, timm_benchmark: str | None) -> list[Chunk]:
    """Chunks 1-3: the GPU tests, then single resnet50 at 224 px beside timm's loop."""
    resnet50_224 = ("--strategy", "single", "--model", "resnet50", "--image-size", "224",
                    "--devices", device)
    timm = (sys.executable, timm_benchmark or "<timm benchmark.py>", "--bench", "train",
            "--model", "resnet50", "--img-size", "224", "-b", "256", "--amp", "--amp-dtype",
            "bfloat16", "--channels-last", "--num-warm-iter", "5", "--num-bench-iter", "20")
    return [
        Chunk(1, "gpu-tests", "every CUDA path: pytest -m gpu, with its time", (
            Step("gpu-tests", (sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q",
                               "-p", "no:cacheprovider", "--junitxml", "{folder}/junit.xml"),
                 300),)),
        Chunk(2, "resnet50-224", "single resnet50 at 224 px: bf16 + channels_last at batch "
              "256 beside timm's own loop on the same job, and the fp32 / bf16 ablation", (
                  Step("bf16-channels-last", _run("bf16-channels-last", *resnet50_224,
                                                  "--batch-size", "256", "--precision", "bf16",
                                                  "--channels-last"), 60),
                  Step("timm", timm, 60, needs=None if timm_benchmark else TIMM_HELP),
                  Step("ablation", _run("ablation", *resnet50_224, "--batch-size", "256",
                                        "--precision", "fp32,bf16"), 90)),
              summarise=lambda folder: {**_timm_ratio(folder), **_throughputs(folder)}),
        Chunk(3, "resnet50-224-large", "bf16 + channels_last at the largest batch max-batch "
              "finds (up to 2048), and compiled at 256", (
                  Step("max-batch", _parbench("max-batch", *resnet50_224, "--precision",
                                              "bf16", "--channels-last", "--start", "256",
                                              "--limit", "2048", "--results-dir",
                                              "{folder}/max-batch"),
                       150, finds=("max_batch", _largest_batch)),
                  Step("largest-batch", _run("largest-batch", *resnet50_224, "--batch-size",
                                             "{max_batch}", "--precision", "bf16",
                                             "--channels-last"), 60),
                  Step("compiled", _run("compiled", *resnet50_224, "--batch-size", "256",
                                        "--precision", "bf16", "--channels-last",
                                        "--compile"), 180)),
              summarise=_throughputs),
    ]


def _emulated_chunks(shared: str) -> list[Chunk]:
    """Chunks 4-7: one GPU emulating two (`shared`), then the benchmark suites on it."""
    return [
        Chunk(4, "tutorial", "the tutorial's experiment on one GPU emulating two: resnet50, "
              "batch 120, 128 px, single (whole and accumulating), model-parallel, pipeline at "
              f"splits {SPLITS}", (
                  Step("tutorial", _run("tutorial", "--strategy",
                                        "single,model-parallel,pipeline", "--model",
                                        "resnet50", "--batch-size", "120", "--image-size", "128",
                                        "--devices", shared, "--split-size", SPLITS,
                                        steps=10, warmup=3), 300),)),
        Chunk(5, "data-parallel", "ddp and fsdp on one GPU emulating two (gloo), world sizes "
              "1 and 2, against single", (
                  Step("data-parallel", _run("data-parallel", "--strategy", "single,ddp,fsdp",
                                             "--model", "resnet50", "--batch-size", "128",
                                             "--image-size", "128", "--devices", shared,
                                             "--world-size", "1,2", steps=10, warmup=3),
                       240),)),
        Chunk(6, "pytest-benchmark", "the pytest-benchmark suite on the GPU", (
            Step("pytest-benchmark", (sys.executable, "-m", "pytest", "benchmarks",
                                      "--benchmark-only", "-q", "-p", "no:cacheprovider",
                                      "--benchmark-json", "{folder}/benchmark.json"), 300,
                 env={"PARBENCH_BENCH_DEVICES": shared}),)),
        Chunk(7, "asv", "the asv suite on the GPU, in the host's environment", (
            Step("asv-machine", (sys.executable, "-m", "asv", "machine", "--yes"), 10),
            Step("asv-run", (sys.executable, "-m", "asv", "run", "--python=same", "--quick",
                             "--set-commit-hash", "{commit}"), 480,
                 env={"PARBENCH_ASV_DEVICES": shared})),),
    ]


def _torch_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "none"


def install(wheels: Path | None) -> None:
    """parbench (and wheels such as asv's) into this Python, never replacing its torch."""
    before = _torch_version()
    commands = [[sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                 "--no-build-isolation", "-e", str(ROOT)]]
    if wheels:
        commands.append([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                         "--no-index", *map(str, sorted(wheels.glob("*.whl")))])
    for command in commands:
        subprocess.run(command, check=True)
    after = _torch_version()
    if after != before:
        raise SystemExit(f"installing parbench changed torch from {before} to {after}")
    missing = subprocess.run([sys.executable, "-c", "import scipy, pandas, matplotlib, tqdm"],
                             capture_output=True, text=True)
    if missing.returncode:
        raise SystemExit(f"parbench needs {missing.stderr.strip().splitlines()[-1]}: bring its "
                         "wheel with --wheels DIR (e.g. pip download scipy --python-version "
                         "3.12 --only-binary=:all: --no-deps -d DIR)")
    print(f"parbench installed beside torch {after}", flush=True)


def _fill(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [arg.format(**values) if "{" in arg else arg for arg in argv]


def run_step(step: Step, argv: list[str], folder: Path, timeout_s: float) -> dict:
    """Run one step, its output into folder/<step>.log; its process group is stopped at the
    timeout. Returns what steps.json keeps of it."""
    entry = {"step": step.name, "command": shlex.join(argv), "estimate_s": step.estimate_s}
    if step.needs:
        return {**entry, "status": "skipped", "reason": step.needs}
    start = time.monotonic()
    with open(folder / f"{step.name}.log", "w") as log:
        try:
            process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                       env={**os.environ, "PYTHONUNBUFFERED": "1", **step.env},
                                       start_new_session=True)
        except OSError as error:
            return {**entry, "status": f"cannot start: {error}"}
        try:
            code = process.wait(timeout=timeout_s)
            status = "ok" if code == 0 else f"exit {code}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = f"timeout after {timeout_s:.0f} s"
    return {**entry, "status": status, "seconds": round(time.monotonic() - start, 1)}


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


def _dry_run(selected: list[Chunk]) -> None:
    total, fitting = 0, []
    for chunk in selected:
        total += chunk.estimate_s
        if total <= LEASE_S:
            fitting.append(str(chunk.number))
        print(f"chunk {chunk.number} {chunk.name}: {chunk.purpose}")
        print(f"  estimated {chunk.estimate_s} s (limit {CHUNK_LIMIT_S} s), {total} s from the "
              "start")
        values = {"folder": f"RUN/{chunk.folder_name}", "commit": "<commit>",
                  "max_batch": "<max-batch's answer>"}
        for step in chunk.steps:
            note = f"  [skipped: {step.needs}]" if step.needs else ""
            print(f"    ~{step.estimate_s:>3} s  {shlex.join(_fill(step.argv, values))}{note}")
    print(f"total estimated {total} s ({total / 60:.1f} min) for {len(selected)} chunks; "
          f"within {LEASE_S // 60} minutes: chunks {','.join(fitting) or 'none'}. Estimates "
          "are planning figures for one H100, not measurements")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", help="chunk numbers to run, comma separated (default all)")
    parser.add_argument("--device", default="cuda:0", help="the GPU (default cuda:0)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print each chunk's commands and estimated time; run nothing")
    parser.add_argument("--results-dir", default=str(ROOT / "results"))
    parser.add_argument("--timm-benchmark", help=TIMM_HELP)
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install first "
                        "(asv, GPUtil, ...), without their dependencies or an index")
    parser.add_argument("--no-install", action="store_true", help="parbench is installed")
    parser.add_argument("--archive", type=Path,
                        help="after each chunk, write the whole run folder to this .tar.gz")
    args = parser.parse_args(argv)
    every = chunks(args.device, args.timm_benchmark)
    try:
        wanted = {int(n) for n in args.chunks.split(",")} if args.chunks else None
    except ValueError:
        parser.error(f"--chunks takes chunk numbers like 1,2, got {args.chunks!r}")
    selected = [c for c in every if wanted is None or c.number in wanted]
    if wanted and len(selected) < len(wanted):
        parser.error(f"--chunks: there are chunks 1 to {len(every)}, got {args.chunks}")
    if args.dry_run:
        _dry_run(selected)
        return 0
    if not args.no_install:
        install(args.wheels)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    root = Path(args.results_dir) / f"{stamp}-gpu-reference-{_device_slug()}"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip() or "HEAD"
    failed = 0
    for chunk in selected:
        print(f"chunk {chunk.number} {chunk.name} -> {root / chunk.folder_name}", flush=True)
        steps = run_chunk(chunk, root / chunk.folder_name, {"commit": commit})
        failed += any(s["status"] not in ("ok", "skipped") for s in steps)
        if args.archive:
            _archive(root, args.archive)
    print(f"results: {root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
