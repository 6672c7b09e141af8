"""Nsight Compute launches from their identity text and metric values: what the CSV reader (ncu) and the
.ncu-rep reader (ncu_rep) share, so that the same launch read from either file gives the same row.

Units: ncu may auto-scale units per value (`usecond` for one launch, `msecond` for the next; `Kbyte`,
`Mbyte`), so a metric column would mix scales. Every value is therefore converted to its base unit (unit_scale):
times to ns, SI-prefixed counts (Kbyte, Mcycle, ...) to the plain unit, per-time rates to per second. The unit of
each metric column is listed in the notes. `duration` (ns) comes from `gpu__time_duration.sum`, else `.avg`,
else the details page's human-named `Duration`; a metric without a unit is taken as ns (noted). Identity columns
(IDENTITY, SIZES) are typed and parsed from text (sizes as "(x, y, z)"); launch_table adds the canonical columns
derived from metrics (duration, registers, shared memory, grid/block when the sizes are absent, wave size).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest.base import ReaderOutput, to_int
from gpuvar.ingest.raw import RawTrace
from gpuvar.schema import int_column

# identity columns (per launch) -> canonical or kept name
IDENTITY = {
    "ID": "launch_id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "Kernel Name": "kernel_name",
    "Kernel Time": "kernel_time",
    "Context": "context",
    "Stream": "stream_id",
    "Device": "device_id",
    "CC": "cc",
}
SIZES = {"Grid Size": "grid", "Block Size": "block"}
_SIZE = re.compile(r"^\s*\(?\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)?\s*$")

# duration candidates, in order of preference (raw metric names, then the details page's human name)
DURATION_METRICS = ("gpu__time_duration.sum", "gpu__time_duration.avg", "gpu__time_duration", "Duration")
# canonical column -> metric names that carry it (raw name first, details-page name second)
METRIC_COLUMNS = {
    "registers_per_thread": ("launch__registers_per_thread", "Registers Per Thread"),
    "static_shared_memory": ("launch__shared_mem_per_block_static", "Static Shared Memory Per Block"),
    "dynamic_shared_memory": ("launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block"),
}
# used only when the Grid Size / Block Size identity columns are absent
DIM_METRICS = {
    "grid": (("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z"), "launch__grid_size", "grid_size"),
    "block": (
        ("launch__block_dim_x", "launch__block_dim_y", "launch__block_dim_z"),
        "launch__block_size",
        "workgroup_size",
    ),
}
WARP_SIZE = 32

# --- units -------------------------------------------------------------------------------------------------
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_PREFIXED = re.compile(r"^([KMGTP])(byte|cycle|inst|sector|request|warp|thread|block|wavefront|hz|Hz)$")


def _scale_part(part: str, denominator: bool) -> tuple[str, float]:
    if part in _TIME_NS:
        return ("second", 1e9 / _TIME_NS[part]) if denominator else ("ns", _TIME_NS[part])
    m = _PREFIXED.match(part)
    if m:  # ncu scales the value and writes the prefix on the unit's count, wherever it stands (see unit_scale)
        return m.group(2), _PREFIX[m.group(1)]
    return part, 1.0


def unit_scale(unit: str) -> tuple[str, float]:
    """(base unit, factor) so that value * factor is in the base unit: 'usecond' -> ('ns', 1e3),
    'Kbyte/block' -> ('byte/block', 1e3), 'Gbyte/second' -> ('byte/second', 1e9), '%' -> ('%', 1).

    A time in the denominator is a true unit ('sector/usecond' = 1e6 sector/second). An SI prefix on a count in
    the denominator is ncu's auto-scaling, which divides the value and writes the prefix on the first count
    token: '%/Kbyte' 2.234 is 2234 %/byte, the value the .ncu-rep of the same launch holds (real H100 export,
    derived__pct_occupancy_per_shared_mem_size); read as 1/1000 it was off by 10^6 from the report."""
    unit = (unit or "").strip()
    num, sep, den = unit.partition("/")
    base, factor = _scale_part(num, False)
    if sep:
        den_base, den_factor = _scale_part(den, True)
        base, factor = f"{base}/{den_base}", factor * den_factor
    return base, factor


def _sizes(series: pd.Series) -> pd.DataFrame:
    """'(32, 32, 1)' -> x, y, z (Int64); a bare '256' means (256, 1, 1); anything else -> <NA>.

    Parsed once per distinct string: a trace has few launch shapes."""
    codes, uniques = pd.factorize(series)
    parts = pd.Series(uniques, dtype=object).astype(str).str.extract(_SIZE)
    x = pd.to_numeric(parts[0], errors="coerce")
    y = pd.to_numeric(parts[1], errors="coerce").where(parts[1].notna(), 1).where(x.notna())
    z = pd.to_numeric(parts[2], errors="coerce").where(parts[2].notna(), 1).where(x.notna())
    out = {axis: int_column(v).array.take(codes, allow_fill=True) for axis, v in zip("xyz", (x, y, z))}
    return pd.DataFrame(out, index=series.index)


def identity(df: pd.DataFrame, launch_ids: np.ndarray, extras, out: ReaderOutput) -> pd.DataFrame:
    """Per-launch identity columns under canonical names; `extras` (unknown per-launch columns) kept as is.

    `df` holds the CSV identity columns as text (IDENTITY / SIZES names); the .ncu-rep reader builds the same
    text from the report so both readers type and parse these columns identically."""
    ident = pd.DataFrame({"launch_id": pd.array(launch_ids.astype(np.int64), dtype="Int64")}, index=df.index)
    for source, name in IDENTITY.items():
        if source in df.columns and source != "ID":
            ident[name] = df[source].where(df[source] != "", None)
    for source, dim in SIZES.items():
        if source in df.columns:
            xyz = _sizes(df[source])
            bad = int((xyz["x"].isna() & (df[source].str.strip() != "")).sum())
            if bad:
                out.notes.append(f"{bad} launch(es) with an unparseable {source} (grid/block left null)")
            for axis in "xyz":
                ident[f"{dim}_{axis}"] = xyz[axis]
    for name in extras:
        ident[name] = df[name].where(df[name] != "", None)
    return ident


def _unit_note(units: dict[str, str]) -> str:
    return "metric units (base units after scaling; '' = dimensionless): " + json.dumps(units, sort_keys=False)


def column_unit(name: str, bases, out: ReaderOutput) -> str:
    """The single base unit of a metric column (mixed units are reported, the most common one kept)."""
    found = pd.Series(bases, dtype=object)
    found = found[found != ""]
    if found.empty:
        return ""
    counts = found.value_counts()
    if len(counts) > 1:
        out.notes.append(f"metric {name} mixes units {', '.join(map(str, counts.index))}")
    return str(counts.index[0])


# --- canonical columns from metrics ------------------------------------------------------------------------
def _find_metric(frame: pd.DataFrame, candidates) -> str | None:
    """First candidate present as a column (a details-page name may be section-qualified)."""
    for name in candidates:
        if name in frame.columns:
            return name
        qualified = [c for c in frame.columns if isinstance(c, str) and c.endswith(f": {name}")]
        if qualified:
            return qualified[0]
    return None


def _add_duration(kernels: pd.DataFrame, units: dict[str, str], out: ReaderOutput) -> None:
    usable = [c for c in kernels.columns if units.get(c, None) in ("ns", "")]
    name = _find_metric(kernels[usable], DURATION_METRICS)
    if name is None:
        kernels["duration"] = pd.Series(pd.NA, index=kernels.index, dtype="Int64")
        out.notes.append(f"no gpu__time_duration metric: duration is null for all {len(kernels)} launches")
        return
    if units.get(name) == "":
        out.notes.append(f"{name} has no unit; taken as ns")
    kernels["duration"] = to_int(kernels[name])
    missing = int(kernels["duration"].isna().sum())
    if missing:
        out.notes.append(f"{missing} launch(es) have no {name} value: kept with a null duration")


def _add_launch_columns(kernels: pd.DataFrame) -> None:
    for column, candidates in METRIC_COLUMNS.items():
        name = _find_metric(kernels, candidates)
        if name is not None and column not in kernels.columns:
            kernels[column] = pd.to_numeric(kernels[name], errors="coerce")
    for dim, (axes, total, canonical_total) in DIM_METRICS.items():
        if f"{dim}_x" in kernels.columns:
            continue
        if all(a in kernels.columns for a in axes):
            for axis, name in zip("xyz", axes):
                kernels[f"{dim}_{axis}"] = pd.to_numeric(kernels[name], errors="coerce")
        elif total in kernels.columns:
            kernels[canonical_total] = pd.to_numeric(kernels[total], errors="coerce")
    kernels["wave_size"] = WARP_SIZE


def launch_table(ident: pd.DataFrame, metrics: dict, units: dict[str, str], out: ReaderOutput) -> pd.DataFrame:
    """The kernel table of Nsight Compute launches: identity columns, one column per metric (values already in
    the base unit `units[name]`), then the canonical columns derived from metrics (duration from
    gpu__time_duration, registers, shared memory, grid/block when the sizes are absent, wave size).

    Shared by the CSV reader and the .ncu-rep reader so that the same metric gives the same column."""
    kernels = pd.concat([ident, pd.DataFrame(metrics, index=ident.index)], axis=1)
    _add_duration(kernels, units, out)
    _add_launch_columns(kernels)
    out.notes.append(_unit_note(units))
    return kernels


def require_durations(source, kernels: pd.DataFrame) -> None:
    """A one-line error when no launch has a duration: every later step needs it, and an ingest of null
    durations that exits 0 hides a reader that misread the file (the ncu 2025 details page did)."""
    if len(kernels) and kernels["duration"].isna().all():
        raise InputError(
            source,
            f"no duration for any of the {len(kernels)} launch(es): no {' / '.join(DURATION_METRICS)} "
            "metric with a time unit (profile with --metrics gpu__time_duration.sum, or the default sections)",
        )


def raw_table(raw: RawTrace, name: str) -> pa.Table:
    """A table of the raw read; a raw folder without it (edited, or from another reader) is a one-line error."""
    if name not in raw.tables:
        raise InputError(raw.source, f"raw {raw.format} read lacks its {name!r} table (not written by read_raw?)")
    return raw.tables[name]
