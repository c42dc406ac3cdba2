"""`parbench profile`: per-operation profiles of a model's training step on the device at
hand (each operation's block, phase, FLOPs, bytes, dtype and device time), a file each."""

from __future__ import annotations

import argparse
import datetime
import itertools
from pathlib import Path

import torch

from parbench.advisor.profiling.op_profile import (
    DEFAULT_STEPS,
    OpProfile,
    measure_op_profile,
    write_op_profile,
)
from parbench.commands.arguments import UsageError, at_least, choice_list, image_sizes, int_list
from parbench.commands.environment import measuring_environment
from parbench.families import family_of
from parbench.families.workloads import MODELS, PRECISIONS, Workload
from parbench.launch.failures import failure_reason, is_out_of_memory

__all__ = ["command_profile"]


def _device(text: str | None) -> str:
    """cpu, or a CUDA device that is here ("cuda" is the current one)."""
    if text is None:
        text = "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return text
    if text != "cuda" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise UsageError(f"--device {text!r}: give cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise UsageError(f"--device {text}: no CUDA GPU here (torch.cuda.is_available() is "
                         "False); profile with --device cpu")
    index = torch.cuda.current_device() if text == "cuda" else int(text[5:])
    if index >= torch.cuda.device_count():
        raise UsageError(f"--device {text}: this machine has {torch.cuda.device_count()} "
                         f"GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return f"cuda:{index}"


def _workloads(args: argparse.Namespace, device: str) -> list[tuple[Workload, int]]:
    """Every (workload, micro-batch) the flags ask for, each one the device can train."""
    models = choice_list("--model", args.model, MODELS)
    sizes = image_sizes(args.image_size, models)
    precisions = choice_list("--precision", args.precision, PRECISIONS)
    batches = int_list("--micro-batch", args.micro_batch, 1)
    if args.cudnn_benchmark and device == "cpu":
        raise UsageError("--cudnn-benchmark applies to CUDA only; leave it out with --device "
                         "cpu")
    if "bf16" in precisions and device != "cpu" and not torch.cuda.is_bf16_supported():
        raise UsageError(f"--precision bf16: {torch.cuda.get_device_name(device)} cannot "
                         "compute in bfloat16; profile fp32 or fp16")
    planned = []
    for model, size, precision, batch in itertools.product(models, sizes, precisions, batches):
        smallest = family_of(model).smallest_batch(size)
        if batch < smallest:
            raise UsageError(f"--micro-batch {batch}: {model} at {size} px trains on at least "
                             f"{smallest} images; give a larger micro-batch")
        planned.append((Workload(model=model, image_size=size, precision=precision,
                                 channels_last=args.channels_last,
                                 cudnn_benchmark=args.cudnn_benchmark), batch))
    return planned


def _folder(into: str | None) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(into) if into else Path("results") / "profiles" / stamp
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"cannot write profiles to {str(path)!r} ({error.strerror or error}); "
                         "choose a writable folder with --into") from None
    return path


def _describe(workload: Workload, batch: int, device: str) -> str:
    layout = " channels-last" if workload.channels_last else ""
    return (f"{workload.model} {workload.image_size}px {workload.precision}{layout} "
            f"b{batch} on {device}")


def _summary(profiles: list[OpProfile]) -> str:
    """Per profile: its step, its operations' device and host time and share of the step,
    its FLOPs, bytes moved and the FLOP/s its step achieved."""
    header = (f"{'profile':<40} {'step ms':>9} {'ops ms':>9} {'share':>6} {'host ms':>9} "
              f"{'GFLOP':>8} {'GB':>7} {'TFLOP/s':>8}")
    lines = [header]
    for profile in profiles:
        bound = (" dispatch-bound" if profile.device != "cpu"
                 and profile.ops_host_s > profile.ops_device_s else "")
        lines.append(
            f"{_describe(profile.workload, profile.micro_batch, profile.device):<40} "
            f"{profile.step_s * 1e3:>9.2f} {profile.ops_device_s * 1e3:>9.2f} "
            f"{profile.ops_device_s / profile.step_s:>6.0%} {profile.ops_host_s * 1e3:>9.2f} "
            f"{profile.flops / 1e9:>8.3f} {profile.bytes_moved / 1e9:>7.3f} "
            f"{profile.flops / profile.step_s / 1e12:>8.4f}{bound}")
    return "\n".join(lines)


def command_profile(args: argparse.Namespace) -> int:
    device = _device(args.device)
    threads = at_least("--threads", args.threads, 1)
    steps = at_least("--steps", args.steps, 1)
    planned = _workloads(args, device)
    folder = _folder(args.into)
    environment = measuring_environment()
    profiles, failed = [], 0
    for index, (workload, batch) in enumerate(planned, 1):
        label = f"[{index}/{len(planned)}] {_describe(workload, batch, device)}"
        try:
            profile = measure_op_profile(workload, batch, device, threads, steps, environment)
        except Exception as error:  # one profile's failure: the others are still measured
            failed += 1
            if is_out_of_memory(error, capped=False):
                print(f"{label}: out of memory; the next profile goes on", flush=True)
            else:
                print(f"{label}: failed: {failure_reason(error)}", flush=True)
            if device != "cpu":
                torch.cuda.empty_cache()
            continue
        path = write_op_profile(profile, folder)
        profiles.append(profile)
        print(f"{label}: step {profile.step_s * 1e3:.2f} ms, its operations "
              f"{profile.ops_device_s * 1e3:.2f} ms ({profile.ops_device_s / profile.step_s:.0%})"
              f" -> {path}", flush=True)
    if profiles:
        print(_summary(profiles))
    print(f"profiles: {folder} ({len(profiles)} written, {failed} failed)")
    return 1 if failed else 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench profile`: its parser and arguments."""
    profile = commands.add_parser(
        "profile", help="profile each operation of a model's training step on this device "
        "(FLOPs, bytes, dtype, kernel time)",
        description="Each operation of one training step (forward, loss, backward, optimiser) "
                    "on the device at hand: its block and phase, FLOPs (torch.utils."
                    "flop_counter), bytes read and written, dtype, and its median time over "
                    "the profiled steps (on a GPU its kernels' time, torch.profiler), beside "
                    "the step's own time. One JSON file per model, image size, precision and "
                    "micro-batch, written as each finishes; a summary table at the end.")
    profile.add_argument("--model", default="resnet50", help="models (comma list; default "
                         "resnet50)")
    profile.add_argument("--image-size", default="224", help="image sizes in px (comma list; "
                         "default 224)")
    profile.add_argument("--precision", default="fp32",
                         help=f"{', '.join(PRECISIONS)} (comma list; default fp32)")
    profile.add_argument("--micro-batch", default="32", help="micro-batch sizes (comma list; "
                         "default 32)")
    profile.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    profile.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time its "
                         "convolution algorithms in the warm-up step and keep the fastest "
                         "(CUDA only)")
    profile.add_argument("--device", help="cpu, cuda or cuda:N (default cuda where there is "
                         "a GPU, else cpu)")
    profile.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    profile.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                         help=f"profiled steps, each operation's time their median (default "
                              f"{DEFAULT_STEPS}; as many again timed without the profiler)")
    profile.add_argument("--into", help="folder for the profiles (default "
                         "results/profiles/<UTC time>)")
    profile.set_defaults(handler=command_profile)
