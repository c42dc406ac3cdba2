import sys, json, statistics
import pandas as pd
from pathlib import Path
from parbench.advisor.profiling import fixed_costs as fc
from parbench.advisor.profiling.fixed_costs import FixedCosts, solve_action_cost, probe_records
from parbench.advisor.runs.published import run_link, run_records, PROFILES_FOLDER
from parbench.advisor.profiling.record_profiles import profiles_for, workload_of
from parbench.advisor.runs.records import predict_record
from parbench.advisor.profiling.fixed_costs import probe_path
from parbench.advisor.runs.records import modelled_prediction
from parbench.results.folder import RunFolder
from parbench.strategies import Layout, layout_of

out = []
for d in sys.argv[1:]:
    folder = RunFolder(Path(d))
    recs = run_records(folder)
    link = run_link(folder, "measured", list(recs["backend"].dropna())[0])
    cache = folder.path / PROFILES_FOLDER
    for _, r in recs[recs.status == "ok"].iterrows():
        r = r.to_dict()
        if layout_of(r["strategy"]) not in (Layout.SCHEDULED_PIPELINE, Layout.SHARDED_PIPELINES):
            continue
        prof = profiles_for(r, cache)
        if predict_record(r, prof, link) is None: continue
        wl = workload_of(r)
        probes = []
        for p in probe_records(r):
            st = json.loads(probe_path(cache, p, wl).read_text())
            probes.append(({**p, "partition": st["partition"] or p.get("partition"),
                            "micro_batches": st["micro_batches"] or p.get("micro_batches")}, st["step_s"]))
        P = lambda rec, c=0.0, a=0.0: modelled_prediction(rec, prof, link, FixedCosts(per_action_s=c, per_step_s=a)).step_time_s
        (ps, ms), (pl, ml) = probes
        K = r["world_size"] // int((r.get("strategy_options") or {}).get("pipelines") or 1)
        p2k, m2k = (ps, ms) if ps["micro_batches"] in (2 * K, 3 * K) and ps["split_size"] == 2 else (pl, ml)
        c_short = solve_action_cost(lambda c: P(p2k, c), m2k)
        c_long = solve_action_cost(lambda c: P(pl, c), ml)
        c2 = solve_action_cost(lambda c: P(pl, c) - P(ps, c), ml - ms)
        a2 = max(0.0, statistics.fmean([ms - P(ps, c2), ml - P(pl, c2)]))
        M = int(r["micro_batches"]); meas = r["step_time_median_s"]
        # interpolate the fixed cost at the record's action count: fixed(M) linear in M
        # between the probes, flat outside
        f_short = ms - P(ps); f_long = ml - P(pl)
        Ms, Ml = ps["micro_batches"], pl["micro_batches"]
        t = min(1, max(0, (M - Ms) / ((Ml - Ms) or 1)))
        f_interp = max(0.0, f_short + t * (f_long - f_short))
        row = dict(run=Path(d).name, config_index=r["config_index"], strategy=r["strategy"],
                   model=r["model"], image_size=r["image_size"], ranks=r["world_size"],
                   split_size=r["split_size"], micro_batches=M, measured_step_s=meas,
                   short_probe=f'{ps["global_batch"]} images, {ps["micro_batches"]} micro-batches: {ms:.4g} s',
                   long_probe=f'{pl["global_batch"]} images, {pl["micro_batches"]} micro-batches: {ml:.4g} s',
                   one_probe_per_action_s=c_short, two_probes_per_action_s=c2, two_probes_per_step_s=a2,
                   error_no_fixed_cost=P(r)/meas-1, error_one_probe=P(r, c_short)/meas-1,
                   error_two_probes=P(r, c2, a2)/meas-1)
        out.append(row)
t = pd.DataFrame(out)
t.to_csv("pipelines.csv", index=False)
for v in ['error_no_fixed_cost', 'error_one_probe', 'error_two_probes']:
    e = t[v].abs(); print(v, 'median %.1f%% worst %.1f%% >15%%: %d' % (100*e.median(), 100*e.max(), (e>0.15).sum()))
