"""Figures from result records only: strategy comparison, scaling, memory per device, and the
split-size trade-off, each written as PNG and SVG."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVGs

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import strategies  # noqa: E402
from parbench.measure.timeline import PHASES, span_label  # noqa: E402
from parbench.projection import measured_allreduce_s  # noqa: E402
from strategies.stages import bubble_fraction  # noqa: E402

__all__ = ["FIGURES", "config_label", "options_text", "strategy_colour", "strategy_marker",
           "write_collectives_figure", "write_figures", "write_projection_figure"]

def strategy_colour(name: str):
    """The colour its registry entry gives a strategy, in every figure (unknown names grey)."""
    entry = strategies.REGISTRY.get(name)
    return entry.colour if entry else "0.5"


def strategy_marker(name: str) -> str:
    """The marker its registry entry gives a strategy (unknown names a dot)."""
    entry = strategies.REGISTRY.get(name)
    return entry.marker if entry else "."


def options_text(options: dict | None) -> str:
    """A record's strategy options as each strategy's Options name them: `K=2, split=4`
    (switches by name; keys no strategy takes, from older records, left out)."""
    specs = strategies.option_specs()
    return ", ".join(specs[k].text(v) for k, v in (options or {}).items()
                     if k in specs and v not in (None, False))


def config_label(record: pd.Series) -> str:
    """`strategy (options)` for axis ticks, the options wrapped at 24 characters."""
    options = options_text(record.get("strategy_options"))
    if not options:
        return record["strategy"]
    return record["strategy"] + "\n" + textwrap.fill(f"({options})", 24)


def _workload_text(frame: pd.DataFrame) -> str:
    parts = []
    for column, unit in (("model", ""), ("global_batch", "batch "), ("image_size", "")):
        values = sorted(frame[column].dropna().unique())
        if len(values) == 1:
            value = values[0]
            parts.append(f"{value}px" if column == "image_size" else f"{unit}{value}")
    precision = frame["precision"].dropna().unique()
    if len(precision) == 1:
        parts.append(str(precision[0]))
    return ", ".join(parts)


def _title(frame: pd.DataFrame, what: str) -> str:
    """What the figure shows, the workload, and whether the devices were emulated."""
    title = textwrap.fill(f"{what}: {_workload_text(frame)}", 90)
    emulated = frame[frame["emulated"].astype(bool)]
    if len(emulated):
        physical = ", ".join(sorted(emulated["physical_devices"].astype(str).unique()))
        title += f"\nEMULATED: several logical devices on one physical device ({physical})"
    else:
        kinds = ", ".join(sorted(frame["device_kind"].dropna().astype(str).unique()))
        title += f"\nreal devices ({kinds})"
    return title


def _compared_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `device_count`, `weak` and `batch`: the batch its records are compared at,
    the global batch, or under weak scaling the batch per device (runs stored before
    --scaling are strong)."""
    device_count = frame["devices"].astype(str).str.count(",") + 1
    weak = (frame["scaling"] == "weak") if "scaling" in frame else False
    return frame.assign(device_count=device_count, weak=weak,
                        batch=np.where(weak, frame["global_batch"] // device_count,
                                       frame["global_batch"]))


def _groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per workload (model, batch, image size, precision) present; under weak
    scaling the batch per device, so that its records on N devices share a panel."""
    compared = _compared_batch(frame)
    frame = frame.assign(batch=[f"{b} per device" if weak else b
                                for b, weak in zip(compared["batch"], compared["weak"],
                                                   strict=True)])
    keys = ["model", "batch", "image_size", "precision"]
    varying = [k for k in keys if frame[k].nunique() > 1]
    if not varying:
        return [("", frame)]
    panels = []
    for values, group in frame.groupby(varying, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        panels.append((", ".join(f"{k} {v}" for k, v in zip(varying, values, strict=True)),
                       group))
    return panels


def _panels(count: int, width_per: float = 7.0, height: float = 5.5):
    width = min(max(width_per * count, 7.0), 18.0)
    fig, axes = plt.subplots(1, count, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])


def _throughput_spread(record: pd.Series) -> tuple[float, float]:
    """Per-step throughput at the p90 (slow) and fastest step, for error bars."""
    batch = record["global_batch"]
    return batch / record["step_time_p90_s"], batch / record["step_time_min_s"]


def best_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Each strategy once per number of devices: its fastest setting (sweeps have figures of
    their own), in the order first measured."""
    counts = frame["devices"].astype(str).str.count(",")
    best = frame.loc[frame.groupby([frame["strategy"], counts], sort=False)["throughput_ips"]
                     .idxmax()]
    return best.sort_index()


def plot_strategies(frame: pd.DataFrame):
    """Throughput of each strategy at its best setting, with the spread of its steps: one
    horizontal bar each, labelled on the left, so that a dozen strategies stay readable."""
    settings = frame.groupby(["strategy", frame["devices"].astype(str).str.count(",")])
    tried = settings["throughput_ips"].transform("size")
    frame = best_settings(frame.assign(settings_tried=tried))
    panels = _groups(frame)
    rows = max(len(group) for _, group in panels)
    fig, axes = _panels(len(panels), width_per=8.0, height=2.2 + 0.55 * rows)
    for ax, (name, group) in zip(axes, panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        values = group["throughput_ips"].to_numpy()
        spreads = np.array([_throughput_spread(r) for _, r in group.iterrows()])
        errors = np.vstack([np.clip(values - spreads[:, 0], 0, None),
                            np.clip(spreads[:, 1] - values, 0, None)])
        ax.barh(y, values, color=[strategy_colour(s) for s in group["strategy"]],
                xerr=errors, capsize=3, edgecolor="black", linewidth=0.5, height=0.7)
        for yi, value, top, (_, record) in zip(y, values, spreads[:, 1], group.iterrows(),
                                                strict=True):
            speedup = record.get("speedup_vs_baseline")
            note = f"{value:.3g}" + (f"  {speedup:.2f}x" if speedup == speedup and speedup
                                     else "")
            ax.annotate(note, (max(value, top), yi), textcoords="offset points",
                        xytext=(4, 0), ha="left", va="center", fontsize=8)
        labels = [config_label(r).replace("\n", " ") + (f", best of {r['settings_tried']}"
                                                        if r["settings_tried"] > 1 else "")
                  for _, r in group.iterrows()]
        ax.set_yticks(y, [textwrap.fill(label, 40) for label in labels], fontsize=8)
        ax.set_xlabel("throughput (images/s)")
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.25)
    fig.suptitle(_title(frame, "Throughput per strategy at its best setting (bars: all "
                               "measured steps; whiskers: p90 step to fastest step; label: "
                               "img/s and speedup over single)"),
                 fontsize=10)
    return fig


def plot_scaling(frame: pd.DataFrame):
    """Throughput against devices, the ideal N x T(1) line, and efficiency labels: a panel per
    workload and batch (under weak scaling, the batch per device), a line per strategy."""
    scaled = frame[frame["scaling_efficiency"].notna()]
    panels = []
    for name, group in _groups(scaled) if len(scaled) else []:
        group = _compared_batch(group)
        line = [strategy + (f" ({text})" if text else "") for strategy, text in zip(
            group["strategy"], group["strategy_options"].map(
                lambda o: options_text({k: v for k, v in (o or {}).items()
                                        if k != "world_size"})), strict=True)]
        lines = [(key, g) for key, g in group.assign(line=line).groupby("line", sort=False)
                 if g["device_count"].nunique() > 1]
        if lines:
            panels.append((name, lines))
    if not panels:
        return None
    fig, axes = _panels(len(panels), width_per=6.0)
    for ax, (name, lines) in zip(axes, panels, strict=True):
        for label, group in lines:
            group = group.sort_values("device_count")
            strategy = group["strategy"].iloc[0]
            colour = strategy_colour(strategy)
            ax.plot(group["device_count"], group["throughput_ips"],
                    marker=strategy_marker(strategy), color=colour, label=label)
            one = group[group["device_count"] == 1]["throughput_ips"]
            if len(one):
                counts = np.array(sorted(group["device_count"].unique()))
                ax.plot(counts, counts * one.iloc[0], linestyle="--", color=colour, alpha=0.5,
                        label=f"{label}: ideal N x T(1)")
            for _, record in group[group["device_count"] > 1].iterrows():
                ax.annotate(f"{record['scaling_efficiency']:.2f}",
                            (record["device_count"], record["throughput_ips"]),
                            textcoords="offset points", xytext=(6, -4), fontsize=8,
                            color=colour)
        counts = sorted({n for _, group in lines for n in group["device_count"]})
        ax.set_xticks(counts)
        ax.set_xlabel("devices (data-parallel ranks)")
        ax.set_ylabel("throughput (images/s)")
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.15)
        ax.legend(fontsize=7)
    weak = scaled["scaling"].eq("weak") if "scaling" in scaled else pd.Series(False)
    kinds = {True: "weak scaling: the batch per device fixed",
             False: "strong scaling: the global batch fixed"}
    what = "; ".join(kinds[k] for k in sorted(weak.unique(), reverse=True))
    fig.suptitle(_title(scaled, f"Scaling, {what} (labels: efficiency T(N) / (N x T(1)))"),
                 fontsize=10)
    return fig


def plot_memory(frame: pd.DataFrame):
    """Peak memory of each logical device for each strategy at its fastest setting (the
    pipeline-memory figure has every split), with the imbalance max / mean: a row each."""
    panels = _groups(best_settings(frame))
    rows = max(len(group) for _, group in panels)
    fig, axes = _panels(len(panels), width_per=8.0, height=2.2 + 0.55 * rows)
    for ax, (name, group) in zip(axes, panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        for yi, (_, record) in zip(y, group.iterrows(), strict=True):
            peaks = record["peak_memory_mib"] or []
            height = 0.8 / max(len(peaks), 1)
            for d, peak in enumerate(peaks):  # device 0 on top
                ax.barh(yi + 0.4 - height * (d + 0.5), peak, height=height * 0.95,
                        color=strategy_colour(record["strategy"]), edgecolor="black",
                        linewidth=0.5, alpha=1.0 - 0.5 * d / max(len(peaks), 1))
            if peaks:
                ax.annotate(f"{record['memory_imbalance']:.2f}", (max(peaks), yi),
                            textcoords="offset points", xytext=(4, 0), va="center", fontsize=8)
        ax.set_yticks(y, [textwrap.fill(config_label(r).replace("\n", " "), 40)
                          for _, r in group.iterrows()], fontsize=8)
        ax.set_xlabel("peak memory per device (MiB)")
        ax.set_title(name, fontsize=9)
        ax.margins(x=0.15)
    sources = frame["memory_source"].dropna().astype(str)
    how = ("tensors counted per logical device" if sources.str.startswith("tensors").any()
           else "allocator peaks per device")
    fig.suptitle(_title(frame, "Peak memory per device at each strategy's fastest setting, a "
                               f"bar per device, top to bottom ({how}; label: imbalance "
                               "max / mean)"), fontsize=10)
    return fig


def plot_split_sizes(frame: pd.DataFrame):
    """Throughput against micro-batch size per pipeline, with the theoretical bubble."""
    split = frame[frame["split_size"].notna() & (frame["stages"].fillna(1) > 1)]
    if split.empty:
        return None
    if split["split_size"].nunique() < 2:
        return None
    fig, axes = _panels(1, height=7.5)  # room for the legend below
    ax = axes[0]
    for strategy, group in split.groupby("strategy", sort=False):
        group = group.sort_values("split_size")
        ax.plot(group["split_size"], group["throughput_ips"], marker=strategy_marker(strategy),
                color=strategy_colour(strategy), label=strategy)
    # The same-micro-batch baseline: one device accumulating the same micro-batches. A
    # pipeline above it gains from parallelism; the baseline above its flat line gains from
    # the micro-batches themselves.
    accumulating = frame[(frame["strategy"] == strategies.BASELINE)
                         & (frame["micro_batches"].fillna(1) > 1)].sort_values("split_size")
    if len(accumulating):
        ax.plot(accumulating["split_size"], accumulating["throughput_ips"],
                marker=strategy_marker(strategies.BASELINE),
                linestyle="--", color=strategy_colour(strategies.BASELINE),
                label=f"{strategies.BASELINE} accumulating the same micro-batches")
    # The baseline, and every strategy that cuts the model but passes the whole batch.
    splitting = strategies.takers("split_size")
    unsplit = [strategies.BASELINE, *(name for name in strategies.takers("stages")
                                      if name not in splitting)]
    whole_batch = frame["micro_batches"].fillna(1) == 1
    for strategy in unsplit:
        flat = frame[(frame["strategy"] == strategy) & whole_batch]["throughput_ips"]
        if len(flat):
            ax.axhline(flat.iloc[0], color=strategy_colour(strategy), linestyle=":",
                       label=f"{strategy} (no split)")
    ax.set_xscale("log")
    ax.set_xlabel("split size (images per micro-batch, log scale)")
    ax.set_ylabel("throughput (images/s)")
    bubble_axis = ax.twinx()
    stages = int(split["stages"].max())
    batch = int(split["global_batch"].iloc[0])
    sizes = np.unique(np.geomspace(1, split["split_size"].max(), 200).round().astype(int))
    bubble_axis.plot(sizes, [bubble_fraction(stages, -(-batch // s)) for s in sizes],
                     color="0.4", linestyle="--",
                     label=f"GPipe bubble (K-1)/(M+K-1), K={stages} (theory)")
    bubble_axis.set_ylabel("idle fraction (theory)")
    bubble_axis.set_ylim(0, 1)
    handles = ax.get_legend_handles_labels()
    extra = bubble_axis.get_legend_handles_labels()
    # Below the axes: with a dozen schedules, any place inside covers some of them.
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.13), ncol=2)
    fig.suptitle(_title(split, "Split size trade-off: more micro-batches shrink the bubble, "
                               "smaller ones use a device less well"), fontsize=10)
    return fig


def plot_pipeline_memory(frame: pd.DataFrame):
    """How each schedule trades memory for bubble: against its micro-batch count, the peak
    memory of its fullest stage (rank) and the most micro-batches a stage held at once (from
    its timeline), a line per strategy."""
    pipelines = frame[frame["in_flight_micro_batches"].map(
        lambda v: isinstance(v, list) and len(v) > 0)] if "in_flight_micro_batches" in frame \
        else frame.iloc[0:0]
    if pipelines.empty:
        return None
    pipelines = pipelines.assign(
        fullest=pipelines["peak_memory_mib"].map(max),
        held=pipelines["in_flight_micro_batches"].map(max),
        micro_batches=pipelines["micro_batches"].fillna(1))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, column, label in ((axes[0], "fullest", "peak memory of the fullest stage (MiB)"),
                              (axes[1], "held", "most micro-batches a stage held at once")):
        for strategy, group in pipelines.groupby("strategy", sort=False):
            group = group.sort_values("micro_batches")
            ax.plot(group["micro_batches"], group[column], marker=strategy_marker(strategy),
                    color=strategy_colour(strategy), label=strategy)
        ax.set_xscale("log")
        ax.set_xlabel("micro-batches per step M (log scale)")
        ax.set_ylabel(label)
    axes[1].legend(loc="upper left", fontsize=8)  # few stages hold many: room there
    fig.suptitle(_title(pipelines, "Memory per schedule: the fullest stage (per rank, where it "
                                   "holds several) and the micro-batches held at once"),
                 fontsize=10)
    return fig


def plot_communication(frame: pd.DataFrame, collectives: list[dict] = ()):
    """Each data-parallel record's median step as compute (the same steps with communication
    off) plus the communication left exposed, per strategy and world size; for ddp, where
    `parbench collectives` measured the same ranks, the ideal step beside it: compute plus an
    all-reduce of its gradient at the measured bandwidth, with no overlap and with full."""
    measured = (frame[frame["compute_time_s"].notna()] if "compute_time_s" in frame
                else frame.iloc[0:0])
    if measured.empty:
        return None
    panels = _groups(measured)
    heights = [len(group) for _, group in panels]
    # Panels stacked, a horizontal bar per record, so that labels never collide.
    fig, axes = plt.subplots(len(panels), 1, squeeze=False, height_ratios=heights,
                             figsize=(11, 1.8 + 0.6 * sum(heights) + 0.6 * len(panels)))
    for ax, (name, group) in zip(axes[:, 0], panels, strict=True):
        y = np.arange(len(group))[::-1]  # the first measured on top
        compute = group["compute_time_s"].to_numpy(dtype=float)
        exposed = group["exposed_comm_time_s"].to_numpy(dtype=float)
        ax.barh(y, compute, 0.6, color=[strategy_colour(s) for s in group["strategy"]],
                label="compute (communication off)")
        ax.barh(y, np.clip(exposed, 0, None), 0.6, left=compute, color="white",
                edgecolor="black", hatch="//", label="exposed communication")
        longest = max(np.nanmax(compute), group["step_time_median_s"].max())
        for yi, (_, record) in zip(y, group.iterrows(), strict=True):
            allreduce = (measured_allreduce_s(list(collectives), record)
                         if strategies.allreduces_gradients(record["strategy"]) else None)
            if allreduce is not None:
                ideal = record["compute_time_s"] + allreduce
                longest = max(longest, ideal)
                ax.vlines(ideal, yi - 0.4, yi + 0.4, colors="black",
                          linestyles="--", label="ideal: compute + all-reduce, no overlap")
                ax.vlines(max(record["compute_time_s"], allreduce), yi - 0.4, yi + 0.4,
                          colors="black", linestyles=":", label="ideal: full overlap")
            gathered = record.get("allgather_bytes")
            text = (f"{record['exposed_comm_fraction']:.0%} exposed, "
                    f"{record['allreduce_bytes'] / 1e6:.0f} MB reduced"
                    + (f", {gathered / 1e6:.0f} MB gathered" if pd.notna(gathered) else ""))
            # Past the bar's end: compute can read longer than the step within the noise.
            end = max(record["step_time_median_s"], record["compute_time_s"])
            ax.annotate(text, (end, yi), textcoords="offset points", xytext=(4, 0),
                        va="center", fontsize=7)
        labels = [f"{config_label(r)} on {r['devices']}".replace("\n", " ")
                  for _, r in group.iterrows()]
        ax.set_yticks(y, [textwrap.fill(label, 40) for label in labels], fontsize=8)
        ax.set_xlabel("median step (s)")
        ax.set_title(name, fontsize=9)
        ax.set_xlim(0, 1.6 * longest)  # room for the labels past the bars
        ax.set_ylim(-0.6, len(group) - 0.4)
    legend = {}  # label -> handle, each entry once over every panel
    for ax in axes[:, 0]:
        handles, labels = ax.get_legend_handles_labels()
        legend.update(zip(labels, handles, strict=True))
    axes[0, 0].legend(legend.values(), legend.keys(), fontsize=8, loc="lower right")
    fig.suptitle(_title(measured, "Where a data-parallel step goes: compute, measured with "
                                  "communication off in the same run, and the communication "
                                  "it leaves exposed"), fontsize=10)
    return fig


def plot_collectives(rows: list[dict]):
    """Bus bandwidth of each collective against message size (nccl-tests' busbw)."""
    if not rows:
        return None
    frame = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(8, 5))
    for (name, devices, backend), group in frame.groupby(["collective", "devices", "backend"],
                                                         sort=False):
        group = group.sort_values("size_bytes")
        ax.plot(group["size_bytes"], group["busbw_gbps"], marker="o",
                label=f"{name} ({devices}, {backend})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes; all-gather's output, reduce-scatter's input)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    world = int(frame["world_size"].iloc[0])
    emulated = ("\nEMULATED: the ranks share one physical device"
                if frame["emulated"].astype(bool).any() else "")
    ax.set_title(f"Collective bandwidth on {world} ranks: busbw = size / time x 2(n-1)/n for "
                 f"all-reduce, x (n-1)/n for the others (nccl-tests){emulated}", fontsize=9)
    return fig


def _save(fig, out_dir: str | Path, name: str) -> Path:
    """out_dir/<name>.png and .svg, the figure closed; the PNG's path."""
    fig.tight_layout()
    for suffix in ("png", "svg"):
        fig.savefig(Path(out_dir) / f"{name}.{suffix}", dpi=110)
    plt.close(fig)
    return Path(out_dir) / f"{name}.png"


def write_collectives_figure(rows: list[dict], out_dir: str | Path) -> Path | None:
    """collectives.png and .svg in `out_dir`; its path (None without rows)."""
    fig = plot_collectives(rows)
    return None if fig is None else _save(fig, out_dir, "collectives")


def write_projection_figure(table: pd.DataFrame, out_dir: str | Path) -> Path | None:
    """projection.png and .svg: projected DDP efficiency against ranks, a line per link, with
    no overlap (solid) and full overlap (dashed); labelled PROJECTED throughout."""
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    for (link, model, batch), group in table.groupby(["link", "model", "batch_per_rank"],
                                                     sort=False):
        group = group.sort_values("ranks")
        label = f"{link}, {model} b{batch:g}/rank"
        [line] = ax.plot(group["ranks"], group["efficiency_no_overlap"], marker="o",
                         label=f"{label}: no overlap")
        ax.plot(group["ranks"], group["efficiency_full_overlap"], marker="o", linestyle="--",
                color=line.get_color(), label=f"{label}: full overlap")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(table["ranks"].unique()), [str(n) for n in sorted(table["ranks"]
                                                                           .unique())])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("data-parallel ranks")
    ax.set_ylabel("PROJECTED efficiency: compute / step")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title("PROJECTED, not measured: a DDP step at N ranks = measured compute + ring "
                 "all-reduce\nof the measured gradient bytes, 2(N-1)/N x bytes / bus "
                 "bandwidth (batch per rank fixed)", fontsize=9)
    return _save(fig, out_dir, "projection")


_PHASE_COLOURS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#8172b3"}


def plot_timeline(record: pd.Series):
    """One measured pipeline step as a Gantt chart: a row per stage, a bar per micro-batch's
    forward and backward, with the measured idle share beside the schedule's theory."""
    spans = record.get("timeline")
    if not isinstance(spans, list) or not spans:
        return None
    stages = int(max(s[0] for s in spans)) + 1
    length = max(s[4] for s in spans)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.6 * stages))
    several = any(len(s) > 5 for s in spans)  # rows are ranks holding several model stages
    for span in spans:
        stage, _, phase, begin, end = span[:5]
        ax.barh(stage, end - begin, left=begin, height=0.8, color=_PHASE_COLOURS[phase],
                edgecolor="white", linewidth=0.5)
        if end - begin > (0.04 if several else 0.025) * length:  # room for its label
            ax.text((begin + end) / 2, stage, span_label(span).replace(" ", "\n"),
                    ha="center", va="center", fontsize=6 if several else 7, color="white")
    row = "rank" if several else "stage"
    ax.set_yticks(range(stages), [f"{row} {k}" for k in range(stages)])
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the start of the step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in _PHASE_COLOURS.values()]
    present = [p for p in _PHASE_COLOURS if any(s[2] == p for s in spans)]
    ax.legend([handles[list(_PHASE_COLOURS).index(p)] for p in present],
              [PHASES[p] for p in present], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.0, 1.0))
    theory = record.get("bubble_fraction")
    theory = ("no closed form for this schedule" if theory is None or pd.isna(theory)
              else f"{theory:.0%}")
    held = (f" ({len({s[5] for s in spans if len(s) > 5})} model stages, s<k> in the labels)"
            if several else "")
    ax.set_title(
        f"{config_label(record).replace(chr(10), ' ')}: one measured step, "
        f"{int(record['micro_batches'])} micro-batches on {stages} {row}s{held}\nidle share "
        f"measured {record['measured_bubble_fraction']:.0%} mean, "
        f"{record['measured_bubble_fraction_worst']:.0%} worst {row}; the schedule's theory "
        f"{theory}" + ("; EMULATED devices" if record.get("emulated") else ""), fontsize=9)
    return fig


FIGURES = {
    "strategies": plot_strategies,
    "scaling": plot_scaling,
    "memory": plot_memory,
    "split_size": plot_split_sizes,
    "pipeline_memory": plot_pipeline_memory,
    "communication": plot_communication,
}


def write_figures(frame: pd.DataFrame, out_dir: str | Path,
                  collectives: list[dict] = ()) -> list[Path]:
    """Every figure the records can support, as out_dir/<name>.png and .svg; the PNGs'
    paths are returned. Only `ok` records are drawn; `collectives` (measured by `parbench
    collectives` on the same devices) add the ideal step to the communication figure."""
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    written = []
    if ok.empty:
        return written
    for name, draw in FIGURES.items():
        fig = plot_communication(ok, collectives) if draw is plot_communication else draw(ok)
        if fig is not None:
            written.append(_save(fig, out_dir, name))
    for _, record in ok.iterrows():  # a Gantt chart per pipeline record with a timeline
        fig = plot_timeline(record)
        if fig is not None:
            name = f"timeline-{int(record['config_index']):03d}-{record['strategy']}"
            written.append(_save(fig, out_dir, name))
    return written
