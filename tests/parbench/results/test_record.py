"""What a record's declared fields give their readers (columns, headings, axis labels, which
have intervals and which are numbers), and how a compiled record's scope and mode are read."""

import math

import numpy as np
import pytest

from parbench.results import record
from parbench.results.record import PER_BLOCK_SINCE, compile_variant


def test_a_compiled_records_scope_and_mode_as_recorded():
    assert compile_variant(True, "model", "max-autotune", None) == ("model", "max-autotune")
    assert compile_variant(np.True_, "block", "reduce-overhead", None) == \
        ("block", "reduce-overhead")
    # No mode recorded (None, or NaN read back from a CSV): the default mode.
    assert compile_variant(True, "block", None, None) == ("block", "default")
    assert compile_variant(True, "model", math.nan, None) == ("model", "default")


@pytest.mark.parametrize("compile", [False, None, math.nan, np.False_, "True"])
def test_an_eager_record_has_no_compile_variant(compile):
    assert compile_variant(compile, "block", "default", None) is None


def test_a_compiled_record_without_a_scope_is_per_block_from_when_scopes_began():
    before = "2026-11-26T21:59:56+00:00"
    assert before < PER_BLOCK_SINCE
    assert compile_variant(True, None, None, before) == ("model", "default")
    assert compile_variant(True, math.nan, None, before) == ("model", "default")
    # From that second on, and where the time is unknown, per block.
    assert compile_variant(True, None, None, PER_BLOCK_SINCE) == ("block", "default")
    assert compile_variant(True, None, None, "2026-11-27T00:00:00+00:00") == ("block", "default")
    assert compile_variant(True, None, "max-autotune", None) == ("block", "max-autotune")
    assert compile_variant(True, None, None, math.nan) == ("block", "default")


def test_each_view_shows_its_fields_in_field_order():
    narrow = ("devices", "throughput_ips", "speedup_vs_baseline", "peak_memory_max_mib")
    assert record.columns("narrow") == narrow
    # The wide table: the narrow view's fields and its own.
    assert record.columns("table") == (
        "status", "devices", "throughput_ips", "mfu", "speedup_vs_baseline",
        "micro_batch_effect", "parallel_effect", "device_efficiency", "scaling_efficiency",
        "peak_memory_max_mib", "memory_imbalance")
    readme = record.columns("readme")
    assert set(narrow) < set(readme) and "precision" in readme and "verdict" not in readme
    assert list(readme) == [name for name in record.FIELDS if name in readme]
    with pytest.raises(AssertionError):
        record.columns("wide")


@pytest.mark.parametrize("name, expected", [
    ("throughput_ips", True),  # per trial, geometric mean
    ("measured_bubble_fraction", True),  # per trial, arithmetic mean
    ("speedup_vs_baseline", True),  # a ratio paired by round
    ("parallel_efficiency", True),  # compared, shown nowhere
    ("step_times_s", False),  # each trial keeps its own
    ("status", False), ("run_id", False), ("no_such_field", False)])
def test_which_fields_have_an_interval_over_trials(name, expected):
    assert record.has_interval(name) is expected


@pytest.mark.parametrize("name, expected", [
    ("throughput_ips", True), ("config_index", True), ("flops_per_image", True),
    ("status", False), ("channels_last", False), ("step_times_s", False),
    ("intervals", False), ("no_such_field", False)])
def test_which_fields_hold_a_number(name, expected):
    assert record.is_number(name) is expected


def test_headings_and_axis_labels_come_from_the_declaration():
    assert record.heading("throughput_ips") == "img/s"
    assert record.heading("status") == "status"  # no heading: the label
    assert record.axis_label("throughput_ips") == "throughput (images/s)"
    assert record.axis_label("speedup_vs_baseline") == "speedup over single"  # no unit
    assert record.axis_label("peak_memory_max_mib") == "peak memory on the fullest device (MiB)"
    assert record.optional("mfu") is True and record.optional("throughput_ips") is False


def test_what_each_trial_measures_and_what_is_compared():
    assert record.PER_TRIAL == {
        "measured_bubble_fraction": "linear", "throughput_ips": "log",
        "step_time_median_s": "log", "step_times_s": "kept", "host_time_median_s": "log",
        "exposed_comm_fraction": "linear", "wrapper_overhead_fraction": "linear"}
    assert record.COMPARED == ("speedup_vs_baseline", "micro_batch_effect", "parallel_effect",
                               "parallel_efficiency", "device_efficiency",
                               "scaling_efficiency")
