"""Figures from a small results fixture: files written, the expected series drawn."""

import json

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
    assert [p.name for p in written] == ["strategies.png", "scaling.png", "memory.png",
                                         "split_size.png"]
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
    assert fig.axes[0].get_xlabel() == "throughput (images/s)"
    plt.close(fig)


def test_the_scaling_curve_has_the_ideal_line_and_efficiency_labels(results):
    frame, _ = read_results([results])
    fig = plots.plot_scaling(frame[frame["status"] == "ok"])
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ddp"].get_ydata()) == [9.5, 17.1]
    assert list(lines["ddp: ideal N x T(1)"].get_ydata()) == [9.5, 19.0]
    assert {t.get_text() for t in ax.texts} == {f"{17.1 / 19.0:.2f}"}  # N = 1 is 1 anyway
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
    assert ax.get_xlabel() == "peak memory per device (MiB)"
    plt.close(fig)


def test_the_split_size_figure_overlays_the_theoretical_bubble(results):
    frame, _ = read_results([results])
    fig = plots.plot_split_sizes(frame[frame["status"] == "ok"])
    main, bubble = fig.axes
    labels = [line.get_label() for line in main.get_lines()]
    assert labels[:3] == ["pipeline", "pipeline-1f1b",
                          "single accumulating the same micro-batches"]
    accumulating = main.get_lines()[2]
    # At split 2, nudged sideways (at most 8% on the log axis) to keep its whiskers apart.
    assert list(accumulating.get_ydata()) == [12.0]
    assert 2 < accumulating.get_xdata()[0] <= 2 * 1.08 and {
        line.get_xdata()[0] for line in main.get_lines()[:3]} != {2}
    [curve] = bubble.get_lines()
    assert "(K-1)/(M+K-1), K=2" in curve.get_label()
    # split 4 of a batch of 8: M = 2, bubble (2-1)/(2+2-1) = 1/3
    x, y = curve.get_data()
    assert y[list(x).index(4)] == pytest.approx(1 / 3)
    plt.close(fig)


def test_no_figure_needs_data_it_does_not_have(results):
    frame, _ = read_results([results])
    single = frame[frame["strategy"] == "single"]
    assert plots.plot_scaling(single) is None
    assert plots.plot_split_sizes(single) is None


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
    [measured, ideal] = ax.get_lines()
    assert list(measured.get_ydata()) == [10.0, 18.0] and list(ideal.get_ydata()) == [10, 20]
    assert "weak scaling: the batch per device fixed" in fig._suptitle.get_text()
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
    assert "not comparable across kinds" in fig._suptitle.get_text()
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
    for ax, scale in zip(panels, (1, 2), strict=True):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines["single accumulating the same micro-batches"].get_ydata()) == [
            12.0 * scale]
        assert list(lines["pipeline"].get_ydata()) == [14.0 * scale, 16.0 * scale]
    plt.close(fig)
    fig = plots.plot_strategies(frame)
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert "pipeline compiled (split=4), best of 2" in labels
    assert "pipeline (split=4), best of 2" in labels
    plt.close(fig)
    from parbench.plots.common import title

    assert title(frame[frame["compile"] == True], "what").startswith(  # noqa: E712
        "what: resnet18, batch 8, 32px, fp32, compiled")
