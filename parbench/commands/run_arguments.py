"""`parbench run`'s arguments, in the groups its --help shows."""

from __future__ import annotations

import argparse

from parbench import strategies
from parbench.commands.arguments import add_common_arguments, add_strategy_options
from parbench.families.workloads import COMPILE_MODES, MODELS, PRECISIONS
from parbench.plan import experiments, suite
from parbench.plan.config import SCALINGS
from parbench.plan.planning import BACKENDS

__all__ = ["QUICK_RUN", "add_run_arguments"]

# `parbench run` with no arguments measures the suite's configuration (resnet18, batch 32,
# 128 px, 1 + 3 steps, 3 trials each), as asv and pytest-benchmark do: about 4.5 minutes on two
# CPU cores.
QUICK_RUN = dict(model=suite.MODELS[0], batch_size=str(suite.GLOBAL_BATCH),
                 image_size=str(suite.IMAGE_SIZE), steps=suite.STEPS, warmup=suite.WARMUP)


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--strategy", help="strategies to compare (default: every one that can run "
                     f"here; available: {', '.join(strategies.names())})")
    _add_workload_arguments(run.add_argument_group("what is trained"))
    _add_device_arguments(run.add_argument_group("where and how it runs"))
    add_strategy_options(run.add_argument_group(
        "strategy options (a strategy ignores those it does not take)"))
    _add_measurement_arguments(run.add_argument_group("measuring and recording"))


def _add_workload_arguments(group) -> None:
    group.add_argument("--model", default=QUICK_RUN["model"], help=f"{', '.join(MODELS)}")
    group.add_argument("--batch-size", default=QUICK_RUN["batch_size"],
                       help="global batch per optimiser step (comma list sweeps); under "
                            "--scaling weak, the batch per device")
    group.add_argument("--scaling", choices=SCALINGS, default="strong",
                       help="strong (default): --batch-size is the global batch, the same on "
                            "any number of devices; weak: it is the batch per device, so the "
                            "global batch grows with the devices a strategy uses, as in "
                            "published data-parallel figures")
    group.add_argument("--image-size", default=QUICK_RUN["image_size"],
                       help="square image side in pixels")
    group.add_argument("--num-classes", type=int, default=1000)
    group.add_argument("--precision", default="fp32", help=f"{', '.join(PRECISIONS)} "
                       "(autocast; fp16 adds gradient scaling)")
    group.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    group.add_argument("--compile", nargs="?", const="on", default="off",
                       metavar="off|on|block|model[,...]",
                       help="torch.compile the model in place, for every strategy: block (or "
                            "on) compiles each block of the model (a ResNet's stem, residual "
                            "blocks and head; a ViT's embedding, encoder layers and head), "
                            "model the module a strategy runs on each device whole (the model, "
                            "or a stage), before DDP or FSDP2 wraps it; `--compile` alone is "
                            "on, and a comma list measures each, a configuration of its own in "
                            "the same rounds (default off). The first warm-up step compiles, "
                            "its time is recorded apart (compile_time_s), so --warmup must be "
                            "at least 1")
    group.add_argument("--compile-mode", metavar=f"{'|'.join(COMPILE_MODES)}[,...]",
                       help="torch.compile's mode for the compiled configurations (default: "
                            "default); a comma list measures each (an eager configuration "
                            "once). reduce-overhead and max-autotune capture CUDA graphs, on "
                            "GPUs only (a record says whether: cuda_graphs), and strategies "
                            "whose steps a CUDA graph cannot replay refuse them. Given while "
                            "--compile is off, it compiles per block")
    group.add_argument("--cudnn-benchmark", action="store_true",
                       help="let cuDNN time its convolution algorithms for each input shape "
                            "and keep the fastest (torch.backends.cudnn.benchmark, on in "
                            "timm's benchmark.py; off in torch by default); CUDA only, "
                            "recorded in each record (cudnn_benchmark)")
    group.add_argument("--data", help="train on an image folder (one subfolder per class) "
                       "instead of synthetic data; each rank reads its part through "
                       "DistributedSampler")
    group.add_argument("--loader-workers", type=int, default=0,
                       help="DataLoader worker processes per rank for --data (default 0)")
    group.add_argument("--seed", type=int, default=0)


def _add_device_arguments(group) -> None:
    group.add_argument("--devices", action="append",
                       help="logical devices, e.g. cpu, cuda:0, cpu,cpu (emulated) or "
                            "cuda:0,cuda:1; repeat the flag to sweep device sets "
                            "(default: all GPUs, else two logical devices on one)")
    group.add_argument("--backend", default="auto", choices=BACKENDS,
                       help="process group for one-process-per-device strategies (default "
                            "auto: NCCL when every rank has its own GPU, else gloo)")
    group.add_argument("--memory-cap-mib", type=int, help="each process may allocate this "
                       "many MiB beyond what it holds at the start (CPU: a memory limit to run "
                       "out of, as on a GPU; beyond it the configuration is recorded as oom)")
    group.add_argument("--device-memory-mib", type=int, help="each logical device may hold "
                       "this many MiB of counted tensors (parameters, gradients, optimiser "
                       "state, saved activations, DDP's buckets; not what FSDP holds in full): "
                       "beyond it the configuration is recorded as oom (emulated devices' "
                       "memory; on GPUs, give --memory-cap-mib)")
    add_common_arguments(group, "--threads-per-device", "--timeout")


def _add_measurement_arguments(group) -> None:
    group.add_argument("--steps", type=int, default=QUICK_RUN["steps"],
                       help="measured steps per trial")
    group.add_argument("--repeats", type=int, default=None,
                       help="trials of every configuration, in interleaved rounds: each round "
                            "measures every configuration once in a shuffled order (and, from "
                            "2, the baseline twice: the run's noise floor); speedups are paired "
                            f"by round and every figure of merit gets a 95%% interval (default: "
                            f"{suite.REPEATS} for the quick comparison, without --strategy; "
                            "else 1, no interval)")
    group.add_argument("--experiment", choices=experiments.names(),
                       help="a named experiment's flags (parbench/experiments/NAME.json); "
                            "flags given here as well win")
    group.add_argument("--shuffle-seed", type=int, default=0,
                       help="round r shuffles its order with seed shuffle-seed + r (recorded)")
    group.add_argument("--warmup", type=int, default=QUICK_RUN["warmup"],
                       help="steps run before measuring and discarded (every strategy of a "
                            "process per rank takes at least 2: ddp, fsdp, hsdp and torch's "
                            "pipelining schedules run their second step slower too)")
    group.add_argument("--wide-table", action="store_true",
                       help="print every column of the table (model, batch, image size, "
                            "status, the speedup's causes, efficiencies, imbalance, MFU); by "
                            "default the columns that fit 120 characters (the rest are in the "
                            "run's records.csv and README)")
    group.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                       help="a progress bar naming the configuration being measured, with an "
                            "ETA (default auto: on when stderr is a terminal; else a line per "
                            "trial)")
    group.add_argument("--resume", metavar="RUN", help="measure only what the run folder RUN "
                       "lacks (its own arguments are used; trials that failed with an error, "
                       "not out of memory, are measured again)")
    add_common_arguments(group, "--results-dir")
    group.add_argument("--tag", default="", help="suffix for the run folder's name (default: "
                       "the experiment's name, else the models, image sizes and devices "
                       "swept, e.g. resnet18-128px-2cpu)")
