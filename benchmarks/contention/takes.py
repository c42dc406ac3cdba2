"""Repeated takes of one contention measurement (parbench.advisor.profiling.contention), each
read two ways from the same rounds: on the first process alone (models version 10 and before)
and as every process's mean pace (version 11). Prints one line a take.

    python benchmarks/contention/takes.py --model resnet34 --image-size 32 --processes 3 \
        --micro-batch 2 --takes 3
"""

from __future__ import annotations

import argparse
import math
import statistics

from parbench.advisor.profiling.contention import measure_answers, read_slowdowns
from parbench.families.workloads import Workload


def take(workload: Workload, micro_batch: int, processes: int) -> tuple[float, float]:
    """One measurement, contention.measure_slowdown's own: (the first process's slowdown, the
    processes' mean), each the median over contention.ROUNDS rounds, both read from the
    answers it gathered (its reading, the mean, is what it returns)."""
    answers = measure_answers(workload, micro_batch, processes)
    slowdowns = read_slowdowns(answers)
    mean = slowdowns["slowdown"]
    first = statistics.median(together / alone for _, alone, together, _ in answers
                              if not math.isnan(alone))
    return first, mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet34")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--takes", type=int, default=3)
    args = parser.parse_args()
    workload = Workload(model=args.model, image_size=args.image_size, num_classes=1000)
    for number in range(args.takes):
        first, mean = take(workload, args.micro_batch, args.processes)
        print(f"{args.model} {args.image_size} px, micro-batch {args.micro_batch}, "
              f"{args.processes} processes, take {number + 1}: first process {first:.3f}, "
              f"mean of the processes {mean:.3f}", flush=True)


if __name__ == "__main__":
    main()
