"""Per-operation profiles of a model's training step on the device at hand: each operation's
block and phase, FLOPs, bytes, dtype and device time (`parbench profile`)."""

from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.measure import DEFAULT_STEPS, OpMeasurement, measure_ops
from parbench.advisor.profiling.op_profile.store import (
    OpProfile,
    file_name,
    measure_op_profile,
    read_op_profile,
    rows_of,
    write_op_profile,
)

__all__ = ["DEFAULT_STEPS", "OpMeasurement", "OpProfile", "OpRow", "file_name",
           "measure_op_profile", "measure_ops", "read_op_profile", "rows_of",
           "write_op_profile"]
