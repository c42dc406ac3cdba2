"""`parbench run`'s progress: a bar, or a line per trial where stderr is not a terminal, moved
by the sweep's callbacks."""

from __future__ import annotations

import sys

from tqdm import tqdm

from parbench.plan import trials
from parbench.plan.config import Config
from parbench.results.record import Record

__all__ = ["progress_bar"]


def progress_bar(progress: str, total: int, already: int, repeats: int):
    """A progress bar (or a line per trial where stderr is not a terminal) and the sweep's
    callbacks that move it: (bar, on_start, on_done)."""
    show_bar = progress == "on" or (progress == "auto" and sys.stderr.isatty())
    bar = tqdm(total=total, initial=already, file=sys.stderr, unit="trial",
               dynamic_ncols=True,
               bar_format="{n_fmt}/{total_fmt} [{elapsed}<{remaining}] {desc}",
               disable=not show_bar)
    started = [already]

    def on_start(slot: trials.Slot, config: Config) -> None:
        started[0] += 1
        label = config.label() + (f" (round {slot.round + 1} of {repeats}"
                                  f"{', A/A twin' if slot.twin else ''})" if repeats > 1 else "")
        if show_bar:
            bar.set_description_str(label)
        else:
            print(f"[{started[0]}/{total}] {label}", file=sys.stderr, flush=True)

    def on_done(slot: trials.Slot, record: Record) -> None:
        bar.update(1)
        assert record.trials is not None  # a record of a measured trial
        trial = next(t for t in record.trials if (t["round"], t["twin"]) == (slot.round,
                                                                              slot.twin))
        if trial["status"] != "ok":
            bar.write(f"  {record.strategy} {trial['status']}: {trial['reason']}",
                      file=sys.stderr)

    return bar, on_start, on_done
