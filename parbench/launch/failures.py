"""Why a configuration failed: out of memory or another error, told from the exception's type
first and from its text only where a worker's exception arrives as text; or what interrupted
it (Ctrl-C, a SIGTERM, Slurm's time limit)."""

from __future__ import annotations

import re
import traceback

import torch

__all__ = ["OUT_OF_MEMORY", "Interrupted", "LaunchError", "failure_reason",
           "interruption_reason", "is_out_of_memory", "last_line", "root_cause"]


class LaunchError(RuntimeError):
    """A worker process failed, hung past the timeout, or died."""


class Interrupted(KeyboardInterrupt):
    """A signal that stops a sweep as Ctrl-C does (SIGTERM: a scheduler, `kill`), and who
    sent it, as known when it arrived (Slurm is asked then: parbench.machine.cluster)."""

    def __init__(self, sender: str):
        super().__init__(sender)
        self.sender = sender


def interruption_reason(interrupt: KeyboardInterrupt) -> str:
    """What stopped the sweep, for the record of the configuration it stopped in."""
    sender = interrupt.sender if isinstance(interrupt, Interrupted) else "Ctrl-C"
    return f"interrupted by {sender}"


# How running out of memory reads in a worker's traceback: CUDA, Python, torch's CPU allocator.
OUT_OF_MEMORY = ("OutOfMemoryError", "MemoryError", "can't allocate memory")
# oneDNN reports a failed scratch allocation this way; under a memory cap it means memory.
_OUT_OF_MEMORY_UNDER_CAP = ("could not create a primitive",)
# How a rank reads when it failed only because a peer went away first (gloo's words, then
# NCCL's), or was stopped because another rank had failed (launch.spawn); and how a rank reads
# that died on its own (a signal, an exit: launch.spawn).
_PEER_GONE = ("Connection closed by peer", "onnection reset by peer",
              "remote process exited", "communicator was aborted")
_STOPPED = " stopped: "
_DIED = " died: "


def is_out_of_memory(error: BaseException, capped: bool) -> bool:
    """Whether `error` means memory ran out (`capped`: under --memory-cap-mib)."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    markers = OUT_OF_MEMORY + (_OUT_OF_MEMORY_UNDER_CAP if capped else ())
    return any(marker in str(error) for marker in markers)


def failure_reason(error: BaseException) -> str:
    """One line for the record: the exception, and where it was raised in this process."""
    reason = f"{error.__class__.__name__}: {error}".strip()[:500]
    if isinstance(error, LaunchError):
        return reason
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{reason} (at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"


def last_line(message: str) -> str:
    """The line of a worker's traceback that says what went wrong: running out of memory
    wherever it appears (wrappers such as pipelining's re-raise it with context lines after
    it), else the last exception line, else the last line."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    for pick in (lambda line: any(m in line for m in OUT_OF_MEMORY),
                 lambda line: re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)):
        chosen = [line for line in lines if pick(line)]
        if chosen:
            return chosen[-1]
    return lines[-1] if lines else "no message"


def root_cause(failures: dict[int, str]) -> int:
    """Of several ranks' failures (rank -> message), the rank whose failure caused the others:
    one that ran out of memory, else one that died, else one that failed on its own rather
    than because a peer went away or was stopped for another's failure; the lowest such."""
    def consequence(rank: int) -> tuple[bool, bool, bool, bool, int]:
        text = failures[rank]
        return (not any(marker in text for marker in OUT_OF_MEMORY), _STOPPED in text,
                any(marker in text for marker in _PEER_GONE), _DIED not in text, rank)
    return min(failures, key=consequence)
