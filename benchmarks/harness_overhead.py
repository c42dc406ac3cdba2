"""What parbench's harness costs: its single-device throughput against a bare training loop.

Both run in this process, with the same model, batch, optimiser, loss and thread count, in
rounds whose order alternates (bare then parbench, parbench then bare, ...) so that drift and
whatever the first of a pair pays affect both alike.

    python benchmarks/harness_overhead.py --model resnet50 --batch-size 32 --image-size 128
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from parbench.families.workloads import Workload
from parbench.launch import measure
from parbench.machine.devices import parse_devices
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config


def bare_loop_throughput(workload: Workload, batch_size: int, warmup: int, steps: int) -> float:
    """The hand-written loop a user would write: no harness, no per-step bookkeeping."""
    model = workload.build_model().train()
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=workload.learning_rate,
                                momentum=workload.momentum)
    images, labels = workload.make_batch(batch_size, "cpu")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return batch_size * steps / (time.perf_counter() - start)


def _throughput(measured: Measurement, batch_size: int) -> float:
    return batch_size * len(measured.step_times_s) / measured.total_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    workload = Workload(model=args.model, image_size=args.image_size)
    config = Config(strategy="single", workload=workload, global_batch=args.batch_size,
                    devices=parse_devices("cpu"), warmup=args.warmup, steps=args.steps,
                    threads_per_device=args.threads)
    bare, harness = [], []
    for round_index in range(args.rounds):
        torch.set_num_threads(args.threads)

        def run_bare() -> None:
            bare.append(bare_loop_throughput(workload, args.batch_size, args.warmup, args.steps))

        def run_parbench() -> None:
            measured = measure(config)
            assert measured is not None  # None only on a torchrun rank other than 0's
            harness.append(_throughput(measured, args.batch_size))

        order = (run_bare, run_parbench) if round_index % 2 == 0 else (run_parbench, run_bare)
        for run in order:
            run()
        print(f"round {round_index + 1}: bare {bare[-1]:.2f} img/s, "
              f"parbench {harness[-1]:.2f} img/s", flush=True)
    ratios = [h / b for h, b in zip(harness, bare, strict=True)]
    print(f"{args.model} batch {args.batch_size} {args.image_size}px, {args.threads} thread(s), "
          f"{args.rounds} rounds of {args.steps} steps: bare median {statistics.median(bare):.2f}"
          f" img/s, parbench median {statistics.median(harness):.2f} img/s, "
          f"harness overhead {100 * (1 - statistics.median(ratios)):+.2f}% "
          f"(per-round ratios {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
