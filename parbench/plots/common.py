"""What every figure shares: a strategy's colour and marker, labels, titles that say EMULATED,
one panel per workload, the fastest setting of each strategy, and saving as PNG and SVG."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVGs

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from PIL import Image  # noqa: E402

from parbench import strategies  # noqa: E402
from parbench.families.workloads import CUDA_GRAPH_MODES, compile_text  # noqa: E402
from parbench.results.record import compile_variant  # noqa: E402

__all__ = ["best_settings", "compared_batch", "compile_label", "compile_labels", "config_label",
           "has_intervals", "interval_errors", "interval_of", "is_compiled", "make_axes",
           "options_text",
           "panel_groups", "plot_with_interval", "save_figure", "strategy_colour",
           "strategy_marker", "throughput_spread", "title", "with_interval", "workload_text"]


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
    (switches by name, `no static_graph` where one is turned off; keys no strategy takes,
    from older records, left out)."""
    specs = strategies.option_specs()
    return ", ".join(specs[k].text(v) for k, v in (options or {}).items()
                     if k in specs and v is not None)


def _true(value) -> bool:
    """True, numpy's too; not None, NaN or False (a record from before --compile)."""
    return bool(value == True)  # noqa: E712


def is_compiled(record: pd.Series) -> bool:
    """Whether the record's model ran compiled (--compile)."""
    return _true(record.get("compile"))


def compile_label(record: pd.Series) -> str:
    """How the record's model ran: `eager`, or compiled as labels name it (`compiled`, per
    block in torch's default mode; `compiled whole`; `compiled whole reduce-overhead`), with
    `(no CUDA graphs)` where a mode of CUDA graphs captured none (on a CPU, torch skips them).
    A record from before scopes and modes as `compile_variant` says."""
    variant = compile_variant(record.get("compile"), record.get("compile_scope"),
                              record.get("compile_mode"), record.get("timestamp_utc"))
    if variant is None:
        return "eager"
    label = compile_text(*variant)
    if variant[1] in CUDA_GRAPH_MODES and not _true(record.get("cuda_graphs")):
        label += " (no CUDA graphs)"
    return label


def compile_labels(frame: pd.DataFrame) -> pd.Series:
    """Per record, `compile_label` (`eager` where a record does not say)."""
    return pd.Series([compile_label(record) for _, record in frame.iterrows()],
                     index=frame.index, dtype=object)


def config_label(record: pd.Series) -> str:
    """`strategy (options)` for axis ticks, the options wrapped at 24 characters; `strategy
    compiled` (or how it was compiled: `compile_label`) where the record ran compiled, so that
    it is told apart from the same strategy eager or compiled otherwise."""
    name = record["strategy"] + (f" {compile_label(record)}" if is_compiled(record) else "")
    options = options_text(record.get("strategy_options"))
    if not options:
        return name
    return name + "\n" + textwrap.fill(f"({options})", 24)


def workload_text(frame: pd.DataFrame) -> str:
    parts = []
    for column, unit in (("model", ""), ("global_batch", "batch "), ("image_size", "")):
        values = sorted(frame[column].dropna().unique())
        if len(values) == 1:
            value = values[0]
            parts.append(f"{value}px" if column == "image_size" else f"{unit}{value}")
    precision = frame["precision"].dropna().unique()
    if len(precision) == 1:
        parts.append(str(precision[0]))
    labels = compile_labels(frame).unique()
    if len(frame) and "eager" not in labels:  # how, where every record compiled alike
        parts.append(labels[0] if len(labels) == 1 else "compiled")
    return ", ".join(parts)


def title(frame: pd.DataFrame, what: str) -> str:
    """What the figure shows, the workload, and whether the devices were emulated."""
    text = textwrap.fill(f"{what}: {workload_text(frame)}", 90)
    emulated = frame[frame["emulated"].astype(bool)]
    if len(emulated):
        physical = ", ".join(sorted(emulated["physical_devices"].astype(str).unique()))
        text += f"\nEMULATED: several logical devices on one physical device ({physical})"
    else:
        kinds = ", ".join(sorted(frame["device_kind"].dropna().astype(str).unique()))
        text += f"\nreal devices ({kinds})"
    return text


def compared_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `device_count`, `weak` and `batch`: the batch its records are compared at,
    the global batch, or under weak scaling the batch per device (runs stored before
    --scaling are strong)."""
    device_count = frame["devices"].astype(str).str.count(",") + 1
    weak = (frame["scaling"] == "weak") if "scaling" in frame else False
    return frame.assign(device_count=device_count, weak=weak,
                        batch=np.where(weak, frame["global_batch"] // device_count,
                                       frame["global_batch"]))


def panel_groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One panel per workload (model, batch, image size, precision, eager or compiled)
    present; under weak scaling the batch per device, so that its records on N devices share a
    panel. Eager and compiled records of a run that measured both (--compile on,off) are
    panels side by side, each with its own baselines, as are records compiled otherwise
    (--compile block,model, --compile-mode)."""
    compared = compared_batch(frame)
    frame = frame.assign(batch=[f"{b} per device" if weak else b
                                for b, weak in zip(compared["batch"], compared["weak"],
                                                   strict=True)],
                         compiled=compile_labels(frame))
    keys = ["model", "batch", "image_size", "precision", "compiled"]
    varying = [k for k in keys if frame[k].nunique() > 1]
    if not varying:
        return [("", frame)]
    panels = []
    for values, group in frame.groupby(varying, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        panels.append((", ".join(str(v) if k == "compiled" else f"{k} {v}"
                                 for k, v in zip(varying, values, strict=True)), group))
    return panels


def make_axes(count: int, width_per: float = 7.0, height: float = 5.5):
    """A figure with `count` panels: side by side up to two, then in rows of two (panels
    of long labels squeezed into one row overlap)."""
    columns = min(count, 2)
    rows = -(-count // columns)
    width = min(max(width_per * columns, 7.0), 18.0)
    fig, axes = plt.subplots(rows, columns, figsize=(width, height * rows), squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat)[:count]


def throughput_spread(record: pd.Series) -> tuple[float, float]:
    """Whiskers for a throughput: its 95% interval over trials where it was measured in
    several (`has_intervals`), else the per-step throughput at the p90 and fastest steps."""
    bounds = interval_of(record, "throughput_ips")
    if bounds:
        return bounds[0], bounds[1]
    batch = record["global_batch"]
    return batch / record["step_time_p90_s"], batch / record["step_time_min_s"]


def interval_of(record: pd.Series, name: str) -> list | None:
    """The record's 95% interval of `name` over trials, or None (one trial)."""
    intervals = record.get("intervals")
    return intervals.get(name) if isinstance(intervals, dict) else None


def with_interval(record: pd.Series, name: str, spec: str) -> str:
    """The record's `name` formatted by `spec`, with its 95% interval over trials where it has
    one: `0.82 [0.59, 1.14]`."""
    bounds = interval_of(record, name)
    text = format(record[name], spec)
    return text + (f" [{format(bounds[0], spec)}, {format(bounds[1], spec)}]" if bounds else "")


def has_intervals(frame: pd.DataFrame) -> bool:
    return "intervals" in frame and bool(frame["intervals"].map(
        lambda v: isinstance(v, dict) and bool(v)).any())


def plot_with_interval(ax, x, group: pd.DataFrame, name: str = "throughput_ips", **style):
    """A line of `group[name]` over `x` (labelled as `style` says), with whiskers of each
    point's 95% interval over trials where the records have them."""
    ax.plot(x, group[name], **style)
    errors = interval_errors(group, name)
    if errors is not None:
        ax.errorbar(x, group[name], yerr=errors, fmt="none", capsize=3,
                    ecolor=style.get("color"))


def interval_errors(group: pd.DataFrame, name: str) -> np.ndarray | None:
    """matplotlib's yerr (2 x N: below, above) from each record's interval of `name`; None
    where no record has one (a point without one gets no whisker)."""
    if not has_intervals(group):
        return None
    below, above = [], []
    for _, record in group.iterrows():
        bounds, value = interval_of(record, name), record[name]
        below.append(max(value - bounds[0], 0) if bounds else 0)
        above.append(max(bounds[1] - value, 0) if bounds else 0)
    return np.array([below, above])


def best_settings(frame: pd.DataFrame) -> pd.DataFrame:
    """Each strategy once per workload and number of devices: its fastest setting (sweeps
    have figures of their own), in the order first measured, with `settings_tried` (how many
    it was the fastest of). The baseline on the whole batch, every speedup's reference, is
    kept beside the baseline's fastest accumulating setting; a strategy compiled beside
    itself eager and compiled otherwise."""
    keys = [frame[column].astype(str) for column in ("model", "global_batch", "image_size",
                                                     "precision")]
    keys.append(compile_labels(frame))
    whole = (frame["strategy"] == strategies.BASELINE) & frame["strategy_options"].map(
        lambda options: not options)
    groups = [*keys, frame["strategy"], frame["devices"].astype(str).str.count(","), whole]
    tried = frame.groupby(groups, sort=False)["throughput_ips"].transform("size")
    best = frame.assign(settings_tried=tried).loc[
        frame.groupby(groups, sort=False)["throughput_ips"].idxmax()]
    return best.sort_index()


# Each figure's SVG twin beside its PNG (a vector copy for the reader; git keeps the PNG only,
# so a check that compares a report with the tracked files may leave the twins out).
SVG_TWINS = True


def save_figure(fig, out_dir: str | Path, name: str) -> Path:
    """out_dir/<name>.png and, with SVG_TWINS, .svg, the figure closed; the PNG's path."""
    fig.tight_layout()
    fig.set_dpi(110)
    fig.canvas.draw()  # the pixels savefig would encode, read from the canvas as they are
    drawn = Image.frombuffer("RGBA", fig.canvas.get_width_height(physical=True),
                             fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    # As 256 colours: a figure has a few dozen and their blends, and the file is a third the
    # size of matplotlib's own (the published runs' figures are most of the tracked tree).
    drawn.convert("RGB").quantize(256).save(Path(out_dir) / f"{name}.png", optimize=True)
    # No date and fixed ids: the same records draw the same file, so a run folder written
    # again can be compared with what is published.
    if SVG_TWINS:
        with plt.rc_context({"svg.hashsalt": "parbench"}):
            fig.savefig(Path(out_dir) / f"{name}.svg", dpi=110, metadata={"Date": None})
    plt.close(fig)
    return Path(out_dir) / f"{name}.png"
