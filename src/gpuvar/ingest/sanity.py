"""Checks on a reader's canonical tables before they are written: rows whose duration cannot be right are
dropped (counted), exact duplicate rows are counted (kept), and a table with no usable kernel is an error."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar.errors import GpuvarError, InputError

TIME_COLUMNS = ("start", "end", "duration")

NEGATIVE_DURATION = "negative duration (end before start, or end - start beyond int64)"


def drop_negative_durations(table: pa.Table, out, name: str) -> pa.Table:
    """Drop rows with duration < 0: end before start, or an `end - start` that wrapped around int64 (extreme
    timestamps), which would otherwise pass as a huge negative kernel time."""
    if "duration" not in table.column_names or table.num_rows == 0:
        return table
    duration = table.column("duration")
    if not pa.types.is_integer(duration.type) and not pa.types.is_floating(duration.type):
        return table
    bad = pc.fill_null(pc.less(duration, 0), False)  # end - start >= 2**63 wraps to a negative int64
    if {"start", "end"} <= set(table.column_names):  # and end < start - 2**63 wraps to a positive one
        bad = pc.or_(bad, pc.fill_null(pc.less(table.column("end"), table.column("start")), False))
    n_bad = pc.sum(bad).as_py() or 0
    if not n_bad:
        return table
    out.drop(name, NEGATIVE_DURATION, n_bad)
    return table.filter(pc.invert(bad))


def duplicate_rows(table: pa.Table) -> int:
    """Rows identical in every column to an earlier row (launch_id aside on a timeline, where readers number
    launches by time). Only rows sharing a start time with another row can be
    duplicates, so a timeline table is compared on those few candidates (a full group-by costs ~1 s per million
    rows); a table without start times (Nsight Compute) is compared whole."""
    if table.num_rows < 2:
        return 0
    candidates, ignore = table, set()
    if "start" in table.column_names and pa.types.is_integer(table.column("start").type):
        ignore = {"launch_id"}  # on a timeline it is derived from the time order, so it always differs
        start = table.column("start")
        if start.null_count == 0:
            s = start.to_numpy()
            order = np.argsort(s, kind="stable")
            same = s[order][1:] == s[order][:-1]
            if not same.any():
                return 0
            rows = np.unique(np.concatenate([order[1:][same], order[:-1][same]]))
            candidates = table.take(pa.array(rows))
    keys = [c for c in candidates.column_names if c not in ignore and not pa.types.is_null(candidates.column(c).type)]
    try:
        distinct = candidates.select(keys).group_by(keys, use_threads=False).aggregate([]).num_rows
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a column type group_by cannot key on
        return 0
    return candidates.num_rows - distinct


def require_kernels(source, kernels: pa.Table, rows_read: int, dropped: dict) -> None:
    """0 usable kernels is an error that says why, whether the file has no kernel rows or all were dropped."""
    if kernels.num_rows:
        return
    if rows_read == 0:
        raise InputError(source, "no kernel rows in the file (a trace with only memory copies or API calls?)")
    reasons = ", ".join(f"{count} {reason}" for reason, count in sorted(dropped.items()))
    raise InputError(source, f"no usable kernel rows: all {rows_read} were dropped ({reasons})")


def require_timing(source, fmt: str, kernels: pa.Table) -> None:
    """A counter pass alone (rocprof v1 `rocprof -i`, rocprofv3 counter_collection without timestamps) has
    launches but no start, end or duration: nothing later can say how long a launch took, so it is an error that
    asks for its kernel trace (gpuvar.ingest.counter_passes), not an empty analysis."""
    from gpuvar.ingest.counter_passes import KERNEL_TRACE_FILES, counter_only_message

    if fmt not in KERNEL_TRACE_FILES or not kernels.num_rows:
        return
    timed = [c for c in TIME_COLUMNS if c in kernels.column_names and kernels.column(c).null_count < kernels.num_rows]
    if not timed:
        raise InputError(source, counter_only_message(kernels.num_rows))


def require_int64_times(reader: str, **tables: pa.Table | None) -> None:
    """Fail loudly if a canonical time column is not int64 ns (docs/schema.md): a float64 start/end loses the
    low digits of epoch-scale clocks (> 2^53 ns) and corrupts every duration. A reader bug, not a user error,
    so the message names the reader and the table."""
    for name, table in tables.items():
        if table is None:
            continue
        wrong = [
            f"{c} is {table.schema.field(c).type}"
            for c in TIME_COLUMNS
            if c in table.column_names and table.schema.field(c).type != pa.int64()
        ]
        if wrong:
            raise GpuvarError(f"internal error in the {reader} reader: {name} {', '.join(wrong)}, not int64 ns")


FRACTIONAL = "not a whole number: left null"


def null_fractional_counts(frame, out) -> None:
    """A launch configuration value (grid, block, registers, shared memory, ...: a count) that is not a whole
    number is invalid, not a value to round: it becomes null (the launch is kept) and is counted in the notes.
    The canonical conversion rounds floats, right for times in fractional units, silent for a grid of 1.5."""
    import pandas as pd

    from gpuvar.schema import canonical_columns

    if frame is None or not len(frame):
        return
    counts = [c.column for c in canonical_columns("kernels") if c.group == "launch_configuration" and c.type == "int64"]
    found = {}
    for name in counts:
        if name not in frame.columns or not pd.api.types.is_float_dtype(frame[name]):
            continue
        values = frame[name].to_numpy(dtype=np.float64, na_value=np.nan)
        bad = np.isfinite(values) & (values != np.floor(values))
        if bad.any():
            frame.loc[bad, name] = np.nan
            found[name] = int(bad.sum())
    if found:
        listed = ", ".join(f"{n} {name}" for name, n in found.items())
        out.notes.append(f"launch configuration values {FRACTIONAL} ({listed})")
