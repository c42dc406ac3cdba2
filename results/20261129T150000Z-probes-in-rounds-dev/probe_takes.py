"""Each probe of the named records of a run measured again, in turn, for N takes, and the
fixed costs and predicted step each take gives, then their median's (probe-takes.txt: run
with commit ddebaaa's measure_probe, one launch of 8 steps, and its probe files). It writes
probe files into FOLDER/profiles: run it on a scratch copy of a run's measured files, never
on a published run: python probe_takes.py SCRATCH 18,20 3"""

import json
import statistics
import sys
from pathlib import Path

from parbench.advisor.profiling import fixed_costs as fc
from parbench.advisor.profiling.record_profiles import profiles_for, workload_of
from parbench.advisor.runs.published import run_link, run_records
from parbench.advisor.runs.records import modelled_prediction
from parbench.results.folder import RunFolder


def _predicted(record, probes, steps, cache, profile, link):
    """The record's costs and predicted step with its probes kept as having measured `steps`."""
    workload = workload_of(record)
    for probe, step in zip(probes, steps, strict=True):
        fc.probe_path(cache, probe, workload).write_text(json.dumps(
            {"version": fc.FIXED_COSTS_VERSION, "step_s": step, "partition": None,
             "micro_batches": probe["micro_batches"]}))
    costs = fc.load_or_probe(cache, record, workload, lambda probe, c: modelled_prediction(
        probe, profile, link, c).step_time_s)
    return costs, modelled_prediction(record, profile, link, costs).step_time_s


def main() -> None:
    run, indices, takes = Path(sys.argv[1]), sys.argv[2].split(","), int(sys.argv[3])
    folder = RunFolder(run)
    records, link, cache = run_records(folder), run_link(folder, "measured", "gloo"), \
        run / "profiles"
    for index in map(int, indices):
        record = records[records.config_index == index].iloc[0].to_dict()
        probes = fc.probe_records(record)
        steps = [[] for _ in probes]
        for take in range(takes):
            for j, probe in enumerate(probes):
                steps[j].append(fc.measure_probe(probe, workload_of(record))["step_s"])
                print(index, take, j, round(steps[j][-1], 4), flush=True)
        profile = profiles_for(record, cache)
        for label, chosen in [*((f"take {t}", [s[t] for s in steps]) for t in range(takes)),
                              ("median", [statistics.median(s) for s in steps])]:
            costs, step = _predicted(record, probes, chosen, cache, profile, link)
            print(f"rec {index} {label}: action {costs.per_action_s * 1e3:.2f} ms step "
                  f"{costs.per_step_s * 1e3:.1f} ms pred {step:.4f} err "
                  f"{step / record['step_time_median_s'] - 1:+.3f}"
                  + (f"  measured {record['step_time_median_s']:.4f}" if label == "median"
                     else ""), flush=True)


if __name__ == "__main__":  # the probes spawn processes that import this file
    main()
