"""Development check (not held out): data-parallel records' fixed cost per step from one probe
at 2 images a rank (version 14) against a line through probes at 2 and 4 images a rank."""
import sys, json
import pandas as pd
from pathlib import Path
from parbench.advisor.profiling import fixed_costs as fc
from parbench.advisor.profiling.fixed_costs import FixedCosts, probe_records
from parbench.advisor.runs.published import run_link, run_records, PROFILES_FOLDER
from parbench.advisor.profiling.record_profiles import profiles_for, workload_of
from parbench.advisor.runs.records import predict_record
from parbench.advisor.profiling.fixed_costs import measure_probe, probe_path
from parbench.advisor.runs.records import modelled_prediction
from parbench.advisor.profiling.cache import cached
from parbench.results.folder import RunFolder
from parbench.strategies import layout_of

def main():
    out = []
    for d in sys.argv[1:]:
        folder = RunFolder(Path(d)); recs = run_records(folder)
        link = run_link(folder, "measured", list(recs["backend"].dropna())[0])
        cache = folder.path / PROFILES_FOLDER
        for _, r in recs[recs.status == "ok"].iterrows():
            r = r.to_dict()
            lay = layout_of(r["strategy"])
            if lay is None or not lay.data_parallel or r["world_size"] < 2: continue
            prof = profiles_for(r, cache)
            if predict_record(r, prof, link) is None: continue
            wl = workload_of(r); ranks = r["world_size"]
            (p2,) = probe_records(r)
            i2 = p2["global_batch"] // ranks; i4 = 2 * i2
            if i4 * ranks == r["global_batch"]: i4 = 3 * i2
            p4 = {**p2, "global_batch": i4 * ranks}
            m = {}
            for p in (p2, p4):
                st = cached(probe_path(cache, p, wl), fc.FIXED_COSTS_VERSION, lambda p=p: measure_probe(p, wl))
                m[p["global_batch"] // ranks] = st["step_s"] - modelled_prediction(p, prof, link).step_time_s
            ir = r["global_batch"] // ranks
            slope = (m[i4] - m[i2]) / (i4 - i2)
            f_line = max(0.0, m[i2] + slope * (ir - i2))
            base = modelled_prediction(r, prof, link).step_time_s
            meas = r["step_time_median_s"]
            out.append(dict(run=Path(d).name, strategy=r["strategy"], model=r["model"], px=r["image_size"], ranks=ranks,
                            images_a_rank=ir, measured_s=meas, model_s=base, fixed_at_2=m[i2], 
                            probe_images_2=i2, probe_images_b=i4, fixed_at_b=m[i4],
                            v14_error=(base + max(0, m[i2])) / meas - 1, line_error=(base + f_line) / meas - 1))
    t = pd.DataFrame(out); pd.set_option('display.width', 250)
    print(t.round(4).to_string()); t.to_csv('dp_two.csv', index=False)


if __name__ == "__main__":
    main()
