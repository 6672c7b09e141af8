"""Nsight Systems SQLite export (`nsys export --type sqlite`): kernels and memory copies.

Two steps (gpuvar.ingest.raw): read_raw fetches the tables as the export holds them, normalize maps them.

read_raw (the expensive part: the table scans). Raw tables, named as in the export, lower-cased:
  * cupti_activity_kind_kernel: CUPTI_ACTIVITY_KIND_KERNEL, every column (or only those the canonical schema
    is derived from: ReadOptions.keep_vendor_columns=False), vendor names, rowid order, every row.
  * cupti_activity_kind_memcpy: CUPTI_ACTIVITY_KIND_MEMCPY likewise (absent when the capture made no copies).
  * stringids (StringIds: id -> kernel name) and enum_cuda_memcpy_oper (copyKind -> symbol), as found.
  * cupti_activity_kind_runtime (start, end, globalTid, correlationId, nameId) and nvtx_events (start, end,
    eventType, globalTid, text, textId), as found: the CUDA API calls and NVTX ranges that place each launch
    (read by gpuvar.ingest.call_sites, not by normalize).
  raw.info: keep_vendor_columns, the columns not read, META_DATA_EXPORT as (name, value) pairs, GPU names
  (TARGET_INFO_GPU, TARGET_INFO_CUDA_DEVICE) or SM counts, the GPUs' uuid and busLocation (ingest.json devices),
  the profiled machine's Hostname (TARGET_INFO_SYSTEM_ENV: ingest.json `host`) and the processes whose CUDA device
  ids are not the GPU ids (TARGET_INFO_CUDA_DEVICE cudaId != gpuId), for gpuvar.ingest.gpu_identity. nsys creates
  tables lazily, so any may be absent.
  Tables are fetched (gpuvar.ingest.nsys_sqlite) with connectorx (Arrow, 2 partitions on the real rowid for big tables that have one, put
  back in rowid order; the kernel and memcpy tables concurrently); where connectorx cannot read a file, or reads
  another number of rows than SQLite counts, the pure-sqlite3 path is used.
  Timestamps that are not integers are an InputError here (the file cannot be a trace), not a drop.

normalize (cheap, vectorised):
  * kernel names: demangledName / shortName / mangledName resolved through StringIds once per distinct id;
    an id missing from StringIds is kept as '<unknown string id N>' and counted in a note.
  * copy_kind_name: the ENUM_CUDA_MEMCPY_OPER symbol's short form ('HtoD', 'DtoH', 'DtoD', 'PtoP',
    'UVM HtoD', 'Unknown'), the spelling the other readers use; without the table a built-in copy of the
    real enum (2024.6 .. 2026.2) is used.
  * process_id = (globalPid >> 24) & 0xFFFFFF: nsys serialises GlobalId as hardware/VM id in the bits above
    48, pid in bits 24..47 and tid below; the mask removes the hardware id (it matches
    TARGET_INFO_CUDA_DEVICE.pid). launch_id = row rank by (start, correlationId), from 0.
  * rows with a NULL start/end or end < start are dropped and counted; metadata becomes notes.
Where the time goes (1 M kernels): the connectorx scan ~0.4-0.6 s, canonical columns ~0.1 s, Parquet
encoding ~0.3 s (the two files concurrently); `gpuvar bench ingest` compares it with SQLite's own scan.
"""

from __future__ import annotations

import re
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar.errors import InputError
from gpuvar.ingest.base import ReaderOutput, require_columns
from gpuvar.ingest.nsys_sqlite import (
    SQLITE_MAGIC,
    catalog,
    connect,
    damaged,
    fetch,
    fetch_sqlite3,
    quote_name,
    rowid_name,
)
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "nsys-sqlite"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
NO_KERNEL_TABLE = f"no {KERNEL_TABLE} table: the capture recorded no CUDA kernels (was CUDA tracing on?)"
STRING_TABLE = "StringIds"
MEMCPY_ENUM = "ENUM_CUDA_MEMCPY_OPER"
RAW_KERNELS, RAW_MEMCPY, RAW_STRINGS, RAW_MEMCPY_ENUM = (
    t.lower() for t in (KERNEL_TABLE, MEMCPY_TABLE, STRING_TABLE, MEMCPY_ENUM)
)
RUNTIME_TABLE, NVTX_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
RAW_RUNTIME, RAW_NVTX = RUNTIME_TABLE.lower(), NVTX_TABLE.lower()
# host-side tables that place each launch (gpuvar.ingest.call_sites): the columns read, those required
HOST_COLUMNS = {
    RUNTIME_TABLE: (("start", "end", "globalTid", "correlationId", "nameId"), {"start", "globalTid", "correlationId"}),
    NVTX_TABLE: (
        ("start", "end", "eventType", "globalTid", "text", "textId"),
        {"start", "end", "eventType", "globalTid"},
    ),
}
GPU_TABLES = (("TARGET_INFO_GPU", "id"), ("TARGET_INFO_CUDA_DEVICE", "cudaId"))  # (table, id column), notes order
NAME_COLUMNS = {"demangledName": "kernel_name", "shortName": "kernel_short_name", "mangledName": "mangledName"}
KERNEL_RENAME = {
    "start": "start",
    "end": "end",
    "deviceId": "device_id",
    "streamId": "stream_id",
    "correlationId": "correlation_id",
    "gridX": "grid_x",
    "gridY": "grid_y",
    "gridZ": "grid_z",
    "blockX": "block_x",
    "blockY": "block_y",
    "blockZ": "block_z",
    "registersPerThread": "registers_per_thread",
    "staticSharedMemory": "static_shared_memory",
    "dynamicSharedMemory": "dynamic_shared_memory",
    "localMemoryPerThread": "scratch_per_workitem",
}
MEMCPY_RENAME = {
    "start": "start",
    "end": "end",
    "deviceId": "device_id",
    "streamId": "stream_id",
    "correlationId": "correlation_id",
    "bytes": "bytes",
    "copyKind": "copy_kind",
}
# what the canonical schema is derived from; every other column is a vendor column (read when kept)
KERNEL_NEEDED = (*KERNEL_RENAME, "demangledName", "shortName", "globalPid")
MEMCPY_NEEDED = (*MEMCPY_RENAME, "globalPid")
# ENUM_CUDA_MEMCPY_OPER.name as found in the real exports (2024.6 .. 2026.2), for files without the table
MEMCPY_OPER_FALLBACK = {
    0: "CUDA_MEMCPY_KIND_UNKNOWN",
    1: "CUDA_MEMCPY_KIND_HTOD",
    2: "CUDA_MEMCPY_KIND_DTOH",
    3: "CUDA_MEMCPY_KIND_HTOA",
    4: "CUDA_MEMCPY_KIND_ATOH",
    5: "CUDA_MEMCPY_KIND_ATOA",
    6: "CUDA_MEMCPY_KIND_ATOD",
    7: "CUDA_MEMCPY_KIND_DTOA",
    8: "CUDA_MEMCPY_KIND_DTOD",
    9: "CUDA_MEMCPY_KIND_HTOH",
    10: "CUDA_MEMCPY_KIND_PTOP",
    11: "CUDA_MEMCPY_KIND_UVM_HTOD",
    12: "CUDA_MEMCPY_KIND_UVM_DTOH",
    13: "CUDA_MEMCPY_KIND_UVM_DTOD",
}
_INT64 = pa.int64()


# --- detection --------------------------------------------------------------------------------------------


def _is_nsys(tables) -> bool:
    return any(t == "StringIds" or t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)


def sniff(path: Path, head: bytes) -> bool:
    """SQLite magic and an nsys table (CUPTI_ACTIVITY_KIND_* or StringIds).

    A file with the SQLite magic whose schema cannot be read (truncated, corrupt) is claimed too, so that
    `read` reports it as a damaged SQLite database instead of an unrecognised format.
    """
    if not head.startswith(SQLITE_MAGIC) or Path(path).is_dir():
        return False
    try:
        con = connect(path)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError):  # a damaged schema page can hold invalid UTF-8
        return True
    return _is_nsys(names)


# --- metadata ----------------------------------------------------------------------------------------------


def _plain(value):
    """A SQLite value as JSON can hold it (raw.info): a BLOB becomes its text form, as a note would print it."""
    return value if value is None or isinstance(value, int | float | str) else str(value)


def _metadata(con: sqlite3.Connection, tables: dict[str, list[str]]) -> dict:
    """Nsight Systems version, time slicing and GPU names as found (raw.info; normalize words them as notes)."""
    info = {}
    if {"name", "value"} <= set(tables.get("META_DATA_EXPORT", ())):
        rows = con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall()
        info["META_DATA_EXPORT"] = [[_plain(n), _plain(v)] for n, v in rows]
    for table, id_col in GPU_TABLES:
        cols = tables.get(table, ())
        if "name" in cols:
            key = quote_name(id_col) if id_col in cols else rowid_name(con, table) or "NULL"
            rows = con.execute(f'SELECT {key}, name FROM "{table}" ORDER BY 1').fetchall()
            info[f"{table}.name"] = [[_plain(i), _plain(n)] for i, n in rows]
            if "devices" not in info:  # structured, for comparisons: the first table naming GPUs
                extra = [
                    (c, f)
                    for c, f in (
                        ("smCount", "sm_count"),
                        ("clockRate", "clock_hz"),
                        ("uuid", "uuid"),
                        ("busLocation", "bus"),
                    )
                    if c in cols
                ]
                select = ", ".join([key, "name", *(quote_name(c) for c, _ in extra)])
                info["devices"] = [
                    {
                        "id": _plain(r[0]),
                        "name": _plain(r[1]),
                        **{f: _plain(v) for (_, f), v in zip(extra, r[2:]) if v not in (None, "")},
                    }
                    for r in con.execute(f'SELECT {select} FROM "{table}" ORDER BY 1').fetchall()
                ]
        elif table == "TARGET_INFO_CUDA_DEVICE" and {"cudaId", "numMultiprocessors"} <= set(cols):
            rows = con.execute("SELECT cudaId, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE ORDER BY 1").fetchall()
            info[f"{table}.numMultiprocessors"] = [[_plain(i), _plain(n)] for i, n in rows]
    if {"name", "value"} <= set(tables.get("TARGET_INFO_SYSTEM_ENV", ())):  # the profiled machine's name
        row = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1").fetchone()
        if row and row[0] not in (None, ""):
            info["host"] = str(row[0])
    if {"gpuId", "cudaId", "pid"} <= set(tables.get("TARGET_INFO_CUDA_DEVICE", ())):
        rows = con.execute(
            "SELECT DISTINCT pid FROM TARGET_INFO_CUDA_DEVICE WHERE pid IS NOT NULL AND gpuId != cudaId"
        ).fetchall()
        if rows:  # CUDA_VISIBLE_DEVICES renumbered these processes' devices (gpuvar.ingest.gpu_identity)
            info["gpu_renumbered_processes"] = sorted(int(r[0]) for r in rows)
    return info


def _metadata_notes(info: dict) -> list[str]:
    """Nsight Systems version, time slicing and GPU names, as notes for ingest.json."""
    notes = []
    if "META_DATA_EXPORT" in info:
        meta = dict((n, v) for n, v in info["META_DATA_EXPORT"])
        if "EXPORT_PRODUCT_VERSION" in meta or "EXPORT_SCHEMA_VERSION" in meta:
            notes.append(
                f"Nsight Systems {meta.get('EXPORT_PRODUCT_VERSION', '?')} export "
                f"(schema {meta.get('EXPORT_SCHEMA_VERSION', '?')})"
            )
        if "DERIVED_WINDOW_NS" in meta:
            notes.append(f"time-sliced export: DERIVED_WINDOW_NS {meta['DERIVED_WINDOW_NS']}")
    for table, _ in GPU_TABLES:
        if info.get(f"{table}.name"):
            notes.append(f"GPUs ({table}): " + "; ".join(f"{i}: {n}" for i, n in info[f"{table}.name"]))
        elif info.get(f"{table}.numMultiprocessors"):
            notes.append(
                f"CUDA devices ({table}, no names): "
                + "; ".join(f"cudaId {i}: {sm} SMs" for i, sm in info[f"{table}.numMultiprocessors"])
            )
    return notes


def _lookup(table: pa.Table | None, key: str, value: str, wanted: list) -> list:
    """table[value] for each wanted key, None where absent; a repeated key takes its last row, as dict() would.

    Integer keys are matched in Arrow (a StringIds of millions of NVTX strings is never turned into Python)."""
    if table is None or key not in table.column_names or value not in table.column_names:
        return [None] * len(wanted)
    keys, values = table.column(key), table.column(value)
    if pa.types.is_integer(keys.type) and all(type(k) is int for k in wanted):
        last_first = keys.combine_chunks()[::-1]
        found = pc.index_in(pa.array(wanted, type=_INT64), value_set=last_first).cast(_INT64)
        return values.take(pc.subtract(pa.scalar(table.num_rows - 1, _INT64), found)).to_pylist()  # null: absent
    mapping = dict(zip(keys.to_pylist(), values.to_pylist()))
    return [mapping.get(k) for k in wanted]


def _memcpy_names(enum: pa.Table | None) -> tuple[dict[int, str], str]:
    """copyKind -> 'HtoD'-style name, from ENUM_CUDA_MEMCPY_OPER when present, else the built-in copy."""
    if enum is not None and {"id", "name"} <= set(enum.column_names):
        found, source = dict(zip(enum.column("id").to_pylist(), enum.column("name").to_pylist())), "file"
    else:
        found, source = MEMCPY_OPER_FALLBACK, "built-in"
    return {int(k): copy_kind_short(v) for k, v in found.items() if v is not None and _is_int(k)}, source


def _is_int(value) -> bool:
    try:
        int(value)
    except (TypeError, ValueError, OverflowError):  # text ('HtoD' written by another tool), inf
        return False
    return True


def copy_kind_short(symbol: str) -> str:
    """'CUDA_MEMCPY_KIND_HTOD' -> 'HtoD', 'CUDA_MEMCPY_KIND_UVM_DTOH' -> 'UVM DtoH', '..._UNKNOWN' -> 'Unknown'."""
    tail = str(symbol).removeprefix("CUDA_MEMCPY_KIND_")
    m = re.fullmatch(r"(UVM_)?([A-Z])TO([A-Z])", tail)
    if m:
        return ("UVM " if m.group(1) else "") + f"{m.group(2)}to{m.group(3)}"
    return tail.capitalize() if tail.isupper() else tail


# --- frame building ----------------------------------------------------------------------------------------


def _drop_bad_times(table: pa.Table, out: ReaderOutput, name: str) -> pa.Table:
    """Remove rows with a NULL start/end or end < start, counting each reason."""
    start, end = table.column("start"), table.column("end")
    null = pc.or_(pc.is_null(start), pc.is_null(end))
    n_null = pc.sum(null).as_py() or 0
    backwards = pc.fill_null(pc.less(end, start), False)
    n_back = pc.sum(backwards).as_py() or 0
    out.drop(name, "null start/end timestamp", n_null)
    out.drop(name, "end before start", n_back)
    if n_null or n_back:
        table = table.filter(pc.invert(pc.or_(null, backwards)))
    return table


def int_values(column: pa.ChunkedArray, fill: int) -> np.ndarray:
    """An integer column as exact int64 numpy, `fill` where null."""
    return pc.fill_null(column, fill).to_numpy() if column.null_count else column.to_numpy()


def id_names(ids: list[int], strings: pa.Table | None, null: int, has_null: bool) -> tuple[list[str], list[bool]]:
    """The name of each distinct StringIds id (`null` stands for NULL), and whether StringIds lacked it: an id it
    lacks is kept as '<unknown string id N>', a NULL one as '<no string id>'."""
    names, missing = [], []
    for sid, name in zip(ids, _lookup(strings, "id", "value", ids)):
        name = "<no string id>" if sid == null and has_null else name
        unresolved = name is None or sid == null
        names.append(name or f"<unknown string id {sid}>" if unresolved else name)
        missing.append(unresolved)
    return names, missing


def _resolve_names(ids: pa.ChunkedArray, strings: pa.Table | None) -> tuple[pd.Categorical, int]:
    """StringIds ids -> categorical names, one lookup per distinct id; returns (names, unresolved)."""
    null = np.iinfo(np.int64).min
    codes, uniques = pd.factorize(int_values(ids, null))
    counts = np.bincount(codes, minlength=len(uniques))
    names, missing = id_names(uniques.tolist(), strings, null, bool(ids.null_count))
    unresolved = int(counts[np.asarray(missing, dtype=bool)].sum()) if len(missing) else 0
    if len(set(names)) == len(names):
        return pd.Categorical.from_codes(codes, categories=names), unresolved
    return pd.Categorical(np.asarray(names, dtype=object)[codes]), unresolved


def _launch_ids(table: pa.Table) -> np.ndarray:
    """Rank of each row by (start, correlationId), from 0."""
    start = table.column("start").to_numpy()
    if len(start) < 2 or (start[1:] > start[:-1]).all():  # exports are usually in start order already
        return np.arange(len(start), dtype=np.int64)
    corr = int_values(table.column("correlationId"), -1) if "correlationId" in table.column_names else None
    order = np.lexsort((corr, start)) if corr is not None else np.argsort(start, kind="stable")
    launch = np.empty(len(order), dtype=np.int64)
    launch[order] = np.arange(len(order), dtype=np.int64)
    return launch


def _int_array(column: pa.ChunkedArray):
    """int64 numpy when there are no nulls, else a pandas Int64 array built from values + mask (no floats)."""
    if not column.null_count:
        return column.to_numpy()
    mask = pc.is_null(column).to_numpy(zero_copy_only=False)
    return pd.arrays.IntegerArray(pc.fill_null(column, 0).to_numpy().astype(np.int64, copy=False), mask)


PID_SHIFT, PID_MASK = 24, 0xFFFFFF  # globalPid / globalTid: the pid in bits 24..47 (module docstring)


def pid_of(global_ids: np.ndarray) -> np.ndarray:
    """The process ids in int64 globalPid or globalTid values (numpy)."""
    return (global_ids >> PID_SHIFT) & PID_MASK


def _process_ids(column: pa.ChunkedArray):
    return _int_array(pc.bit_wise_and(pc.shift_right(column, PID_SHIFT), PID_MASK))


def _frame(table: pa.Table, rename: dict[str, str], skip=()) -> dict:
    """Columns as pandas arrays under canonical names (extras keep their source name).

    Integer vendor columns (every column not renamed: contextId, launchType, cluster*, ...) stay Arrow-backed,
    without a copy: schema.finalize hands them to the canonical table as they are, so keeping them costs no
    conversion to numpy and back."""
    cols = {}
    for name, column in zip(table.column_names, table.columns):
        if name in skip:
            continue
        target = rename.get(name, name)
        if pa.types.is_integer(column.type):
            cols[target] = _int_array(column) if name in rename else pd.arrays.ArrowExtensionArray(column)
        else:
            cols[target] = column.to_pandas()
    return cols


def export_head(path: Path, keep: bool) -> ExportHead:
    """read_head on a connection of its own; a damaged database is one InputError line (as read_raw says it)."""
    path = Path(path)
    try:
        con = connect(path)
        try:
            return read_head(path, con, keep)
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise damaged(path, exc) from None


def check_times(path: Path, table: pa.Table, name: str) -> None:
    """An InputError when a fetched kernel or memcpy table's start or end is not integer nanoseconds."""
    for col in ("start", "end"):
        typ = table.schema.field(col).type
        if table.column(col).null_count == table.num_rows:
            continue  # all NULL: every row is dropped and counted
        if not (pa.types.is_integer(typ) or pa.types.is_null(typ)):
            raise InputError(path, f"{name} column {col} holds {typ} values, not integer nanoseconds")


def _kernels(
    table: pa.Table, strings: pa.Table | None, out: ReaderOutput, keep: bool, unresolved: dict | None = None
) -> pd.DataFrame:
    """The kernel rows under canonical names. unresolved: where to count the rows whose name id StringIds lacks,
    by name column (the notes are then the caller's: gpuvar.ingest.nsys_pieces sums them over its pieces);
    None: the notes go to out.notes here."""
    table = _drop_bad_times(table, out, "kernels")
    cols = _frame(table, KERNEL_RENAME, skip=set(NAME_COLUMNS) | (set() if keep else {"globalPid"}))
    counts = {}
    for source, target in NAME_COLUMNS.items():
        if source in table.column_names:
            cols[target], counts[source] = _resolve_names(table.column(source), strings)
    if "kernel_name" not in cols:  # no demangledName: the short name is the best full name there is
        cols["kernel_name"] = cols["kernel_short_name"]
    if "globalPid" in table.column_names:
        cols["process_id"] = _process_ids(table.column("globalPid"))
    cols["launch_id"] = _launch_ids(table)
    cols["wave_size"] = np.full(table.num_rows, 32, dtype=np.int64)
    if unresolved is None:
        out.notes.extend(unresolved_notes(counts))
    else:
        for source, count in counts.items():
            unresolved[source] = unresolved.get(source, 0) + count
    return pd.DataFrame(cols, copy=False)


def unresolved_notes(counts: dict) -> list[str]:
    """The notes on kernel rows whose name id is missing from StringIds, per name column (NAME_COLUMNS order)."""
    return [
        f"{count} kernel row(s) have a {source} id missing from StringIds (kept, named "
        f"'<unknown string id N>', or '<no string id>' when NULL)"
        for source, count in counts.items()
        if count
    ]


def _memcpy(table: pa.Table, kind_names: dict[int, str], out: ReaderOutput, keep: bool) -> pd.DataFrame:
    table = _drop_bad_times(table, out, "memcpy")
    cols = _frame(table, MEMCPY_RENAME, skip=() if keep else {"globalPid"})
    if "copy_kind" in cols:
        kinds = pd.Series(cols["copy_kind"])
        codes, uniques = pd.factorize(kinds, use_na_sentinel=True)
        labels = [kind_names.get(int(k), f"copy kind {int(k)}") if _is_int(k) else str(k) for k in uniques]
        cols["copy_kind_name"] = (
            pd.Categorical.from_codes(codes, categories=labels)
            if len(set(labels)) == len(labels)
            else pd.Categorical(np.asarray(labels + [None], dtype=object)[codes])
        )
    if "globalPid" in table.column_names:
        cols["process_id"] = _process_ids(table.column("globalPid"))
    cols["launch_id"] = _launch_ids(table)
    return pd.DataFrame(cols, copy=False)


# --- entry points ------------------------------------------------------------------------------------------


def read(path: Path, keep_vendor_columns: bool = True) -> ReaderOutput:
    """Kernels (and memcpy when recorded) of an nsys SQLite export under canonical names.

    keep_vendor_columns: also read every other column of the two tables (contextId, launchType, cacheConfig,
    sharedMemoryExecuted, cluster*, ...), kept under their own names; False reads only what the canonical
    schema is derived from, which makes the scan about a third cheaper on the 28-column 2024.6 layout."""
    return normalize(read_raw(path, ReadOptions(keep_vendor_columns=keep_vendor_columns)))


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The export's kernel and memcpy tables as stored (vendor names, rowid order, every row), its StringIds and
    memcpy-kind enum, and its metadata in raw.info. The one step that scans the database."""
    path = Path(path)
    try:
        con = connect(path)
        try:
            return _read_raw(path, con, options.keep_vendor_columns)
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise damaged(path, exc) from None


def _selected(columns: list[str], needed, keep: bool) -> tuple[list[str], list[str]]:
    """(the columns to read, the vendor columns skipped): all, or only the needed ones, in table order."""
    if keep:
        return columns, []
    return [c for c in columns if c in needed], [c for c in columns if c not in needed]


@dataclass
class ExportHead:
    """What an export holds before its big tables are fetched: a RawTrace with its metadata (raw.info), StringIds
    and memcpy-kind enum, the kernel and memcpy columns to read (m_cols None: no memcpy table), and every table's
    columns (catalog)."""

    raw: RawTrace
    k_cols: list[str]
    m_cols: list[str] | None
    tables: dict[str, list[str]]


def read_head(path: Path, con: sqlite3.Connection, keep: bool) -> ExportHead:
    """The checks and small tables of read_raw (an InputError for a file that is not a usable export)."""
    tables = catalog(con)
    if not _is_nsys(tables):
        raise InputError(
            path, "SQLite database is not an Nsight Systems export (no CUPTI_ACTIVITY_KIND_* or StringIds table)"
        )
    if KERNEL_TABLE not in tables:
        raise InputError(path, NO_KERNEL_TABLE)
    k_cols = tables[KERNEL_TABLE]
    require_columns(path, k_cols, ["start", "end"], what=f"{KERNEL_TABLE} table")
    if not ({"demangledName", "shortName"} & set(k_cols)):
        raise InputError(path, f"{KERNEL_TABLE} table lacks a kernel name column (demangledName or shortName)")
    m_cols = tables.get(MEMCPY_TABLE)
    if m_cols is not None:
        require_columns(path, m_cols, ["start", "end"], what=f"{MEMCPY_TABLE} table")
    raw = RawTrace(FORMAT, str(path), {}, info={"keep_vendor_columns": keep, **_metadata(con, tables)})
    if {"id", "value"} <= set(tables.get(STRING_TABLE, ())):
        raw.tables[RAW_STRINGS] = fetch_sqlite3(con, STRING_TABLE, tables[STRING_TABLE])
    not_read = {}
    k_cols, not_read[KERNEL_TABLE] = _selected(k_cols, KERNEL_NEEDED, keep)
    if m_cols is not None:
        m_cols, not_read[MEMCPY_TABLE] = _selected(m_cols, MEMCPY_NEEDED, keep)
        if {"id", "name"} <= set(tables.get(MEMCPY_ENUM, ())):  # read only with copies to name
            raw.tables[RAW_MEMCPY_ENUM] = fetch_sqlite3(con, MEMCPY_ENUM, tables[MEMCPY_ENUM])
    raw.info["columns_not_read"] = {t: cols for t, cols in not_read.items() if cols}
    return ExportHead(raw, k_cols, m_cols, tables)


def _read_raw(path: Path, con: sqlite3.Connection, keep: bool) -> RawTrace:
    head = read_head(path, con, keep)
    raw, k_cols, m_cols, tables = head.raw, head.k_cols, head.m_cols, head.tables
    enum = raw.tables.pop(RAW_MEMCPY_ENUM, None)  # (raw.tables in the order gpuvar read lists them)
    with ThreadPoolExecutor(max_workers=1) as pool:
        k_future = pool.submit(fetch, path, KERNEL_TABLE, k_cols)
        m_table = fetch(path, MEMCPY_TABLE, m_cols) if m_cols is not None else None
        k_table = k_future.result()
    check_times(path, k_table, KERNEL_TABLE)
    raw.tables[RAW_KERNELS] = k_table
    raw.rows_read["kernels"] = k_table.num_rows
    if enum is not None:
        raw.tables[RAW_MEMCPY_ENUM] = enum
    if m_table is not None:
        check_times(path, m_table, MEMCPY_TABLE)
        raw.tables[RAW_MEMCPY] = m_table
        raw.rows_read["memcpy"] = m_table.num_rows
    for table, (wanted, required) in HOST_COLUMNS.items():
        if required <= set(tables.get(table, ())):
            raw.tables[table.lower()] = fetch(path, table, [c for c in wanted if c in tables[table]])
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """Canonical kernels (and memcpy) from read_raw's tables: names resolved, columns renamed, derived columns
    added, rows with unusable timestamps dropped and counted; the export's metadata as notes."""
    if RAW_KERNELS not in raw.tables:
        raise InputError(Path(raw.source), f"raw read lacks the {RAW_KERNELS} table (not an nsys read_raw result)")
    keep = bool(raw.info.get("keep_vendor_columns", True))
    out = start_output(raw)
    out.kernels = _kernels(raw.tables[RAW_KERNELS], raw.tables.get(RAW_STRINGS), out, keep)
    m_table = raw.tables.get(RAW_MEMCPY)
    kind_names = memcpy_setup(raw, out)
    if m_table is not None:
        out.memcpy = _memcpy(m_table, kind_names, out, keep)
    return out


def start_output(raw: RawTrace) -> ReaderOutput:
    """A ReaderOutput with the export's facts (devices, host, renumbered processes) and the notes that come
    before the kernels': metadata, host, the vendor columns not read."""
    out = raw.start_output(None)
    out.notes.extend(_metadata_notes(raw.info))
    out.devices = [d for d in raw.info.get("devices", []) if isinstance(d, dict)]
    out.host = raw.info.get("host") if isinstance(raw.info.get("host"), str) else None
    out.gpu_renumbered = [int(p) for p in raw.info.get("gpu_renumbered_processes", []) if isinstance(p, int)]
    if out.host:
        out.notes.append(f"host: {out.host} (TARGET_INFO_SYSTEM_ENV Hostname)")
    not_read = raw.info.get("columns_not_read", {})
    for table, skipped in ((t, not_read[t]) for t in (KERNEL_TABLE, MEMCPY_TABLE) if not_read.get(t)):
        out.notes.append(
            f"{table}: {len(skipped)} vendor column(s) not read ({', '.join(skipped)}); "
            "--keep-vendor-columns reads them"
        )
    return out


def memcpy_setup(raw: RawTrace, out: ReaderOutput, has_copies: bool | None = None) -> dict[int, str] | None:
    """The copy-kind names of a raw read with a memcpy table (None without one), and the note on where they come
    from (or that there are no copies), which follows the kernels' notes. has_copies: whether the export has a
    memcpy table, where raw.tables does not hold it (None: it does, when there is one)."""
    if not (RAW_MEMCPY in raw.tables if has_copies is None else has_copies):
        out.notes.append(f"no {MEMCPY_TABLE} table: the capture recorded no memory copies")
        return None
    kind_names, source = _memcpy_names(raw.tables.get(RAW_MEMCPY_ENUM))
    if source == "built-in":
        out.notes.append("no ENUM_CUDA_MEMCPY_OPER table: copy kinds named from the built-in CUDA enum")
    return kind_names
