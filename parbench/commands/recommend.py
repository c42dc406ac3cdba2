"""`parbench recommend`: every layout on N devices ranked by its predicted step, those predicted
not to fit dropped, the top few with why each wins (PREDICTED); with --confirm K, the top K and
the naive control measured in interleaved rounds, and the pick judged against the best."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd
import torch

from parbench import strategies
from parbench.advisor.carried.gpu_shape import carried_profiles
from parbench.advisor.models.links import LINKS, NO_LINK, AnyLink, links_help
from parbench.advisor.profiling.record_profiles import profiles_for
from parbench.advisor.recommend import recommend
from parbench.advisor.recommend.layouts import candidate_configs
from parbench.advisor.recommend.predicted_sweep import predict_sweep
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.commands.arguments import (
    UsageError,
    add_common_arguments,
    at_least,
    device_set,
    image_sizes,
    output_folder,
    positive,
)
from parbench.commands.caches import profile_cache
from parbench.commands.predict import (
    SWEEP_DEFAULTS,
    check_batches,
    link_flag,
    prediction_refusals,
    whole_numbers,
)
from parbench.commands.recommend_confirm import confirm, run_settings, text_table, workload
from parbench.commands.run_arguments import QUICK_RUN
from parbench.families.workloads import MODELS, PRECISIONS
from parbench.machine.devices import DeviceSet
from parbench.machine.gpus import GPUS, GpuSpec, gpu_called
from parbench.strategies.stages import resolve_split

__all__ = ["add_parsers", "command_recommend"]

CONFIRM_ONLY = ("repeats", "out")
# Links between GPUs: without a GPU here, a recommendation for them carries GPU steps.
GPU_LINKS = ("nvlink4", "pcie4")
DEFAULT_GPU = "NVIDIA H200"  # the GPU of parbench's reference steps


def _checked(args: argparse.Namespace) -> argparse.Namespace:
    """Every flag checked, and the defaults filled in, before anything is profiled."""
    devices = at_least("--devices", args.devices, 1)
    at_least("--batch-size", args.batch_size, 1)
    at_least("--top", args.top, 1)
    at_least("--threads", args.threads, 1)
    at_least("--num-classes", args.num_classes, 1)
    image_sizes(str(args.image_size), [args.model])
    splits = (whole_numbers("--split-size", args.split_size, "micro-batch sizes", "2,4")
              if args.split_size is not None else [])
    device = args.profile_device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--profile-device cuda: this machine has no GPU; profile on a machine "
                         "with one, or give --profile-device cpu")
    check_batches(args.model, args.image_size, device, args.batch_size, [devices], splits)
    memory = None if args.memory_mib is None else positive("--memory-mib", args.memory_mib)
    on = _devices_here(args, device)
    gpu = _gpu_not_here(args, on)
    if gpu is not None and memory is None:  # the data sheet's, its "GB" a device's GiB
        memory = gpu.memory_gb * 1024
    return argparse.Namespace(**{**vars(args), "splits": splits, "device": device,
                                 "memory": memory, "on": on, "gpu": gpu,
                                 "link": _recommend_link(args.link, devices, on is not None),
                                 "profile_cache": profile_cache(args.profile_cache),
                                 "repeats": args.repeats or 3, "out": args.out or "results"})


def _gpu_not_here(args: argparse.Namespace, on: DeviceSet | None) -> GpuSpec | None:
    """The GPU not at hand the devices recommended for are (--gpu; without it, on a machine
    with no GPU, the reference GPU's for a GPU link: GPU_LINKS): their steps carried from
    parbench's GPU reference steps; None where the devices are like this machine's."""
    name = args.gpu
    if name is None and args.profile_device is None and on is None \
            and not torch.cuda.is_available() and args.link in GPU_LINKS:
        name = DEFAULT_GPU
    if name is None:
        return None
    if on is not None:
        raise UsageError(f"--gpu {name}: recommends for GPUs not at hand, which --confirm and "
                         "--on cannot measure; drop --gpu, or --confirm and --on")
    gpu = gpu_called(name)
    if gpu is None:
        raise UsageError(f"--gpu {name}: no such GPU in the GPU table; give one of "
                         f"{', '.join(g.label for g in GPUS)}")
    return gpu


def _recommend_link(name: str | None, devices: int, here: bool) -> AnyLink | None:
    """The link named; None for devices at hand without one: their collectives, measured."""
    if name is None:
        if devices == 1:
            return NO_LINK
        if here:
            return None
        raise UsageError(f"--devices {devices}: give --link, the link between them: "
                         f"{', '.join(LINKS)}, or a bus bandwidth in GB/s (e.g. --link pcie4)")
    if name == "measured":
        raise UsageError(f"--link measured: recommend predicts for a link named ("
                         f"{', '.join(LINKS)}) or a bus bandwidth in GB/s; parbench predict "
                         "RUN reads a run's measured one")
    return link_flag(name)


def _devices_here(args: argparse.Namespace, device: str) -> DeviceSet | None:
    """The devices at hand the prediction is for and --confirm measures on (N copies of the
    profiled device by default); None where the prediction is for devices not here (no --on,
    no --confirm)."""
    if args.confirm is None:
        given = [f"--{name}" for name in CONFIRM_ONLY if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: for measuring the recommendation; give "
                             "--confirm K too (e.g. --confirm 2)")
        if args.on is None:
            return None
    else:
        at_least("--confirm", args.confirm, 1)
    if args.repeats is not None and args.repeats < 2:
        raise UsageError(f"--repeats {args.repeats}: a verdict needs an interval, which needs "
                         "2 rounds or more; give --repeats 2 or more")
    at_least("--warmup", args.warmup, 0)
    at_least("--steps", args.steps, 1)
    positive("--timeout", args.timeout)
    on = device_set(args.on or ",".join([device] * args.devices))
    if len(on) != args.devices:
        listed = f"{len(on)} device" + ("" if len(on) == 1 else "s")
        raise UsageError(f"--on {args.on} lists {listed} and the recommendation "
                         f"is for --devices {args.devices}; list "
                         f"{args.devices}, e.g. --on {','.join([device] * args.devices)}")
    if on.kind != device:
        raise UsageError(f"--on {args.on}: {on.kind} devices, while the prediction is for "
                         f"devices like the profiled {device}; give --profile-device {on.kind} "
                         f"or {device} devices")
    output_folder(args.out, Path(args.out or "results"))
    return on


def _predicted(args: argparse.Namespace) -> recommend.Recommendation:
    """The predicted layouts (profiling what they lack), ranked: every configuration parbench
    runs on the devices at hand (--on, --confirm), predicted as `parbench predict` predicts a
    run's records of them; else parbench predict's sweep for N devices of their own."""
    record_like = dict(model=args.model, image_size=args.image_size, precision=args.precision,
                       num_classes=args.num_classes, device_kind=args.device,
                       threads_per_device=args.threads)
    with prediction_refusals():
        if args.on is not None:
            return _predicted_here(args)
        if args.gpu is not None:
            print(f"no profiling here: each step on {args.gpu.label} carried from parbench's "
                  "GPU reference steps (PREDICTED; --gpu NAME for another GPU)",
                  file=sys.stderr, flush=True)
            profile_at = carried_profiles(workload(args), args.gpu, args.profile_cache,
                                          say=lambda line: print(line, file=sys.stderr,
                                                                 flush=True))
        else:
            profile_at = profiles_for(record_like, args.profile_cache)
        table = predict_sweep(args.devices, args.batch_size, args.splits, profile_at, args.link,
                              workload(args))
    return recommend.rank_layouts(table, args.devices, args.memory, _limited(args))


def _predicted_here(args: argparse.Namespace) -> recommend.Recommendation:
    splits = args.splits or [resolve_split(args.batch_size, None, args.devices)[0]]
    configs = candidate_configs(workload(args), args.batch_size, args.on, splits,
                                strategies.names(), **run_settings(args))
    if args.link is None:
        print(f"link: the collectives of {args.on.describe()}, measured once (kept in "
              f"{args.profile_cache})", file=sys.stderr, flush=True)
    found = recommend.recommend_layouts(configs, args.devices, args.memory, _limited(args),
                                        args.link, args.profile_cache)
    args.link = found.link
    return found


def _limited(args: argparse.Namespace) -> str:
    """What a device's memory limits: the tensors an emulated device counts, else all of it."""
    emulated = args.on is not None and (args.on.kind == "cpu" or args.on.emulated)
    return recommend.COUNTED if emulated else recommend.PEAK


def _notes(args: argparse.Namespace, found: recommend.Recommendation) -> list[str]:
    """The lines said beside the ranking; a UsageError where no layout on the devices asked
    for could be predicted, or none is predicted to fit."""
    refused = [f"not predicted: {reason}" for reason in found.table.attrs.get("refused", [])]
    on = found.candidates
    if on.empty:
        raise UsageError(f"no layout on {args.devices} devices could be predicted ("
                         + "; ".join(refused) + "); change --batch-size or --split-size")
    limited = _limited(args)
    if found.ranked.empty:
        lean = recommend.leanest(on, limited)
        raise UsageError(f"--memory-mib {args.memory:g}: no layout on {args.devices} devices is "
                         f"predicted to fit; the leanest, {recommend.row_label(lean)}, needs "
                         f"{lean[limited]:.1f} MiB a device: give --memory-mib "
                         f"{math.ceil(lean[limited])} or more, more --devices, or "
                         "a smaller --batch-size")
    notes = [line for line in [recommend.dropped_summary(found.dropped, len(on), args.memory)]
             if line]
    return notes + refused


def _print_ranking(args: argparse.Namespace, table: pd.DataFrame, ranked: pd.DataFrame,
                   notes: list[str]) -> None:
    shown = ranked.head(max(args.top, args.confirm or 0))
    cap = f"{args.memory:g} MiB a device" if args.memory else "not capped (--memory-mib)"
    print(f"PREDICTED, not measured (timing model version {PREDICTOR_VERSION}): "
          f"{args.model} {args.image_size}px {args.precision}, global batch "
          f"{args.batch_size} on " + (
              f"{args.on.describe()} here ({'emulated, ' if args.on.emulated else ''}each "
              "layout predicted as it would run on them), " if args.on is not None else
              f"{args.devices} {args.gpu.label} (carried from parbench's GPU reference "
              "steps; memory: tensors only), " if args.gpu is not None else
              f"{args.devices} devices like this {args.device} (its profile), ") +
          f"link {args.link.describe()}, memory {cap}; top {len(shown)} of {len(ranked)} "
          f"layouts{' that fit' if args.memory else ''}, fastest first:")
    print(text_table(
        ["rank", "strategy", "options", "step s", "img/s",
         "counted MiB/device" if _limited(args) == recommend.COUNTED
         else "reserved MiB/device",
         "why"],
        [[row["rank"], row["strategy"], recommend.option_flags(row["options"]),
          row["step_time_s"], row["throughput_ips"], row[_limited(args)], row["reason"]]
         for row in shown.to_dict("records")]))
    print(recommend.CAUSES)
    single = recommend.reference(table)
    if single is not None and args.devices > 1:
        print(f"reference, PREDICTED: single on 1 device at the whole batch, step "
              f"{single['step_time_s']:.3g} s, {single['throughput_ips']:.3g} img/s, "
              f"{single['peak_memory_max_mib']:.0f} MiB")
    for line in notes:
        print(line)


def command_recommend(args: argparse.Namespace) -> int:
    args = _checked(args)
    found = _predicted(args)
    notes = _notes(args, found)
    ranked = found.ranked
    if args.confirm and args.confirm > len(ranked):
        many = "1 layout is" if len(ranked) == 1 else f"{len(ranked)} layouts are"
        raise UsageError(f"--confirm {args.confirm}: {many} predicted on "
                         f"{args.devices} devices" + (" to fit" if args.memory else "")
                         + f"; give --confirm {len(ranked)} or fewer")
    _print_ranking(args, found.table, ranked, notes)
    if args.confirm:
        sys.stdout.flush()  # the prediction before the measurement's progress on stderr
        confirm(args, found.candidates, ranked)
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench recommend`: its parser and arguments."""
    parser = commands.add_parser(
        "recommend", help="rank every layout on N devices by its predicted step, drop those "
        "predicted not to fit, and say why each wins (PREDICTED); --confirm measures the top",
        description="Predict every layout parbench models on --devices N devices like this "
                    "one over --link (parbench predict's sweep), drop those predicted to need "
                    "more than --memory-mib a device, and print the fastest with their "
                    "predicted step, throughput, peak memory and the reason each wins or "
                    "loses. With --confirm K: measure the top K and the control (ddp at the "
                    "full batch) on --on in interleaved rounds, and say whether the pick is "
                    "the measured best or within noise of it (recommend.json in the run "
                    "folder).")
    parser.add_argument("--model", choices=MODELS, default=SWEEP_DEFAULTS["model"],
                        help="the model trained")
    parser.add_argument("--image-size", type=int, default=SWEEP_DEFAULTS["image_size"],
                        help="image side in pixels")
    parser.add_argument("--num-classes", type=int, default=1000, help="classes of its head")
    parser.add_argument("--precision", choices=PRECISIONS, default=SWEEP_DEFAULTS["precision"],
                        help="as for run")
    parser.add_argument("--batch-size", type=int, required=True, help="global batch")
    parser.add_argument("--devices", type=int, required=True,
                        help="how many devices the recommendation is for")
    parser.add_argument("--link", help=links_help() + ", or a bus bandwidth in GB/s without "
                        "latency: the link between the devices (needed for 2 or more)")
    parser.add_argument("--memory-mib", type=float, help="memory a device has, in MiB: a "
                        "layout predicted to need more is dropped (default: none dropped)")
    parser.add_argument("--split-size", help="micro-batch sizes for the pipelines, "
                        "comma-separated (default: parbench predict's, 4 per device)")
    parser.add_argument("--top", type=int, default=5, help="how many layouts to show")
    parser.add_argument("--profile-device", choices=("cpu", "cuda"),
                        help="the device profiled, which the devices recommended for are like "
                             "(default: cuda if there is one, else cpu)")
    parser.add_argument("--gpu", metavar="NAME", help="recommend for GPUs not at hand: a GPU "
                        "of the GPU table (e.g. 'H100 SXM5 80 GB'), each step carried from "
                        "parbench's measured GPU reference steps, its memory the data sheet's "
                        "unless --memory-mib; without it, on a machine with no GPU and a GPU "
                        f"link ({', '.join(GPU_LINKS)}), the {DEFAULT_GPU}'s")
    parser.add_argument("--threads", type=int, default=SWEEP_DEFAULTS["threads"],
                        help="CPU threads per device, profiled and measured")
    parser.add_argument("--profile-cache", type=Path,
                        help="where profiles are kept (default ~/.cache/parbench/profiles/<host>)")
    confirm = parser.add_argument_group("measuring the recommendation")
    confirm.add_argument("--confirm", type=int, metavar="K",
                         help="measure the top K and the control (ddp at the full batch)")
    confirm.add_argument("--on", metavar="DEVICES", help="the N logical devices to measure "
                         "on, e.g. cpu,cpu,cpu,cpu (default: N copies of the profiled device)")
    confirm.add_argument("--repeats", type=int, help="interleaved rounds (default 3)")
    confirm.add_argument("--warmup", type=int, default=QUICK_RUN["warmup"],
                         help="warm-up steps a trial")
    confirm.add_argument("--steps", type=int, default=QUICK_RUN["steps"],
                         help="measured steps a trial")
    add_common_arguments(confirm, "--timeout")
    confirm.add_argument("--out", help="results folder the run folder is made in (default "
                         "results)")
    parser.set_defaults(handler=command_recommend)
