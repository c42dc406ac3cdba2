"""A run's records predicted again by the models at hand, in a scratch copy of its measured
files with its probes deleted (no held-out guard: development only). It writes its
predictions and probes into FOLDER: never a published run. python repredict.py SCRATCH"""

import sys
import time
from pathlib import Path

from parbench.advisor.runs.published import predict_into, run_records
from parbench.advisor.runs.summary import error_summary
from parbench.commands.left_out import modelled_only
from parbench.results.folder import RunFolder


def main() -> None:
    folder = RunFolder(Path(sys.argv[1]))
    start = time.time()
    records, unmodelled = modelled_only(run_records(folder))
    published = predict_into(folder, records, "measured", left=unmodelled)
    print(error_summary(published.table))
    print(f"{time.time() - start:.0f} s")


if __name__ == "__main__":  # the probes spawn processes that import this file
    main()
