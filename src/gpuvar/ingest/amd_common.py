"""Shared AMD parsing: the CSV loader (the raw stage) and the rocprof v1 / Omniperf column mapping (normalize).

rocprof v1 (`results.csv`, counter passes, `results.db`), Omniperf's `pmc_perf.csv` and its `timestamps.csv`
describe a dispatch with the same fields under three generations of names; mapping them in one place keeps
the readers consistent. Decisions every AMD reader shares:
  * `grd` / `Grid_Size` count WORK-ITEMS; the canonical grid is in blocks: grid_x = ceil(grd / wgr) (1-D,
    grid_y = grid_z = 1; ceil because a non-HIP dispatch may end in a partial workgroup). The work-item
    total is kept as `grid_work_items` (not `Grid_Size`, which would clash with `grid_size` in
    case-insensitive tools such as DuckDB).
  * Kernel names lose the kernel-descriptor suffix (`[clone .kd]`, `(.kd)`, `.kd`): it is how rocprof
    prints the `<symbol>.kd` descriptor, carries no information, and keeps names comparable with other
    tools. The number of names changed is reported in the notes.
  * The ROCm 4 layout (`vgpr,sgpr,fbar`) has no wave size; those GPUs (GCN / CDNA) run wave64, so
    wave_size = 64 unless the caller knows better (Omniperf's sysinfo.csv) -- reported in the notes.
  * Counters are renamed to their Table 1 simplified names; every other source column is kept.
The raw stage (read_amd_csv, add_raw_table) keeps the CSV as pyarrow parsed it: the file's column names and
every row of the right shape; all the mapping above happens in normalize (raw_frame and what follows).
"""

from __future__ import annotations

import base64
import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuvar.errors import InputError
from gpuvar.ingest.base import (
    REPEATED_HEADER,
    ReaderOutput,
    csv_block_size,
    drop_repeated_headers,
    is_utf8,
    read_csv_bytes,
    to_int,
    to_number,
    unique_names,
)
from gpuvar.ingest.raw import RawTrace
from gpuvar.schema import int_column, table1_rename

# canonical name -> source names, first present wins (rocprof v1, Omniperf 2024, Omniperf MI300X / timestamps)
AMD_COLUMNS = {
    "launch_id": ("Index", "Dispatch_ID"),
    "kernel_name": ("KernelName", "Kernel_Name"),
    "device_id": ("gpu-id", "GPU_ID"),
    "stream_id": ("queue-id", "Queue_ID"),
    "process_id": ("pid", "PID"),
    "correlation_id": ("Correlation_ID",),
    "start": ("BeginNs", "Start_Timestamp"),
    "end": ("EndNs", "End_Timestamp"),
    "lds_per_workgroup": ("lds", "LDS_Per_Workgroup"),
    "scratch_per_workitem": ("scr", "Scratch_Per_Workitem"),
    "arch_vgpr": ("arch_vgpr", "Arch_VGPR", "vgpr"),
    "accum_vgpr": ("accum_vgpr", "Accum_VGPR"),
    "sgpr": ("sgpr", "SGPR"),
    "wave_size": ("wave_size", "Wave_Size"),
}
GRID_WORK_ITEMS = ("grd", "Grid_Size")
WORKGROUP = ("wgr", "Workgroup_Size")
# every per-dispatch identity column the AMD tools write (Omniperf repeats these per counter pass)
IDENTITY_COLUMNS = frozenset(
    {name for names in AMD_COLUMNS.values() for name in names}
    | set(GRID_WORK_ITEMS)
    | set(WORKGROUP)
    | {"queue-index", "tid", "TID", "sig", "obj", "fbar", "DispatchNs", "CompleteNs", "DurationNs", "XCC_Index"}
)
KERNEL_NAME_COLUMNS = AMD_COLUMNS["kernel_name"]
_KD_SUFFIX = r"\s*(?:\[clone \.kd\]|\(\.kd\)|\.kd)$"
DEFAULT_OLD_WAVE_SIZE = 64
_TEXT_COLUMN = re.compile(r"^(?:KernelName|Kernel_Name|sig|obj|BeginNs|EndNs|Start_Timestamp|End_Timestamp)(?:_\d+)?$")
# Arrow's default null spellings minus NaN: a 'nan' timestamp is a damaged value (dropped, counted), not a
# missing one; numeric columns still read 'nan' as NaN
_NULL_VALUES = [v for v in pacsv.ConvertOptions().null_values if v.lower().lstrip("-") != "nan"]
BAD_TIMESTAMP = "start/end timestamp is nan, inf, text or beyond int64 ns"
_INT_TEXT = r"^[+-]?\d{1,18}$"  # fits int64 whatever the digits


# ---------------------------------------------------------------------------------------------- CSV loading
def csv_header(head: bytes) -> list[str]:
    """Column names of the first line of `head` (quoted or not, BOM/CRLF tolerated); [] if unreadable."""
    if b"\x00" in head[:4096]:
        return []
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    text = line.decode("utf-8-sig", errors="replace")
    try:
        return [c.strip() for c in next(csv.reader([text]))]
    except (csv.Error, StopIteration):
        return []


def _text_types(names: list[str]) -> dict[str, pa.DataType]:
    """Columns read as text whatever they look like: names, the hex `sig`/`obj` (which pyarrow would
    otherwise turn into integers in the CSV but not in results.db), and timestamps: one 'inf' or 20-digit value
    made Arrow infer float64 for the whole column, and epoch-scale ns (> 2^53) lost their low digits."""
    return {n: pa.string() for n in names if _TEXT_COLUMN.match(n)}


WIDE_BATCH = 8192  # columns converted per pass: Arrow's CSV reader holds ~10 KB per column while converting


def _parse(raw: bytes, header: bytes, encoding: str, bad: list) -> tuple[pa.Table, str]:
    """pyarrow read with our header names (deduplicated); invalid rows are collected in `bad` and skipped.
    pyarrow's whole-file reader widens a column that turns decimal after the first block. A file wider than
    WIDE_BATCH columns (real ones have ~2,700) is converted WIDE_BATCH columns per pass, bounding memory."""
    names = unique_names([c.strip() for c in next(csv.reader([header.decode(encoding)]))])
    first_pass = True

    def on_invalid(row):
        if first_pass:  # every pass meets the same invalid rows: count them once
            bad.append(row)
        return "skip"

    parts = []
    for start in range(0, len(names), WIDE_BATCH):
        include = names[start : start + WIDE_BATCH] if len(names) > WIDE_BATCH else []
        parts.append(
            pacsv.read_csv(
                io.BytesIO(raw),
                read_options=pacsv.ReadOptions(
                    column_names=names, skip_rows=1, encoding=encoding, block_size=csv_block_size(raw)
                ),
                parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pacsv.ConvertOptions(
                    strings_can_be_null=True,
                    column_types=_text_types(names),
                    include_columns=include,
                    null_values=_NULL_VALUES,
                ),
            )
        )
        first_pass = False
    if len(parts) == 1:
        return parts[0], encoding
    return pa.Table.from_arrays([c for part in parts for c in part.columns], names=names), encoding


def read_amd_csv(path: Path, raw: RawTrace, table: str = "kernels") -> pa.Table:
    """Parse an AMD profiler CSV with pyarrow (fast, multi-threaded), strictly; the columns as the file names them.

    A row with the wrong number of fields is dropped and counted in `raw` under `table` -- unless it is the
    file's last line, which means the file was cut mid-row: that is an InputError, as are a header without data
    rows and an unterminated quote. Invalid UTF-8 falls back to latin-1.
    """
    data, repeated = drop_repeated_headers(read_csv_bytes(path))
    raw.drop(table, REPEATED_HEADER, repeated)
    end = data.find(b"\n")
    header = data[: end if end >= 0 else len(data)].rstrip(b"\r")
    bad: list[pacsv.InvalidRow] = []
    encoding = "utf8" if is_utf8(data) else "latin-1"  # profilers on old systems write latin-1
    if encoding == "latin-1":
        raw.notes.append(f"{Path(path).name}: not valid UTF-8, decoded as latin-1")
    try:
        result, encoding = _parse(data, header, encoding, bad)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InputError(path, f"malformed CSV: {str(exc).splitlines()[0]}") from None
    last_line = data[-(1 << 20) :].rstrip(b"\r\n").rsplit(b"\n", 1)[-1].rstrip(b"\r")
    if not data.endswith(b"\n"):
        raw.notes.append(f"{Path(path).name}: no newline at end of file; the last row may be incomplete")
    del data  # the Arrow table holds the data now; keep peak memory down for large traces
    for row in bad:
        cut = row.actual_columns < row.expected_columns
        if cut and row.text is not None and row.text.encode(encoding) == last_line:
            raise InputError(path, f"truncated: the last row has {row.actual_columns} of {row.expected_columns} fields")
    raw.drop(table, "row with a different number of fields than the header", len(bad))
    if result.num_rows == 0 and not bad:
        raise InputError(path, "no data rows (header only)")
    return result


# ------------------------------------------------------------------------------------------------ raw tables
# Arrow types a Parquet file cannot hold as they are (it stores them in milliseconds): a CSV column of dates
# with times, or of times of day, is inferred at second resolution.
_PARQUET_ALTERED = (pa.timestamp("s"), pa.time32("s"))
ARROW_TYPES_INFO = "arrow_types"


def add_raw_table(raw: RawTrace, name: str, table: pa.Table) -> None:
    """Store `table` as raw table `name`, recording in raw.info the column types Parquet would change."""
    raw.tables[name] = table
    altered = [f for f in table.schema if any(f.type.equals(t) or _same_kind(f.type, t) for t in _PARQUET_ALTERED)]
    if altered:
        schema = pa.schema(altered).serialize().to_pybytes()
        raw.info.setdefault(ARROW_TYPES_INFO, {})[name] = base64.b64encode(schema).decode("ascii")


def _same_kind(typ: pa.DataType, ref: pa.DataType) -> bool:
    """A timestamp in seconds with any time zone counts as `timestamp[s]`."""
    return pa.types.is_timestamp(typ) and pa.types.is_timestamp(ref) and typ.unit == ref.unit


def raw_frame(raw: RawTrace, name: str) -> pd.DataFrame:
    """Raw table `name` as the pandas frame the reader parsed (types Parquet changed are cast back)."""
    table = raw.tables[name]
    encoded = raw.info.get(ARROW_TYPES_INFO, {}).get(name)
    if encoded:
        for f in pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded))):
            i = table.schema.get_field_index(f.name)
            if i >= 0 and not table.schema.field(i).type.equals(f.type):
                table = table.set_column(i, f, table.column(i).cast(f.type))
    frame = table.to_pandas()
    text = [c for c, t in frame.dtypes.items() if isinstance(t, pd.StringDtype)]
    if text:  # pandas 3 reads text as `str`: object columns with None, as the readers expect (and as pandas 2 reads)
        frame = frame.astype({c: object for c in text})
        frame[text] = frame[text].where(frame[text].notna(), None)
    return frame


# ------------------------------------------------------------------------------------------- column mapping
def first_present(columns, names) -> str | None:
    """The first of `names` that is a column, else None."""
    return next((n for n in names if n in columns), None)


def rename_columns(df: pd.DataFrame, mapping: dict[str, str]) -> pd.DataFrame:
    """Rename in place: DataFrame.rename copies (and consolidates) every block, seconds on wide traces."""
    if mapping:
        df.columns = [mapping.get(c, c) for c in df.columns]
    return df


def canonical_renames(columns, mapping: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """{source: canonical} for the first present source name of each canonical column not already there."""
    cols = set(columns)
    rename = {}
    for canonical, names in mapping.items():
        found = first_present(cols, names)
        if found is not None and canonical not in cols:
            rename[found] = canonical
    return rename


def clean_kernel_names(names: pd.Series) -> tuple[pd.Series, int]:
    """Strip literal surrounding quotes (results.db) and the '.kd' descriptor suffix; (names, rows changed).

    Works on the distinct names only (a trace repeats a few dozen names millions of times).
    """
    cat = pd.Categorical(names)
    original = pd.Index(cat.categories.astype(str))
    cleaned = original.str.strip().str.replace(r'^"(.*)"$', r"\1", regex=True).str.replace(_KD_SUFFIX, "", regex=True)
    codes = cat.codes
    n_changed = int(np.isin(codes, np.flatnonzero(cleaned != original)).sum())
    values = np.append(np.asarray(cleaned, dtype=object), None)[codes]  # code -1 (null) -> None
    return pd.Series(values, index=names.index, dtype=object), n_changed


def ceil_div(num: pd.Series, den: pd.Series) -> pd.Series:
    """ceil(num / den) as nullable Int64; null where either is null or den <= 0."""
    n, d = to_number(num), to_number(den)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.ceil(n / d.where(d > 0))
    return int_column(q)


def map_amd_dispatch_columns(
    df: pd.DataFrame,
    out: ReaderOutput,
    source: str,
    wave_size_default: int = DEFAULT_OLD_WAVE_SIZE,
    wave_size_origin: str = "GCN/CDNA GPUs of that era run wave64",
) -> pd.DataFrame:
    """Rename rocprof v1 / Omniperf identity columns to canonical names, derive the 1-D grid, rename Table 1
    counters; every other column is kept under its source name."""
    df = _consolidated(df)
    cols = set(df.columns)
    rename = canonical_renames(cols, AMD_COLUMNS)
    grd, wgr = first_present(cols, GRID_WORK_ITEMS), first_present(cols, WORKGROUP)
    df = rename_columns(df, rename)
    if wgr is not None:
        df["block_x"] = to_int(df[wgr])
        df["block_y"] = df["block_z"] = pd.array(np.ones(len(df), dtype=np.int64), dtype="Int64")
        if grd is not None:
            df["grid_x"] = ceil_div(df[grd], df[wgr])
            df["grid_y"] = df["grid_z"] = pd.array(np.ones(len(df), dtype=np.int64), dtype="Int64")
            df = rename_columns(df, {grd: "grid_work_items"})
        # identical to workgroup_size, derived from block_x; dropped in one step: `del` split a wide object block
        # into a block per column (997 on a 0-row Omniperf file) and every later insert warned of fragmentation
        df = _consolidated(df.drop(columns=[wgr]))
    if "arch_vgpr" in df.columns:
        df["registers_per_thread"] = df["arch_vgpr"]
    if "wave_size" not in df.columns and "vgpr" in rename:
        df["wave_size"] = wave_size_default
        out.notes.append(
            f"{source}: ROCm 4 layout (vgpr,sgpr,fbar) has no wave size; wave_size = {wave_size_default} "
            f"({wave_size_origin})"
        )
    if "kernel_name" in df.columns:
        df["kernel_name"], changed = clean_kernel_names(df["kernel_name"])
        if changed:
            out.notes.append(
                f"{source}: kernel-descriptor suffix ('[clone .kd]', '(.kd)', '.kd') removed from "
                f"{changed} kernel name(s)"
            )
    return rename_table1(df)


def _consolidated(df: pd.DataFrame) -> pd.DataFrame:
    """A wide frame as one block per dtype: pandas 3 (copy on write) keeps a frame's columns in a block each after a
    drop or a selection, and each insert into such a frame warns (PerformanceWarning). One copy consolidates it, as
    pandas advises; a frame of a hundred columns or fewer is left as it is."""
    return df.copy() if df.shape[1] > 100 else df


def rename_table1(df: pd.DataFrame) -> pd.DataFrame:
    """Table 1 original counter names -> simplified names, skipping any that would collide with a column."""
    taken = {c.lower() for c in df.columns}
    rename = {}
    for src, dst in table1_rename([c for c in df.columns if isinstance(c, str)]).items():
        if src != dst and dst.lower() not in taken - {src.lower()}:
            rename[src] = dst
            taken.add(dst.lower())
    return rename_columns(df, rename)


def check_timestamps(df: pd.DataFrame, out: ReaderOutput, source: str) -> pd.DataFrame:
    """Timestamps to integers; flag ones a spreadsheet rounded (e.g. 8.1097E+14), whose durations are noise.

    Nanosecond timestamps are integers; floats that are all multiples of 1e6 at ~1e12+ have lost their low
    digits, so the duration is set to null (not 0) and the problem reported.
    """
    if "start" not in df.columns:
        out.notes.append(f"{source}: no kernel timestamps in this file (counter pass); start/end/duration are null")
        return df
    df, was_float = drop_bad_timestamps(df, out, "kernels")
    start = df["start"]
    if was_float:
        valid = start.dropna()
        if len(valid) and valid.abs().max() > 1e12 and bool((valid % 1e6 == 0).all()):
            df["duration"] = pd.array([pd.NA] * len(df), dtype="Int64")
            out.notes.append(
                f"{source}: timestamps are rounded floating-point values (e.g. {valid.iloc[0]:.4E}); "
                "nanosecond precision is lost, duration set to null"
            )
    missing = int(start.isna().sum())
    if missing:
        out.notes.append(f"{source}: {missing} row(s) without a start timestamp (kept, start null)")
    return df


def exact_ns(values: pd.Series) -> tuple[pd.Series, np.ndarray, bool]:
    """(Int64 ns, bad mask, any value written as a float) of a timestamp column, integers parsed exactly.

    Text of up to 18 digits is cast in Arrow; anything else (19+ digits, '8.1097E+14') is parsed per distinct
    value in Python. Missing (null, '') stays null; nan, inf, text and values beyond int64 are `bad`."""
    n = len(values)
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iub":
        return int_column(values), np.zeros(n, bool), False
    if isinstance(values.dtype, pd.core.dtypes.dtypes.BaseMaskedDtype) and values.dtype.kind in "iu":
        return int_column(values), np.zeros(n, bool), False
    if isinstance(values.dtype, np.dtype) and values.dtype.kind == "f":  # SQLite REAL; NaN is SQL NULL there
        floats = values.to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~np.isnan(floats) & ~(np.abs(floats) < 2.0**63)
        return int_column(np.where(bad, np.nan, floats)), bad, bool((~np.isnan(floats)).any())
    text = pa.array([_as_text(v) for v in values.astype(object).where(values.notna(), None)], type=pa.string())
    clean = pc.utf8_trim_whitespace(pc.replace_substring(text, ",", ""))
    missing = pc.fill_null(pc.equal(clean, ""), True).to_numpy(zero_copy_only=False)
    is_int = pc.fill_null(pc.match_substring_regex(clean, _INT_TEXT), False).to_numpy(zero_copy_only=False)
    ints = pc.cast(pc.if_else(pa.array(is_int), clean, "0"), pa.int64()).to_numpy().copy()
    bad = np.zeros(n, bool)
    rest = np.flatnonzero(~missing & ~is_int)
    floated = False
    if len(rest):
        parsed = {v: _parse_ns(v) for v in set(clean.take(pa.array(rest)).to_pylist())}
        for i, v in zip(rest, clean.take(pa.array(rest)).to_pylist()):
            value, from_float = parsed[v]
            if value is None:
                bad[i] = True
            else:
                ints[i], floated = value, floated or from_float
    series = pd.Series(pd.arrays.IntegerArray(ints, missing | bad), index=values.index)
    return series, bad, floated


def _as_text(value) -> str | None:
    """A timestamp cell as text: strings as read, numbers (a concatenated frame, a sqlite3 fallback) printed."""
    if value is None or isinstance(value, str):
        return value
    return repr(value) if isinstance(value, float) else str(value)


def _parse_ns(text: str) -> tuple[int | None, bool]:
    """(ns, written as a float) of one timestamp text; (None, _) when nan, inf, not a number or beyond int64."""
    try:
        value = int(text)
        return (value if -(2**63) <= value < 2**63 else None), False
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None, False
    if not np.isfinite(number) or abs(number) >= 2.0**63:
        return None, True
    return int(round(number)), True


def drop_bad_timestamps(df: pd.DataFrame, out: ReaderOutput, table: str) -> tuple[pd.DataFrame, bool]:
    """start/end as exact Int64 ns; rows with a nan, inf, text or beyond-int64 start or end dropped and counted
    (kept, such a value turned both columns to float64 and corrupted every other row's duration).
    Returns (frame, whether any timestamp was written as a float: see check_timestamps)."""
    bad, floated = np.zeros(len(df), bool), False
    for col in ("start", "end"):
        if col in df.columns:
            df[col], col_bad, col_float = exact_ns(df[col])
            bad |= col_bad
            floated = floated or col_float
    if bad.any():
        out.drop(table, BAD_TIMESTAMP, int(bad.sum()))
        df = df.loc[~bad].reset_index(drop=True)
    return df, floated


def drop_nameless(df: pd.DataFrame, out: ReaderOutput, table: str = "kernels") -> pd.DataFrame:
    """Rows without a kernel name cannot be grouped: dropped and counted."""
    if "kernel_name" not in df.columns:
        return df
    names = df["kernel_name"]
    bad = names.isna() | (names == "")  # names are already stripped by clean_kernel_names
    out.drop(table, "missing kernel name", int(bad.sum()))
    return df.loc[~bad].reset_index(drop=True) if bad.any() else df


def require_kernel_name(path: Path, columns) -> None:
    """InputError unless the file has a kernel-name column (KernelName or Kernel_Name)."""
    if first_present(columns, KERNEL_NAME_COLUMNS) is None:
        raise InputError(path, "CSV lacks required column KernelName (or Kernel_Name)")


def read_sysinfo(path: Path) -> dict[str, str]:
    """The single row of an Omniperf sysinfo.csv as a dict ({} when absent or unreadable)."""
    try:
        text = read_csv_bytes(path).decode("utf-8", errors="replace")
        rows = list(csv.DictReader(io.StringIO(text)))
    except (InputError, csv.Error):
        return {}
    return {k.strip(): (v or "").strip() for k, v in rows[0].items() if k} if rows else {}
