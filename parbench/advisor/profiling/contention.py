"""How much slower a step computes when several emulated devices compute at once on one CPU:
the whole training step timed in one process alone, in N processes together each at its own
pace (the mean over the N: the scheduler may leave one a core of its own while the others
share one), and in N processes in lock-step (each step waits for the slowest, as
data-parallel ranks do), in interleaved rounds in the same processes (so the machine's drift
falls on all alike), with the threads and the allocator a run's workers have; cached like a
profile. The
lock-step's wait is once a step, with a multiprocessing barrier's wake-up in it; DDP and FSDP
wait at every bucket and unit, which the probe's fixed cost (fixed_costs) carries beyond."""

from __future__ import annotations

import math
import multiprocessing
import queue
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from parbench.advisor.profiling.cache import cached, settings_key
from parbench.families.workloads import Workload
from parbench.launch.spawn import START_METHOD
from parbench.machine.allocator import pin_cpu_allocator

__all__ = ["CONTENTION_VERSION", "Answer", "Sharing", "load_or_measure_slowdown",
           "measure_answers", "measure_slowdown", "read_slowdowns", "slowdown_path"]

# One process's answer in one round: (round, its median step alone (NaN but on rank 0),
# together at its own pace, in lock-step), in seconds.
Answer = tuple[int, float, float, float]

CONTENTION_VERSION = 5  # bump when what is measured changes: older caches are measured again
# Each phase steps for at least this long: a step of a few milliseconds (2 images at 64 px)
# is over before processes started together overlap, and three processes on two cores then
# measured no slowdown at all (version 2, started step by step).
WINDOW_S = 1.0
# The median of this many rounds: with 3, two takes of the same slowdown 20 minutes apart
# differed by up to 19% (resnet101 at micro-batch 2, three processes on two cores: 1.74 and
# 1.41), and a pipeline's fixed cost per action, solved against it, by twice that.
ROUNDS = 5
# Version 5 averages every process's pace where 4 read the first process's alone: three
# processes on two cores, two takes of the same slowdown gave 1.38 and 2.12 read on the
# first process (as it had a core of its own or shared one); the mean halved that spread in
# takes since (results/20261127T092022Z-repeatability-v10-tail/contention-takes.txt).


@dataclass(frozen=True)
class Sharing:
    """`ranks` emulated devices on one CPU of `cores` cores, `threads` threads each, every one
    of them computing at once measured `slowdown` times as long a step as one alone."""

    ranks: int
    cores: int
    threads: int
    slowdown: float

    def of(self, computing: int) -> float:
        """How many times as long a step takes with `computing` of the ranks computing at once:
        the cores taken in turn once there are more threads than cores, times what sharing the
        memory system costs beyond that (the measured slowdown over the turns all ranks take,
        taken to grow evenly from nothing at one rank computing to that at all of them). Never
        below the turns: a slowdown measured under them (noise) is taken as the turns."""
        if computing <= 1 or self.ranks <= 1:
            return 1.0
        beyond = max(1.0, self.slowdown / self._turns(self.ranks))
        return self._turns(computing) * (1 + (beyond - 1) * (computing - 1) / (self.ranks - 1))

    def _turns(self, computing: int) -> float:
        return max(1.0, computing * self.threads / self.cores)


def _steps_for(step, window_s: float, least: int) -> list[float]:
    """`step()`'s times, stepping without pause until `window_s` has passed and at least
    `least` steps are done."""
    times: list[float] = []
    end = time.perf_counter() + window_s
    while time.perf_counter() < end or len(times) < least:
        times.append(step())
    return times


def _worker(rank: int, workload: Workload, micro_batch: int, threads: int, steps: int,
            rounds: int, window_s: float, barrier, lockstep_steps, results) -> None:
    """Each round: rank 0 steps alone while the others wait, then every rank steps without
    pause for the same window (all of them computing throughout), then every rank takes the
    same number of steps, each ended by waiting for the others; every rank sends its (round,
    alone, together, lock-step) medians for every round (alone: rank 0's, NaN on the
    others)."""
    pin_cpu_allocator()
    torch.set_num_threads(threads)
    model = workload.build_model_on("cpu")
    images, labels = workload.make_batch(micro_batch, "cpu")
    loss_fn = workload.loss_fn()

    def step() -> float:
        start = time.perf_counter()
        with workload.autocast("cpu"):
            loss = loss_fn(model(images), labels)
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step()  # warm-up: kernels chosen, memory mapped
    for round_index in range(rounds):
        barrier.wait()
        alone = _steps_for(step, window_s, steps) if rank == 0 else []
        barrier.wait()
        if rank == 0:  # as many lock-steps as fill the window alone: the same on every rank
            lockstep_steps.value = max(steps, math.ceil(window_s / statistics.median(alone)))
        together = _steps_for(step, window_s, steps)
        barrier.wait()
        lockstep = []
        for _ in range(lockstep_steps.value):
            start = time.perf_counter()
            step()
            barrier.wait()
            lockstep.append(time.perf_counter() - start)
        results.put((round_index, statistics.median(alone) if alone else math.nan,
                     statistics.median(together), statistics.median(lockstep)))


def measure_answers(workload: Workload, micro_batch: int, processes: int, threads: int = 1,
                    steps: int = 3, rounds: int = ROUNDS, timeout_s: float = 900.0,
                    window_s: float = WINDOW_S) -> list[Answer]:
    """Every process's answer in every one of `rounds` rounds (what `measure_slowdown` reads
    its slowdowns from), `processes` processes computing at once, each with `threads` threads
    (stepping for `window_s`, at least `steps` steps; a RuntimeError where one dies, or they
    have not answered within `timeout_s`); every process is ended on return."""
    # Forked from parbench's fork server, which imported torch once: spawned, each process
    # imported it again, most of a short measurement's time on a small machine.
    context: Any = multiprocessing.get_context(START_METHOD)  # its Process, by start method
    barrier, results = context.Barrier(processes, timeout=timeout_s), context.Queue()
    lockstep_steps = context.Value("i", steps)
    children = [context.Process(target=_worker, daemon=True, args=(
        rank, workload, micro_batch, threads, steps, rounds, window_s, barrier,
        lockstep_steps, results))
        for rank in range(processes)]
    for child in children:
        child.start()
    try:
        answers = _answers(results, children, rounds * processes,
                           time.monotonic() + timeout_s)
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.terminate()
                child.join(timeout=10)
    return answers


def measure_slowdown(workload: Workload, micro_batch: int, processes: int, threads: int = 1,
                     steps: int = 3, rounds: int = ROUNDS, timeout_s: float = 900.0,
                     window_s: float = WINDOW_S) -> dict[str, float]:
    """The medians over `rounds` of a step's time with `processes` processes computing at once
    over its time alone, each process with `threads` threads: `slowdown` each at its own pace
    (stepping for `window_s`, at least `steps` steps; the processes' mean), `lockstep_slowdown`
    each step waiting for the slowest (see `measure_answers`)."""
    return read_slowdowns(measure_answers(workload, micro_batch, processes, threads, steps,
                                          rounds, timeout_s, window_s))


def read_slowdowns(answers: list[Answer]) -> dict[str, float]:
    """The medians over rounds of the processes' mean step together, and of the lock-step
    (the same on every process: each step ends when the slowest does), over rank 0's alone."""
    rounds: dict[int, list[Answer]] = {}
    for answer in answers:
        rounds.setdefault(answer[0], []).append(answer)
    together, lockstep = [], []
    for answered in rounds.values():
        alone = next((a for _, a, _, _ in answered if not math.isnan(a)), None)
        if alone is None:
            raise RuntimeError("measuring contention: no process timed its steps alone")
        # the plain mean, not the harmonic: with one process on a core of its own and two
        # sharing one (1, 2, 2) it reads 5/3 where an even split would be 1.5, and that
        # unevenness is kept, as a pipeline's step waits on its slowest ranks
        together.append(statistics.fmean(t for _, _, t, _ in answered) / alone)
        lockstep.append(statistics.fmean(s for _, _, _, s in answered) / alone)
    return {"slowdown": statistics.median(together),
            "lockstep_slowdown": statistics.median(lockstep)}


def _answers(results, children, count: int,
             deadline: float) -> list[Answer]:
    """`count` answers of the processes, (round, alone, together, lock-step) medians, as they
    come; a RuntimeError as soon as a process has died, or at the deadline."""
    answers: list[Answer] = []
    while len(answers) < count:
        try:
            answers.append(results.get(timeout=1.0))
        except queue.Empty:
            died = [child.exitcode for child in children if child.exitcode not in (None, 0)]
            if died or time.monotonic() > deadline:
                raise RuntimeError("measuring contention: " + (
                    f"a process exited with {died[0]}" if died else
                    "the processes did not answer in time")) from None
    return answers


def slowdown_path(cache: Path, workload: Workload, micro_batch: int, processes: int,
                  threads: int = 1) -> Path:
    """Where the slowdown for these settings is cached."""
    settings = settings_key(workload, "cpu", threads, micro_batch)
    return cache / f"contention-{settings}-x{processes}.json"


def load_or_measure_slowdown(cache: Path, workload: Workload, micro_batch: int,
                             processes: int, threads: int = 1, lockstep: bool = False) -> float:
    """The cached slowdown for these settings (`lockstep`: each step waiting for the slowest),
    measured and cached if there is none."""
    path = slowdown_path(cache, workload, micro_batch, processes, threads)
    stored = cached(path, CONTENTION_VERSION, lambda: measure_slowdown(
        workload, micro_batch, processes, threads))
    return stored["lockstep_slowdown" if lockstep else "slowdown"]
