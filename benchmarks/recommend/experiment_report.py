"""The recommend experiment's README.md and regret.png, written from what it stored.

From its experiment.json and, for the baselines beside the pick (experiment_baselines.py), the
stored records of its sweeps and finals:

    python benchmarks/recommend/experiment_report.py results/<time>-recommend-experiment

writes them again, measuring and predicting nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiment_baselines import HIT, hit_rates, within_noise, workload_baselines

from parbench.results.folder import atomic_write_text


def _pct(value, interval=None) -> str:
    if value is None:
        return "-"
    bounds = f" [{interval[0]:.0%}, {interval[1]:.0%}]" if interval else ""
    return f"{value:.1%}{bounds}"


def write_report(out: Path) -> None:
    """README.md and regret.png from experiment.json and the stored sweeps and finals."""
    found = json.loads((out / "experiment.json").read_text())
    cases = found["workloads"]
    baselines = [workload_baselines(out, case) for case in cases]
    within = sum((c["confirmed_pick_regret"] or 0) <= 0.05 for c in cases
                 if c["confirmed_pick_regret"] is not None)
    right = sum(c["memory_calls_right"] for c in cases)
    total = sum(len(c["memory_calls"]) for c in cases)
    text = [
        "# parbench recommend, checked against the whole sweep",
        "",
        f"Models version {found['predictor_version']}, committed before any of these "
        "measurements was read (the sweep does not depend on the models, so it may be measured "
        "while they are written; the confirmation and the final do, and follow them); every "
        "layout of each workload measured on emulated CPU devices in "
        f"{found['repeats']} interleaved rounds of {found['warmup']} warm-up + "
        f"{found['steps']} measured steps (a run folder each), and `parbench recommend "
        f"--confirm {found['confirm']}` run beside it (its own run folder under "
        "confirmations/). The sweep screens; its contenders (every layout within "
        f"{found['final_within']:.0%} of the sweep's best mean, and both "
        f"picks) are measured again in {found['final_rounds']} interleaved "
        "rounds of their own (a run folder each, `-final`), and the measured best and each "
        "pick's regret are read from those rounds: regret = 1 - the pick's throughput over the "
        "measured best's, paired by round. (Judged in the sweep alone, the best is the largest "
        "of some 30 noisy means, read on the rounds that chose it, and regret reads high by "
        "its luck.) Made by benchmarks/recommend/experiment.py; this report written again "
        "from experiment.json and the stored records by experiment_report.py beside it.",
        "", *_table(cases, baselines), "",
        f"After --confirm {found['confirm']}, regret at most 5% in {within} of {len(cases)} "
        f"workloads; memory calls right: {right} of {total} (each emulated device limited to "
        "the memory named, --device-memory-mib).", "", _against_baselines(cases, baselines),
        "", _sweep_only(found, cases), "",
        _prediction(cases), "", _memory(cases), "",
        "![regret](regret.png)", ""]
    atomic_write_text(out / "README.md", "\n".join(text))
    _regret_figure(out / "regret.png", cases, baselines)


def _table(cases: list[dict], baselines: list[dict]) -> list[str]:
    """A row per workload: its sweep, best, both picks' regret, the baselines' and the memory
    calls."""
    rows = ["| workload | layouts (ok) | contenders | measured best | predicted pick: regret "
            "[95%] | after --confirm 3: pick, regret [95%] | always single: regret [95%] | "
            "best of K drawn at random: K of layouts ok, expected regret, P(within 5%) | "
            "sweep measured | memory calls right |", "|---|---|---|---|---|---|---|---|---|---|"]
    for case, baseline in zip(cases, baselines, strict=True):
        calls = case["memory_calls"]
        rows.append(
            f"| {case['workload']['name']} | {case['sweep_size']} ({case['ok']}) | "
            f"{case.get('contenders') or '-'} | {case['best']} | {case['predicted_pick']}: "
            f"{_pct(case['predicted_pick_regret'], case['predicted_pick_regret_interval'])} | "
            f"{case['confirmed_pick']}: "
            f"{_pct(case['confirmed_pick_regret'], case['confirmed_pick_regret_interval'])} | "
            f"{_single(baseline)} | {baseline['random_k']} of {baseline['random_from']}: "
            f"{baseline['random_regret']:.1%}, {baseline['random_hit']:.0%} | "
            f"{case['measured_by_recommend']} of {case['sweep_size']} "
            f"({case['share_measured']:.0%}) | "
            + (f"{case['memory_calls_right']} of {len(calls)}" if calls else "no limit") + " |")
    return rows


def _single(baseline: dict) -> str:
    """Always single's regret, or why it has none (out of memory)."""
    if baseline["single_regret"] is not None:
        return _pct(baseline["single_regret"], baseline["single_regret_interval"])
    return "out of memory" if baseline["single_status"] == "oom" else "-"


def _rate(rate: dict, whole: bool = True) -> tuple[str, str]:
    """Hits of the workloads, and the rate with its interval."""
    low, high = rate["interval"]
    return (f"{rate['hits'] if whole else format(rate['hits'], '.2f')} of {rate['n']}",
            f"{rate['hits'] / rate['n']:.0%} [{low:.0%}, {high:.0%}]")


def _mean(values: list) -> str:
    found = [value for value in values if value is not None]
    return f"{sum(found) / len(found):.1%}" if found else "-"


def _noise(rates: dict) -> str:
    """Whether the hit rates' intervals tell any two apart."""
    names = dict(pick="the pick", single="single", random="random")
    apart = within_noise(rates)
    if not apart:
        return ("The three hit rates' intervals overlap: on these workloads the pick, single "
                "and random are within noise of each other.")
    return ("Beyond noise (intervals apart): " + ", ".join(f"{names[a]} and {names[b]}"
                                                          for a, b in apart)
            + "; the rest within noise.")


def _against_baselines(cases: list[dict], baselines: list[dict]) -> str:
    """The pick's hits and mean regret beside always single's and random-K's, and whether
    their intervals tell them apart."""
    rates = hit_rates(cases, baselines)
    (pick, pick_rate), (single, single_rate) = _rate(rates["pick"]), _rate(rates["single"])
    random, random_rate = _rate(rates["random"], whole=False)
    picks = [c["confirmed_pick_regret"] for c in cases]
    fits = [i for i, b in enumerate(baselines) if b["single_regret"] is not None]
    sizes = sorted({b["random_k"] for b in baselines})
    k = str(sizes[0]) if len(sizes) == 1 else f"{sizes[0]} to {sizes[-1]}"
    return (
        "Beside two baselines, judged as the pick is (a layout that was no contender, against "
        f"the sweep's best), from the stored measurements alone: within {HIT:.0%} of the "
        f"measured best after --confirm 3 in {pick} workloads ({pick_rate}); always single "
        f"in {single} ({single_rate}; out of memory, a miss, in {len(cases) - len(fits)}); "
        f"the best of {k} layouts drawn at random from those each sweep ran (as many as "
        "recommend measured; a draw's best by its sweep mean; exact over every draw) in "
        f"{random} expected ({random_rate}, the interval at that expected count). 95% "
        f"Clopper-Pearson intervals. Mean regret: the pick {_mean(picks)}, single "
        f"{_mean([baselines[i]['single_regret'] for i in fits])} on the {len(fits)} "
        f"workloads where it fits (the pick {_mean([picks[i] for i in fits])} on those), "
        f"random {_mean([b['random_regret'] for b in baselines])} expected. {_noise(rates)}")


def _sweep_only(found: dict, cases: list[dict]) -> str:
    """The confirmed pick's regret judged in the sweep alone (the workloads with a final)."""
    finals = [c for c in cases if c.get("final")]
    in_sweep = ", ".join(f"{c['workload']['name']} {_pct(c['sweep_confirmed_pick_regret'])} "
                         f"(best {c['sweep_best']})" for c in finals)
    judged = [c["sweep_confirmed_pick_regret"] for c in finals
              if c["sweep_confirmed_pick_regret"] is not None]
    unjudged = len(finals) - len(judged)  # a pick the sweep did not measure: the control
    return (f"Judged in the sweep alone (its best chosen and read on the same rounds), "
            f"the regret after --confirm {found['confirm']} was at most 5% in "
            f"{sum(regret <= 0.05 for regret in judged)} of {len(judged)}"
            + (f" ({unjudged} pick not in the sweep: recommend's control, -)" if unjudged else "")
            + f": {in_sweep}." if finals else "")


def _memory(cases: list[dict]) -> str:
    """Each measured configuration's fullest device, predicted against measured."""
    errors = sorted(abs(e["error"]) for c in cases for e in c.get("memory_errors", []))
    return (f"Memory: each measured configuration's fullest device, predicted against "
            f"measured (counted tensors): median |error| {errors[len(errors) // 2]:.1%}, "
            f"worst {errors[-1]:.1%}, {sum(e <= 0.10 for e in errors)} of {len(errors)} "
            "within 10%." if errors else "")


def _prediction(cases: list[dict]) -> str:
    """The throughput prediction's error and order on every layout the sweep measured."""
    judged = [c for c in cases if c.get("throughput")]
    speed = sorted(abs(e) for c in judged for e in c["throughput"]["errors"])
    rho = ", ".join(f"{c['throughput']['spearman']:.2f}" for c in judged)
    naive = ", ".join(_pct(c.get("control_regret_in_sweep")) for c in judged)
    return (f"The prediction itself, on every layout measured in the sweep: throughput "
            f"median |error| {speed[len(speed) // 2]:.1%}, worst {speed[-1]:.1%}, "
            f"{sum(e <= 0.10 for e in speed)} of {len(speed)} within 10%; its order "
            f"against the measured one, Spearman's rho by workload: {rho}. The naive "
            f"choice (ddp at the full batch) against the sweep's best: regret {naive} "
            "(- where it did not run: out of memory)."
            if speed else "")


def _series(cases: list[dict], baselines: list[dict]) -> list[tuple[str, list, list]]:
    """Each bar's name, regrets (None: did not run) and 95% intervals (None: none)."""
    picks = [(f"{key}_regret", f"{key}_regret_interval", name) for key, name in
             (("predicted_pick", "predicted pick"), ("confirmed_pick", "after --confirm"))]
    return [*((name, [c[regret] for c in cases], [c[interval] for c in cases])
              for regret, interval, name in picks),
            ("always single", [b["single_regret"] for b in baselines],
             [b["single_regret_interval"] for b in baselines]),
            ("best of K at random (expected)", [b["random_regret"] for b in baselines],
             [None] * len(baselines))]


def _regret_figure(path: Path, cases: list[dict], baselines: list[dict]) -> None:
    """Each workload's regret, predicted pick and after --confirm, beside always single and
    random-K's expectation, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The suite's palette, set where parbench.plots.common is imported: imported here too, so
    # that the figure does not depend on what the process imported before.
    import parbench.plots.common  # noqa: F401

    figure, axis = plt.subplots(figsize=(8, 3.5))
    series = _series(cases, baselines)
    width = 0.8 / len(series)
    for offset, (name, regrets, intervals) in enumerate(series):
        places = [i + width * offset for i in range(len(cases))]
        values = [100 * (regret or 0) for regret in regrets]
        bounds = [(100 * b[0], 100 * b[1]) if b else (v, v)
                  for v, b in zip(values, intervals, strict=True)]
        errors = [[max(0.0, v - low) for v, (low, _) in zip(values, bounds, strict=True)],
                  [max(0.0, high - v) for v, (_, high) in zip(values, bounds, strict=True)]]
        axis.bar(places, values, width, yerr=errors if any(intervals) else None, label=name,
                 capsize=2)
        for place, regret in zip(places, regrets, strict=True):
            if regret is None:
                axis.text(place, 0.5, "oom", rotation=90, ha="center", fontsize=6)
    axis.axhline(100 * HIT, color="grey", linestyle="--", linewidth=1, label=f"{HIT:.0%}")
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))],
                    [c["workload"]["name"] for c in cases], rotation=15, fontsize=7)
    axis.set_ylabel("regret, % (measured, paired by round)")
    axis.set_title("recommend's pick against the measured best, beside single and random "
                   "(emulated CPU devices)", fontsize=9)
    axis.set_ylim(top=axis.get_ylim()[1] * 1.3)  # room for the legend above the bars
    axis.legend(fontsize=7, ncol=3, loc="upper center")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a recommend experiment's folder (its experiment.json)")
    write_report(Path(parser.parse_args(argv).folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
