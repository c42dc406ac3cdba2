"""`parbench verify`: each strategy's steps against the single-device baseline's."""

from __future__ import annotations

import argparse

from parbench import launch, strategies
from parbench.commands.arguments import (
    UsageError,
    add_common_arguments,
    add_strategy_options,
    at_least,
    checked,
    choice_list,
    default_devices,
    device_set,
    image_sizes,
    int_list,
    positive,
    strategy_names,
    strategy_option_sweep,
)
from parbench.drive.verify import DRIFT_ALLOWANCE, MULTI_STEP_PRECISION, TWINS, verify
from parbench.families.workloads import (
    COMPILE_MODES,
    COMPILE_SCOPES,
    MODELS,
    PRECISIONS,
    Workload,
    compile_text,
)
from parbench.plan.config import Config, options_for

__all__ = ["command_verify"]


def _every_strategy_here(workload: Workload, batch: int, devices,
                         options: dict) -> tuple[list[str], list[str]]:
    """The strategies verify checks when none is named: every one its plan finds available
    here and training this workload (the baseline too where it is compiled: against itself
    eager); and a note for each that refuses the workload (--compile, fp16, the model)."""
    names, notes = [], []
    for name in strategies.names():
        plan = Config(name, workload, batch, devices, options=options_for(name, options)).plan
        refused = plan.reason("workload", "model")
        if refused:
            notes.append(f"note: left out {refused}")
        elif plan.available and (name != strategies.BASELINE or workload.compile):
            names.append(name)
    return names, notes


def command_verify(args: argparse.Namespace) -> int:
    if launch.job_rank() is not None:
        raise UsageError("run parbench verify without torchrun or srun; it starts its own "
                         "processes")
    devices = device_set(args.devices or default_devices()[0])
    batch = int_list("--batch-size", args.batch_size, 1)[0]
    [options] = strategy_option_sweep(args, sweep=False)
    if options.get("split_size") is None:  # verify's own default: 4 equal micro-batches, or
        # one a stage on more devices (torch's 1F1B and DualPipeV want no fewer micro-batches
        # than stages, and a V-shaped schedule holds 2 stages a device)
        wanted = max(4, 2 * len(devices))
        micro_batches = next((m for m in range(wanted, batch + 1) if batch % m == 0), batch)
        options["split_size"] = max(1, batch // micro_batches)
    if args.strategy:
        names = strategy_names(args.strategy)
    else:
        names = None
    model = choice_list("--model", args.model, MODELS)[0]
    workload = Workload(model=model, image_size=image_sizes(args.image_size, [model])[0],
                        num_classes=at_least("--num-classes", args.num_classes, 1),
                        precision=choice_list("--precision", args.precision, PRECISIONS)[0],
                        compile=bool(args.compile or args.compile_mode),
                        compile_scope=args.compile or "block",
                        compile_mode=args.compile_mode or "default", seed=args.seed)
    steps = at_least("--steps", args.steps, 1)
    if steps > 1 and workload.precision != "fp32":
        raise UsageError(MULTI_STEP_PRECISION)
    tolerance = positive("--tolerance", args.tolerance)
    notes: list[str] = []  # said once every input is checked: a refusal is the only line
    if names is None:
        names, notes = _every_strategy_here(workload, batch, devices, options)
    for name in names:
        checked(Config(name, workload, batch, devices, options=options_for(name, options)))
    for note in notes:
        print(note)
    print(_header(workload, batch, devices, args.seed, steps), flush=True)
    verdicts = verify(workload, devices, names, batch, options, tolerance,
                      at_least("--threads-per-device", args.threads_per_device, 1), steps)
    worst = f"  {'worst |loss diff| / tolerance (step)':>37}" if steps > 1 else ""
    print(f"{'strategy':<26} {'options':<34} {'max |param diff|':>16} {'baseline update':>15}"
          f"  {'tolerance':>9}{worst}  result")
    for v in verdicts:
        options_text = ",".join(f"{k}={val}" for k, val in v.options.items())
        print(f"{v.strategy:<26} {options_text:<34} {v.max_abs_difference:>16.3e} "
              f"{v.baseline_update:>15.3e}  {v.tolerance:>9.1e}  " + _worst_loss(v, steps)
              + f"{'ok' if v.ok else 'FAILED'}" + (f" ({v.error})" if v.error else "")
              + (f" (fp16 loss scale {v.loss_scale:g})" if v.loss_scale else ""))
    loose = [v.strategy for v in verdicts if v.tolerance >= v.baseline_update]  # NaN: failed
    if loose:
        print(f"note: {', '.join(loose)}: rounding alone moves the reference step as far as the "
              "step itself, so the check tells little there; give a larger --image-size or "
              "micro-batch (--split-size), whose BatchNorm statistics rounding moves less")
    return 0 if all(v.ok for v in verdicts) else 1


def _header(workload: Workload, batch: int, devices, seed: int, steps: int) -> str:
    what = "one SGD step" if steps == 1 else f"{steps} SGD steps"
    compiled = (", " + compile_text(workload.compile_scope, workload.compile_mode)
                if workload.compile else "")
    text = (f"{what} of {workload.model} on batch {batch} ({workload.image_size}px, "
            f"{workload.precision}{compiled}) from seed {seed}, "
            f"against {strategies.BASELINE}{' eager' if workload.compile else ''} on "
            f"{devices.logical[0]}")
    if workload.family.batch_statistics:
        text += ("; micro-batched strategies against the baseline accumulating gradients over "
                 "the same micro-batches, data-parallel ones against it accumulating over the "
                 "replicas' shards (so BatchNorm sees the same samples)")
    else:
        text += (f"'s whole-batch step for every strategy ({workload.model} normalises each "
                 "sample on its own, so splitting the batch changes nothing but rounding)")
    if workload.compile:
        text += (f". Compiled code rounds otherwise than eager in every operation: each "
                 f"strategy may differ from its reference up to {DRIFT_ALLOWANCE}x as much as "
                 "that reference differs from the same steps in float64")
    if steps > 1:
        text += (f". Rounding differences grow over steps: each strategy may drift up to "
                 f"{DRIFT_ALLOWANCE}x as far as the baseline does from the farthest of its "
                 f"{TWINS} rounding twins (the same steps with every gradient nudged one ulp at "
                 "random, as another summation order would), in loss at "
                 "every step and in parameters at the end")
    return text


def _worst_loss(verdict, steps: int) -> str:
    if steps == 1:
        return ""
    k = verdict.worst_loss_step
    if k is None:
        return f"{'-':>37}  "
    if verdict.max_abs_difference == 0 and not any(verdict.loss_differences):
        return f"{'0 (bit for bit)':>37}  "
    ratio = verdict.loss_differences[k] / verdict.loss_tolerances[k]
    return f"{ratio:>31.2f} ({k + 1:>3})  "


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench verify`: its parser and arguments."""
    check = commands.add_parser(
        "verify", help="check every strategy's step equals the single-device step",
        description="From one seed, one optimiser step of each strategy against the "
                    "single-device baseline on the same global batch (with --steps N, N "
                    "steps); prints the largest parameter difference and exits 1 above "
                    "the tolerance. Micro-batched strategies cut the batch into 4 "
                    "equal micro-batches (at least two a device) unless --split-size says "
                    "otherwise.")
    check.add_argument("--strategy", help="strategies to check (default: every one that can "
                       "run here)")
    check.add_argument("--model", default="resnet18")
    check.add_argument("--batch-size", default="8")
    check.add_argument("--image-size", default="64")
    check.add_argument("--num-classes", type=int, default=10)
    check.add_argument("--precision", default="fp32", help=f"one of {', '.join(PRECISIONS)}, "
                       "for the baseline and every strategy (autocast; fp16 adds gradient "
                       "scaling, started for each strategy at the largest scale from 2^16 "
                       "down at which neither its step nor the baseline's overflows)")
    check.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    add_strategy_options(check, sweep=False)
    check.add_argument("--compile", nargs="?", const="block", choices=COMPILE_SCOPES,
                       metavar="|".join(COMPILE_SCOPES),
                       help="each strategy compiled (torch.compile, as `parbench run "
                       "--compile`): each block of the model (block, as `--compile` alone), or "
                       "the module each device runs whole (model), against the baseline eager; "
                       "single compiled is checked too (against itself eager), and a strategy "
                       "that refuses it is left out with its reason")
    check.add_argument("--compile-mode", choices=COMPILE_MODES, metavar="|".join(COMPILE_MODES),
                       help="torch.compile's mode for --compile (default: default); given "
                       "alone, it compiles per block")
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--steps", type=int, default=1,
                       help="steps to train on the batch; above 1 the loss of every "
                       "step is compared too, and the tolerance grows as the baseline's "
                       "rounding twins drift (default 1)")
    check.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest accepted difference after one step: absolute for "
                       "parameters, relative for the loss (default 1e-5)")
    add_common_arguments(check, "--threads-per-device")
    check.set_defaults(handler=command_verify)
