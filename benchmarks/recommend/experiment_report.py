"""The recommend experiment's README.md and regret.png, from its experiment.json alone."""

from __future__ import annotations

import json
from pathlib import Path

from parbench.results.folder import atomic_write_text


def _pct(value, interval=None) -> str:
    if value is None:
        return "-"
    bounds = f" [{interval[0]:.0%}, {interval[1]:.0%}]" if interval else ""
    return f"{value:.1%}{bounds}"


def write_report(out: Path) -> None:
    """README.md and regret.png from experiment.json."""
    found = json.loads((out / "experiment.json").read_text())
    cases = found["workloads"]
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
        "its luck.) Made by benchmarks/recommend/experiment.py.",
        "", *_table(cases), "",
        f"After --confirm {found['confirm']}, regret at most 5% in {within} of {len(cases)} "
        f"workloads; memory calls right: {right} of {total} (each emulated device limited to "
        "the memory named, --device-memory-mib).", "", _sweep_only(found, cases), "",
        _prediction(cases), "", _memory(cases), "",
        "![regret](regret.png)", ""]
    atomic_write_text(out / "README.md", "\n".join(text))
    _regret_figure(out / "regret.png", cases)


def _table(cases: list[dict]) -> list[str]:
    """A row per workload: its sweep, best, both picks' regret and the memory calls."""
    rows = ["| workload | layouts (ok) | contenders | measured best | predicted pick: regret "
            "[95%] | after --confirm 3: pick, regret [95%] | sweep measured | memory calls "
            "right |", "|---|---|---|---|---|---|---|---|"]
    for case in cases:
        calls = case["memory_calls"]
        rows.append(
            f"| {case['workload']['name']} | {case['sweep_size']} ({case['ok']}) | "
            f"{case.get('contenders') or '-'} | {case['best']} | {case['predicted_pick']}: "
            f"{_pct(case['predicted_pick_regret'], case['predicted_pick_regret_interval'])} | "
            f"{case['confirmed_pick']}: "
            f"{_pct(case['confirmed_pick_regret'], case['confirmed_pick_regret_interval'])} | "
            f"{case['measured_by_recommend']} of {case['sweep_size']} "
            f"({case['share_measured']:.0%}) | "
            + (f"{case['memory_calls_right']} of {len(calls)}" if calls else "no limit") + " |")
    return rows


def _sweep_only(found: dict, cases: list[dict]) -> str:
    """The confirmed pick's regret judged in the sweep alone (the workloads with a final)."""
    finals = [c for c in cases if c.get("final")]
    in_sweep = ", ".join(f"{c['workload']['name']} {_pct(c['sweep_confirmed_pick_regret'])} "
                         f"(best {c['sweep_best']})" for c in finals)
    sweep_within = sum((c["sweep_confirmed_pick_regret"] or 0) <= 0.05 for c in finals)
    return (f"Judged in the sweep alone (its best chosen and read on the same rounds), "
            f"the regret after --confirm {found['confirm']} was at most 5% in "
            f"{sweep_within} of {len(finals)}: {in_sweep}." if finals else "")


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


def _regret_figure(path: Path, cases: list[dict]) -> None:
    """Each workload's regret, predicted pick and after --confirm, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.5))
    for offset, (key, name) in enumerate((("predicted_pick", "predicted pick"),
                                          ("confirmed_pick", "after --confirm"))):
        values = [100 * (c[f"{key}_regret"] or 0) for c in cases]
        errors = [[100 * max(0.0, (c[f"{key}_regret"] or 0) - (c[f"{key}_regret_interval"]
                                                                or [0, 0])[0]) for c in cases],
                  [100 * max(0.0, (c[f"{key}_regret_interval"] or [0, 0])[1]
                             - (c[f"{key}_regret"] or 0)) for c in cases]]
        axis.bar([i + 0.4 * offset for i in range(len(cases))], values, 0.4, yerr=errors,
                 label=name, capsize=3)
    axis.axhline(5, color="grey", linestyle="--", linewidth=1, label="5%")
    axis.set_xticks([i + 0.2 for i in range(len(cases))],
                    [c["workload"]["name"] for c in cases], rotation=15, fontsize=7)
    axis.set_ylabel("regret, % (measured, paired by round)")
    axis.set_title("recommend's pick against the measured best (emulated CPU devices)",
                   fontsize=9)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
