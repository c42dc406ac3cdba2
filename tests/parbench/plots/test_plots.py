"""Figures from a small results fixture: files written, the expected series drawn."""

import json
from dataclasses import replace

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from parbench import plots
from parbench.drive.runner import add_comparisons
from parbench.results.folder import read_results
from parbench.results.record import Record
from tests.support import ok_record


def _record(strategy, devices, throughput, split=None, stages=None, peaks=None, **options):
    count = devices.count(",") + 1
    step = 8 / throughput
    return ok_record(
        strategy, strategy_options=options, devices=devices, physical_devices="cpu",
        emulated=count > 1, split_size=split, stages=stages,
        micro_batches=-(-8 // split) if split else 1,
        throughput_ips=throughput, step_time_median_s=step, step_time_p90_s=step * 1.1,
        step_time_min_s=step * 0.9, peak_memory_mib=peaks or [100.0] * count,
        memory_imbalance=max(peaks or [1]) / (sum(peaks or [1]) / len(peaks or [1])),
        memory_source="tensors per logical device", warmup_steps=1, measured_steps=3,
        data="synthetic")


@pytest.fixture
def results(tmp_path):
    records = [
        _record("single", "cpu", 10.0),
        _record("single", "cpu", 12.0, split=2, accumulation_split=2),
        _record("model-parallel", "cpu,cpu", 9.0, stages=2, peaks=[150.0, 50.0]),
        _record("pipeline", "cpu,cpu", 14.0, split=2, stages=2, split_size=2),
        _record("pipeline", "cpu,cpu", 16.0, split=4, stages=2, split_size=4),
        _record("pipeline-1f1b", "cpu,cpu", 15.0, split=2, stages=2, split_size=2),
        _record("pipeline-1f1b", "cpu,cpu", 17.0, split=4, stages=2, split_size=4),
        _record("ddp", "cpu", 9.5, world_size=1),
        _record("ddp", "cpu,cpu", 17.1, world_size=2),
        Record(status="skipped", strategy="data-parallel", devices="cpu,cpu",
                   model="resnet18", image_size=32, global_batch=8, reason="needs CUDA"),
    ]
    add_comparisons(records)
    folder = tmp_path / "20261121T000000Z-fixture"
    folder.mkdir()
    (folder / "records.json").write_text(json.dumps([r.to_dict() for r in records]))
    return folder


def test_every_figure_is_written_as_png_and_svg(results):
    frame, folder = read_results([results])
    written = plots.write_figures(frame, folder)
    assert [p.name for p in written] == ["throughput-by-strategy.png",
                                         "throughput-by-devices.png",
                                         "peak-memory-by-device.png",
                                         "speedup-by-micro-batch.png"]
    for path in written:
        assert path.stat().st_size > 10_000
        assert path.with_suffix(".svg").read_text().lstrip().startswith("<?xml")


def test_the_comparison_draws_each_strategy_once_at_its_best_in_its_colour(results):
    frame, _ = read_results([results])
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    fig = plots.plot_strategies(ok)
    bars = fig.axes[0].patches
    # single whole (10), the speedups' reference, beside its best accumulating (12), though
    # slower; pipeline split 2 (14) or 4 (16): 16; ddp once per device count.
    best = {("pipeline", 14.0): 16.0, ("pipeline-1f1b", 15.0): 17.0}
    drawn = ok[[best.get((s, t), t) == t for s, t in zip(ok["strategy"], ok["throughput_ips"],
                                                          strict=True)]]
    assert [round(b.get_width(), 6) for b in bars] == list(drawn["throughput_ips"])
    assert [to_rgb(b.get_facecolor()) for b in bars] == [
        to_rgb(plots.strategy_colour(s)) for s in drawn["strategy"]]
    # A horizontal bar each, the first measured on top, labelled on its left.
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "pipeline (split=4), best of 2" in labels
    assert [b.get_y() for b in bars] == sorted((b.get_y() for b in bars), reverse=True)
    assert "EMULATED" in fig._suptitle.get_text()
    assert fig.axes[0].get_xlabel().startswith("throughput (images/s); one trial; whiskers: "
                                               "p90 step to fastest step")
    plt.close(fig)


def test_the_scaling_curve_has_efficiency_labels_and_no_ideal_on_emulated_devices(results):
    frame, _ = read_results([results])
    fig = plots.plot_scaling(frame[frame["status"] == "ok"])
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ddp (one trial)"].get_ydata()) == [9.5, 17.1]
    # Two logical devices sharing one cpu can never do twice the work: no ideal promised.
    assert not any("ideal" in label and not label.startswith("no ideal") for label in lines)
    assert "no ideal N x T(1): emulated devices share one physical device" in lines
    assert {t.get_text() for t in ax.texts} == {f"{17.1 / 19.0:.2f}"}  # N = 1 is 1 anyway
    # One trial: no whisker (no interval was measured), and the title is one line.
    assert not [c for c in ax.containers if hasattr(c, "has_yerr")]
    assert "\n" not in fig._suptitle.get_text()
    assert "EMULATED: 2 devices on one cpu" in fig._suptitle.get_text()
    plt.close(fig)


def test_the_ideal_is_drawn_on_real_devices_and_whiskers_only_where_intervals_are():
    records = [replace(_record("ddp", devices, throughput, world_size=n), emulated=False,
                       physical_devices=devices, device_kind="cuda", scaling_efficiency=eff)
               for devices, throughput, n, eff in (("cuda:0", 10.0, 1, 1.0),
                                                   ("cuda:0,cuda:1", 18.0, 2, 0.9))]
    records[0].intervals = {"throughput_ips": [9.0, 11.0]}  # three trials; the other one
    fig = plots.plot_scaling(pd.DataFrame([r.to_dict() for r in records]))
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ddp (one trial at 2)"].get_ydata()) == [10.0, 18.0]
    assert list(lines["ddp: ideal N x T(1)"].get_ydata()) == [10.0, 20.0]
    [whiskers] = [c for c in ax.containers if c.has_yerr]
    assert _spans(whiskers) == [(9.0, 11.0)]  # none at N = 2, measured once
    assert "EMULATED" not in fig._suptitle.get_text()
    plt.close(fig)


def test_memory_bars_show_each_device_and_the_imbalance(results):
    frame, _ = read_results([results])
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    fig = plots.plot_memory(ok)
    ax = fig.axes[0]
    # Each strategy once per device count, at its fastest setting: a bar per device.
    best = plots.best_settings(ok)
    assert len(best) < len(ok)
    assert [round(b.get_width(), 6) for b in ax.patches] == [
        peak for peaks in best["peak_memory_mib"] for peak in peaks]
    assert "1.50" in {t.get_text() for t in ax.texts}  # 150 vs 50 MiB: max / mean
    assert ax.get_xlabel().startswith("peak memory per device (MiB)")
    plt.close(fig)


def _spans(container) -> list[tuple[float, float]]:
    """The (low, high) of each whisker an errorbar container draws (none for a NaN error)."""
    [segments] = container.lines[2]
    return [tuple(map(float, s[:, 1])) for s in segments.get_segments() if len(s)]


def _whiskers(ax, label):
    """The (low, high) of each whisker drawn for the line labelled `label` (its colour)."""
    [line] = [line for line in ax.get_lines() if line.get_label() == label]
    return [span for c in ax.containers if c.has_yerr
            and to_rgb(c.lines[2][0].get_colors()[0]) == to_rgb(line.get_color())
            for span in _spans(c)]


def test_the_hero_draws_each_records_speedup_with_its_interval_by_split_size(results):
    frame, _ = read_results([results])
    ok = frame[frame["status"] == "ok"].reset_index(drop=True)
    pipeline = ok["strategy"] == "pipeline"
    ok.loc[pipeline, "intervals"] = pd.Series(
        [{"speedup_vs_baseline": [1.2, 1.6]}, {"speedup_vs_baseline": [1.4, 1.8]}],
        index=ok.index[pipeline])
    fig = plots.plot_split_sizes(ok)
    main, theory = fig.axes
    lines = {line.get_label(): line for line in main.get_lines()}
    # y: each record's speedup over single on the whole batch, as the records carry it.
    for label, strategy in (("pipeline", "pipeline"), ("pipeline-1f1b (one trial)",
                                                       "pipeline-1f1b")):
        speedups = ok[ok["strategy"] == strategy].sort_values("split_size")
        assert list(lines[label].get_ydata()) == list(speedups["speedup_vs_baseline"])
    accumulating = lines["single accumulating the same micro-batches (one trial)"]
    assert list(accumulating.get_ydata()) == [pytest.approx(12.0 / 10.0)]
    # x: the measured split sizes (2, 4) as evenly spaced categories, each line nudged
    # within its category; ticks name the sizes. No log axis.
    assert main.get_xscale() == "linear"
    assert [round(x) for x in lines["pipeline"].get_xdata()] == [0, 1]
    assert [t.get_text() for t in theory.get_xticklabels()] == ["2\n(M=4)", "4\n(M=2)"]
    # Whiskers: the pipeline's intervals; the one-trial lines have none.
    assert _whiskers(main, "pipeline") == [(1.2, 1.6), (1.4, 1.8)]
    assert _whiskers(main, "pipeline-1f1b (one trial)") == []
    # 1x is single; no ideal of 2x: the two devices are emulated on one cpu.
    assert list(lines["single, whole batch (1x)"].get_ydata()) == [1.0, 1.0]
    assert not [label for label in lines if label.startswith("ideal")]
    # Distinct markers and line styles per series.
    drawn = [lines[k] for k in lines if "accumulating" in k or k.startswith("pipeline")]
    assert len({(line.get_marker(), line.get_linestyle(), line.get_color())
                for line in drawn}) == len(drawn)
    # GPipe's bubble in a panel of its own (no twin axis): split 4 of 8, M = 2: 1/3.
    [curve] = theory.get_lines()
    assert curve.get_label() == "K=2 stages"
    assert list(curve.get_ydata()) == [pytest.approx(1 / 5), pytest.approx(1 / 3)]
    assert "\n" not in fig._suptitle.get_text()
    assert fig._suptitle.get_text() == ("Speedup over single by micro-batch size: resnet18, "
                                        "batch 8, 32px, fp32; EMULATED: 2 devices on one cpu")
    plt.close(fig)


def test_the_hero_draws_the_ideal_where_the_devices_are_real(results):
    frame, _ = read_results([results])
    ok = frame[frame["status"] == "ok"].reset_index(drop=True).assign(emulated=False)
    fig = plots.plot_split_sizes(ok)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["ideal: 2x on 2 devices"].get_ydata()) == [2, 2]
    plt.close(fig)


def test_every_strategy_has_a_style_of_its_own_in_one_colour_blind_safe_palette():
    from parbench import strategies
    from parbench.plots.common import PALETTE, REFERENCE_COLOUR, strategy_style

    styles = [strategy_style(name) for name in strategies.names()]
    assert len(set(styles)) == len(styles)
    assert len({style.marker for style in styles}) == len(styles)
    assert {style.colour for style in styles} <= {*PALETTE, REFERENCE_COLOUR}
    # Okabe and Ito's, less its yellow: six colours, black for the baseline.
    assert PALETTE == ("#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7")
    assert strategy_style("single").colour == REFERENCE_COLOUR


def test_no_figure_needs_data_it_does_not_have(results):
    frame, _ = read_results([results])
    single = frame[frame["strategy"] == "single"]
    assert plots.plot_scaling(single) is None
    assert plots.plot_split_sizes(single) is None
    # pipelines at two split sizes, measured without single on the whole batch: no speedup
    pipelines = frame[frame["strategy"] == "pipeline"].assign(speedup_vs_baseline=None)
    assert plots.plot_split_sizes(pipelines) is None


def test_a_timeline_is_drawn_as_a_gantt_chart_with_a_bar_per_action():
    import pandas as pd

    spans = [[0, 0, "F", 0.0, 1.0], [1, 0, "F", 1.0, 2.0], [1, 0, "B", 2.0, 4.0],
             [0, 0, "B", 4.0, 5.0]]
    record = pd.Series(_record("pipeline", "cpu,cpu", 8.0, split=8, stages=2).to_dict())
    record["timeline"], record["config_index"] = spans, 3
    record["measured_bubble_fraction"], record["measured_bubble_fraction_worst"] = 0.5, 0.6
    record["bubble_fraction"] = 0.5
    fig = plots.plot_timeline(record)
    ax = fig.axes[0]
    assert [(b.get_x(), b.get_width()) for b in ax.patches] == [(0, 1), (1, 1), (2, 2), (4, 1)]
    assert "measured 50% mean, 60% worst stage; the schedule's theory 50%" in ax.get_title()
    plt.close(fig)
    assert plots.plot_timeline(pd.Series({"timeline": None})) is None


def test_a_gantt_row_per_rank_labels_which_of_its_model_stages_ran():
    import pandas as pd

    spans = [[0, 0, "F", 0.0, 1.0, 0], [1, 0, "F", 1.0, 2.0, 1], [1, 0, "F", 2.0, 3.0, 2],
             [0, 0, "F", 3.0, 4.0, 3]]  # a V: rank 0 holds stages 0 and 3, rank 1 1 and 2
    record = pd.Series(_record("pipeline", "cpu,cpu", 8.0, split=8, stages=2).to_dict())
    record["timeline"], record["config_index"] = spans, 3
    record["measured_bubble_fraction"], record["measured_bubble_fraction_worst"] = 0.5, 0.5
    record["bubble_fraction"] = None
    fig = plots.plot_timeline(record)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["F0\ns0", "F0\ns1", "F0\ns2", "F0\ns3"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert "2 ranks (4 model stages" in ax.get_title()
    assert "no closed form for this schedule" in ax.get_title()
    plt.close(fig)


def test_pipeline_memory_shows_each_stage_with_the_micro_batches_it_held():
    import pandas as pd

    records = [_record("pipeline-gpipe", "cpu,cpu", 8.0, split=2, stages=2,
                       peaks=[300.0, 200.0]).to_dict(),
               _record("pipeline-1f1b", "cpu,cpu", 8.0, split=2, stages=2,
                       peaks=[150.0, 100.0]).to_dict()]
    records[0]["in_flight_micro_batches"], records[1]["in_flight_micro_batches"] = [4, 4], [2, 1]
    fig = plots.plot_pipeline_memory(pd.DataFrame(records))
    fullest, held = fig.axes
    # Against M (4 micro-batches of 2): the fullest stage's peak, and the most it held.
    assert {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in fullest.get_lines()} == {"pipeline-gpipe": ([4], [300.0]),
                                                 "pipeline-1f1b": ([4], [150.0])}
    assert [list(line.get_ydata()) for line in held.get_lines()] == [[4], [2]]
    plt.close(fig)


def test_the_communication_figure_stacks_compute_and_exposed_communication():
    import dataclasses

    import pandas as pd

    ddp = dataclasses.replace(_record("ddp", "cpu,cpu", 8.0, world_size=2), compute_time_s=0.75,
                              exposed_comm_time_s=0.25, exposed_comm_fraction=0.25,
                              allreduce_bytes=44_726_568)
    fig = plots.plot_communication(pd.DataFrame([ddp.to_dict(), _record("single", "cpu", 9.0)
                                                 .to_dict()]))
    ax = fig.axes[0]
    assert [(b.get_x(), b.get_width()) for b in ax.patches] == [(0, 0.75), (0.75, 0.25)]
    assert [t.get_text() for t in ax.texts] == ["25% exposed, 45 MB reduced"]
    plt.close(fig)
    assert plots.plot_communication(pd.DataFrame([_record("single", "cpu", 9.0).to_dict()])) \
        is None


def test_one_ranks_extra_time_is_drawn_and_told_as_the_wrappers_overhead():
    """With one rank no byte crosses a link: the step past its compute is the wrapper's
    overhead, in the figure and in the answers, beside a record of two ranks' communication."""
    import dataclasses

    from parbench.reporting.answers import _communication_lines

    one = dataclasses.replace(_record("ddp", "cpu", 10.0, world_size=1), compute_time_s=0.6,
                              wrapper_overhead_time_s=0.2, wrapper_overhead_fraction=0.25,
                              allreduce_bytes=44_726_568)
    two = dataclasses.replace(_record("ddp", "cpu,cpu", 8.0, world_size=2), compute_time_s=0.75,
                              exposed_comm_time_s=0.25, exposed_comm_fraction=0.25,
                              allreduce_bytes=44_726_568)
    frame = pd.DataFrame([one.to_dict(), two.to_dict()])
    fig = plots.plot_communication(frame)
    ax = fig.axes[0]
    # Compute, then overhead (one rank) or exposed communication (two ranks), at their shares
    # of the step (0.8 s and 1 s).
    assert [(round(b.get_x(), 6), round(b.get_width(), 6)) for b in ax.patches] == [
        (0, 0.6), (0, 0.75), (0.75, 0.25), (0.6, 0.2)]
    assert [t.get_text() for t in ax.texts] == [
        "25% wrapper overhead (one rank: no byte crosses a link)", "25% exposed, 45 MB reduced"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "wrapper overhead (one rank: no communication)" in legend
    assert "exposed communication" in legend
    assert "the wrapper's overhead, not communication" in fig._suptitle.get_text()
    plt.close(fig)
    [overhead, exposed] = _communication_lines(frame)
    assert "compute 0.6 s + wrapper overhead 0.2 s (25%); one rank: no byte crosses" in overhead
    assert "exposed communication" not in overhead
    assert "compute 0.75 s + exposed communication 0.25 s (25%)" in exposed


def test_weak_scaling_draws_one_line_per_batch_per_device():
    import dataclasses

    import pandas as pd

    records = [dataclasses.replace(_record("ddp", devices, throughput, world_size=n),
                                   global_batch=8 * n, scaling="weak", scaling_efficiency=eff)
               for devices, throughput, n, eff in (("cpu", 10.0, 1, 1.0),
                                                   ("cpu,cpu", 18.0, 2, 0.9))]
    fig = plots.plot_scaling(pd.DataFrame([r.to_dict() for r in records]))
    ax = fig.axes[0]
    [measured, note] = ax.get_lines()  # emulated: no ideal line, a note in its place
    assert list(measured.get_ydata()) == [10.0, 18.0] and len(note.get_ydata()) == 0
    assert "weak scaling" in fig._suptitle.get_text()
    plt.close(fig)
    # Their global batches differ (8, 16), but they share one panel: the batch per device.
    split = [dataclasses.replace(r, compute_time_s=0.5, exposed_comm_time_s=0.1,
                                 exposed_comm_fraction=0.1 / 0.6, allreduce_bytes=44_726_568)
             for r in records]
    fig = plots.plot_communication(pd.DataFrame([r.to_dict() for r in split]))
    [ax] = fig.axes
    assert len(ax.patches) == 4  # compute and exposed, for N = 1 and N = 2
    plt.close(fig)


def test_memory_of_two_kinds_is_never_compared_across_them(results):
    """One GPU emulating two: single and ddp give allocator peaks, the one-process pipeline
    counted tensors (no cuDNN workspace, input batch or transient gradients). The answer names
    the leanest of each kind apart, and the figure labels each bar's kind."""
    from parbench.reporting.answers import answers

    allocator = "cuda max_memory_allocated per physical device"
    records = [_record("single", "cuda:0", 10.0, peaks=[900.0]),
               _record("ddp", "cuda:0,cuda:0", 17.0, peaks=[700.0, 700.0], world_size=2),
               _record("pipeline", "cuda:0,cuda:0", 14.0, split=2, stages=2, split_size=2,
                       peaks=[300.0, 200.0])]
    for record in records:
        record.peak_memory_max_mib = max(record.peak_memory_mib)
    for record in records[:2]:
        record.memory_source = allocator
    add_comparisons(records)
    frame = pd.DataFrame([r.to_dict() for r in records])
    [_, two] = answers(frame)
    assert ("least memory on its fullest device, among figures of one kind only (not "
            "comparable across kinds): ddp (N=2) at 700 MiB (max/mean 1.00; allocator peaks); "
            "pipeline (split=2) at 300 MiB") in two
    assert two.endswith("tensors counted)")
    fig = plots.plot_memory(frame)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.endswith("(tensors counted)") for label in labels)
    assert "not comparable across kinds" in fig.axes[0].get_xlabel()
    plt.close(fig)
    [_, alone] = answers(frame.assign(memory_source=allocator))
    assert alone.endswith("least memory on its fullest device pipeline (split=2) at 300 MiB "
                          "(max/mean 1.20; allocator peaks)")


def test_eager_and_compiled_are_panels_side_by_side_each_with_its_baselines(tmp_path):
    """`--compile on,off`: the same strategies eager and compiled, told apart in labels and
    drawn in panels of their own, each against its own single and accumulating single."""
    from dataclasses import replace

    def both(strategy, devices, throughput, **fields):
        eager = _record(strategy, devices, throughput, **fields)
        return [replace(eager, compile=False),
                replace(_record(strategy, devices, 2 * throughput, **fields), compile=True)]

    records = [*both("single", "cpu", 10.0),
               *both("single", "cpu", 12.0, split=2, accumulation_split=2),
               *both("pipeline", "cpu,cpu", 14.0, split=2, stages=2, split_size=2),
               *both("pipeline", "cpu,cpu", 16.0, split=4, stages=2, split_size=4)]
    add_comparisons(records)
    (tmp_path / "records.json").write_text(json.dumps([r.to_dict() for r in records]))
    frame, _ = read_results([tmp_path])
    fig = plots.plot_split_sizes(frame)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["eager", "compiled"]
    for ax in panels:
        lines = {line.get_label(): line for line in ax.get_lines()}
        # Each against its own single: the same speedups in both panels.
        accumulating = lines["single accumulating the same micro-batches (one trial)"]
        assert list(accumulating.get_ydata()) == [pytest.approx(1.2)]
        assert list(lines["pipeline (one trial)"].get_ydata()) == [pytest.approx(1.4),
                                                                   pytest.approx(1.6)]
    plt.close(fig)
    fig = plots.plot_strategies(frame)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert "pipeline compiled (split=4), best of 2" in labels
    assert "pipeline (split=4), best of 2" in labels
    plt.close(fig)
    from parbench.plots.common import title

    assert title(frame[frame["compile"] == True], "what").startswith(  # noqa: E712
        "what: resnet18, batch 8, 32px, fp32, compiled")


def test_two_ranks_emulated_on_one_h200_draw_no_ideal_and_no_whiskers():
    """The H200 reference's data-parallel run: ddp and fsdp on cuda:0,cuda:0, one trial each.
    Its figure promises neither twice one GPU's throughput nor an interval."""
    from tests.gpu_run_files import H200_DATA_PARALLEL, RESULTS

    frame, _ = read_results([RESULTS / H200_DATA_PARALLEL])
    fig = plots.plot_scaling(frame[frame["status"] == "ok"])
    [ax] = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["ddp (one trial)", "fsdp (one trial)",
                      "no ideal N x T(1): emulated devices share one physical device"]
    assert not [c for c in ax.containers if getattr(c, "has_yerr", False) and _spans(c)]
    plt.close(fig)


def test_a_panel_of_one_trial_each_in_a_run_with_intervals_has_bars_without_whiskers():
    """Two workloads, one measured in trials (intervals), the other once: each its own panel;
    the second's bars drawn without whiskers rather than failing on the first's."""
    trials = _record("single", "cpu", 10.0)
    trials.intervals = {"throughput_ips": [9.0, 11.0]}
    once = replace(_record("single", "cpu", 20.0), image_size=64)
    fig = plots.plot_strategies(pd.DataFrame([r.to_dict() for r in (trials, once)]))
    widths = sorted(round(patch.get_width(), 6) for ax in fig.axes for patch in ax.patches)
    assert widths == [10.0, 20.0]
    plt.close(fig)
