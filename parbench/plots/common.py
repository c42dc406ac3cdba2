"""What every figure shares: one colour-blind-safe palette (Okabe and Ito's), each strategy's
colour, marker and line style from it, labels, one-line titles that say EMULATED, one panel
per workload, the fastest setting of each strategy, whiskers only where an interval was
measured, and saving as PNG and SVG."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only, never a window
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable SVGs

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from cycler import cycler  # noqa: E402
from PIL import Image  # noqa: E402

from parbench import strategies  # noqa: E402
from parbench.families.workloads import CUDA_GRAPH_MODES, compile_text  # noqa: E402
from parbench.results.record import compile_variant  # noqa: E402

__all__ = ["BASELINE_STYLE", "LINE_STYLES", "MARKERS", "PALETTE", "REFERENCE_COLOUR", "Style",
           "bar_style", "best_settings", "compared_batch", "compile_label", "compile_labels",
           "config_label", "device_count", "device_text", "has_intervals", "interval_errors",
           "interval_of", "is_compiled", "make_axes", "one_trial_note", "options_text",
           "panel_groups", "plot_with_interval", "real_devices", "save_figure",
           "strategy_colour", "strategy_hatch", "strategy_marker", "strategy_style",
           "throughput_spread", "title", "with_interval", "workload_text"]

# Okabe and Ito's qualitative palette ("Color Universal Design", 2008), told apart by readers
# of every common colour-vision deficiency; black is kept for the baseline (single) and the
# yellow (#F0E442) left out: too pale a line on white. Colours repeat past six strategies and
# many fall together in greyscale, so each strategy also has a marker and a line style of its
# own: no two strategies share all three, and none shares a marker.
PALETTE = ("#E69F00",  # orange
           "#56B4E9",  # sky blue
           "#009E73",  # bluish green
           "#0072B2",  # blue
           "#D55E00",  # vermillion
           "#CC79A7")  # reddish purple
REFERENCE_COLOUR = "#000000"  # single, and the reference lines (1x, the ideal)
# Each strategy's marker; "o" is the baseline's (BASELINE_STYLE).
MARKERS = ("s", "^", "v", "<", ">", "D", "d", "P", "X", "8", "h", "*", "p", "H", "x", "+")
LINE_STYLES = ("-", "--", "-.", ":")
# Every default colour (lines and bars a figure draws without a strategy's) from the palette.
matplotlib.rcParams["axes.prop_cycle"] = cycler(color=[REFERENCE_COLOUR, *PALETTE])


class Style(NamedTuple):
    """How a strategy is drawn in every figure."""

    colour: str
    marker: str
    linestyle: str

    def line(self) -> dict:
        """matplotlib's keywords for a line drawn in this style."""
        return {"color": self.colour, "marker": self.marker, "linestyle": self.linestyle}

    @property
    def hatch(self) -> str:
        """A bar's hatching, from the line style: what tells two bars of one colour apart, and
        bars in greyscale."""
        return {"-": "", "--": "//", "-.": "\\\\", ":": "--"}[self.linestyle]


BASELINE_STYLE = Style(REFERENCE_COLOUR, "o", "-")
_UNKNOWN = Style("#7F7F7F", ".", ":")  # a strategy no longer registered (older records)


def strategy_style(name: str) -> Style:
    """A strategy's style in every figure, from its place in the registry: the baseline
    black, the others the palette's six colours in turn, solid, then dashed, then dash-dot
    (six strategies a line style), each with a marker of its own."""
    if name == strategies.BASELINE:
        return BASELINE_STYLE
    others = [n for n in strategies.REGISTRY if n != strategies.BASELINE]
    if name not in others:
        return _UNKNOWN
    index = others.index(name)
    return Style(PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)],
                 LINE_STYLES[(index // len(PALETTE)) % len(LINE_STYLES)])


def strategy_colour(name: str) -> str:
    """A strategy's colour (`strategy_style`), in every figure (unknown names grey)."""
    return strategy_style(name).colour


def strategy_hatch(name: str) -> str:
    """A strategy's bars' hatching (`Style.hatch`)."""
    return strategy_style(name).hatch


def bar_style(names) -> dict:
    """matplotlib's keywords for bars of these strategies: each in its colour and hatching,
    edged in black, whiskers grey (seen on a black bar as on a pale one)."""
    return {"color": [strategy_colour(n) for n in names],
            "hatch": [strategy_hatch(n) for n in names], "edgecolor": "black",
            "linewidth": 0.5, "error_kw": {"ecolor": "0.45", "elinewidth": 1.2}}


def strategy_marker(name: str) -> str:
    """A strategy's marker (`strategy_style`; unknown names a dot)."""
    return strategy_style(name).marker


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


def device_count(frame: pd.DataFrame) -> pd.Series:
    """Per record, the logical devices it used."""
    return frame["devices"].astype(str).str.count(",") + 1


def real_devices(frame: pd.DataFrame) -> bool:
    """Whether every record ran on devices of its own (none emulated: an ideal of N devices
    means something only there)."""
    return bool(len(frame)) and not frame["emulated"].fillna(False).astype(bool).any()


def device_text(frame: pd.DataFrame) -> str:
    """`EMULATED: 2 devices on one cpu` where logical devices shared a physical one, else the
    kinds of device (`cuda`)."""
    emulated = frame[frame["emulated"].fillna(False).astype(bool)]
    if len(emulated):
        counts = "/".join(str(n) for n in sorted(device_count(emulated).unique()))
        physical = ", ".join(sorted(emulated["physical_devices"].astype(str).unique()))
        return f"EMULATED: {counts} devices on one {physical}"
    kinds = ", ".join(sorted(frame["device_kind"].dropna().astype(str).unique())) \
        if "device_kind" in frame else ""
    return f"real devices ({kinds})" if kinds else "real devices"


def title(frame: pd.DataFrame, what: str) -> str:
    """One line: what the figure shows, the workload, and whether the devices were emulated
    (what the marks mean goes to the axes and the legend, not here)."""
    return f"{what}: {workload_text(frame)}; {device_text(frame)}"


def compared_batch(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `device_count`, `weak` and `batch`: the batch its records are compared at,
    the global batch, or under weak scaling the batch per device (runs stored before
    --scaling are strong)."""
    counts = device_count(frame)
    weak = (frame["scaling"] == "weak") if "scaling" in frame else False
    return frame.assign(device_count=counts, weak=weak,
                        batch=np.where(weak, frame["global_batch"] // counts,
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
    width = min(max(width_per * columns, 9.0), 18.0)  # room for a one-line title
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


def one_trial_note(group: pd.DataFrame, name: str) -> str:
    """What a legend says of a line's points measured in one trial (drawn without whiskers:
    there is no interval to draw): ` (one trial)` where none has one, ` (one trial at x, ...)`
    naming the points where some lack one (`x` from `group["x"]` where present), else ``."""
    lacking = [interval_of(record, name) is None for _, record in group.iterrows()]
    if not any(lacking):
        return ""
    if all(lacking):
        return " (one trial)"
    if "x" not in group:
        return f" ({sum(lacking)} points one trial)"
    return " (one trial at " + ", ".join(f"{x:g}" for x, lack in zip(group["x"], lacking,
                                                                       strict=True) if lack) + ")"


def plot_with_interval(ax, x, group: pd.DataFrame, name: str = "throughput_ips", **style):
    """A line of `group[name]` over `x` (labelled as `style` says), with whiskers of each
    point's 95% interval over trials; a point measured in one trial has none (no interval
    promised where none was measured), and the label says so (`one_trial_note`)."""
    label = style.pop("label", None)
    if label is not None:
        label += one_trial_note(group if "x" in group else group.assign(x=np.asarray(x)),
                                name)
    ax.plot(x, group[name], label=label, **style)
    errors = interval_errors(group, name)
    if errors is not None:
        ax.errorbar(x, group[name], yerr=errors, fmt="none", capsize=3,
                    ecolor=style.get("color"))


def interval_errors(group: pd.DataFrame, name: str) -> np.ndarray | None:
    """matplotlib's yerr (2 x N: below, above) from each record's interval of `name`; None
    where no record has one. A point without one (one trial) gets NaN: no whisker and no
    cap, rather than a cap at the point that reads as a tight interval."""
    if not has_intervals(group):
        return None
    below, above = [], []
    for _, record in group.iterrows():
        bounds, value = interval_of(record, name), record[name]
        below.append(max(value - bounds[0], 0) if bounds else np.nan)
        above.append(max(bounds[1] - value, 0) if bounds else np.nan)
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
