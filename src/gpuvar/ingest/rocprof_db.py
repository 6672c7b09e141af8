"""rocprof v1 `results.db`: SQLite with one table KERN holding exactly the results.csv columns.

Same mapping as the CSV (amd_common); KernelName is stored with its CSV quotes ('"name"'), which are
removed. Opened read-only, so a profile on a read-only share can be ingested. KERN is read as Arrow through
connectorx (typed by the declared column types); sqlite3 rows are the fallback where connectorx cannot read the
file (a column mixing types, which is then kept as text: raw.info["mixed_type_columns"]).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common
from gpuvar.ingest.base import ReaderOutput, connect_sqlite_readonly, select_arrow
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "rocprof-db"
SQLITE_MAGIC = b"SQLite format 3\x00"
TABLE = "KERN"
RAW_TABLE = "kern"
log = logging.getLogger(__name__)


def _connect(path: Path) -> sqlite3.Connection:
    return connect_sqlite_readonly(path)


def _tables(path: Path) -> set[str]:
    con = _connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    finally:
        con.close()


def sniff(path: Path, head: bytes) -> bool:
    """SQLite magic and a KERN table (nsys exports have CUPTI_* / StringIds tables instead)."""
    if not head.startswith(SQLITE_MAGIC):
        return False
    try:
        return TABLE in _tables(path)
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return False


def _query(path: Path) -> pd.DataFrame:
    """All KERN rows with their column names; SQLite errors become one-line InputErrors."""
    try:
        con = _connect(path)
        try:
            cur = con.execute(f'SELECT * FROM "{TABLE}"')
            names = [d[0] for d in cur.description]
            return pd.DataFrame.from_records(cur.fetchall(), columns=names)
        finally:
            con.close()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            raise InputError(path, f"SQLite database has no {TABLE} table (not a rocprof results.db)") from None
        raise InputError(path, f"cannot read SQLite database ({exc})") from None
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"not a readable SQLite database ({exc})") from None
    except UnicodeDecodeError:
        raise InputError(path, "not a readable SQLite database (invalid UTF-8 in the schema)") from None


def _to_arrow(df: pd.DataFrame, raw: RawTrace) -> pa.Table:
    """KERN as an Arrow table. SQLite lets one column mix types (a damaged or hand-edited file); such a column
    is kept as text (listed in raw.info), which the mapping reads as it did the mixed values: numbers are parsed
    from their text either way, and the canonical writer stores a mixed extra column as text."""
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    mixed = []
    for col in df.columns:
        try:
            pa.array(df[col], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            df[col] = df[col].astype(str).where(df[col].notna(), None)
            mixed.append(col)
    raw.info["mixed_type_columns"] = [str(c) for c in mixed]
    return pa.Table.from_pandas(df, preserve_index=False)


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The KERN table as stored (raw table `kern`, rocprof's column names, KernelName still quoted)."""
    path = Path(path)
    raw = RawTrace(FORMAT, str(path), {})
    table = _arrow_native(path)
    if table is None:
        df = _query(path)
        amd_common.require_kernel_name(path, df.columns)
        table = _to_arrow(df, raw)
    amd_common.require_kernel_name(path, table.column_names)
    raw.rows_read["kernels"] = table.num_rows
    raw.tables[RAW_TABLE] = table
    return raw


def _arrow_native(path: Path) -> pa.Table | None:
    """KERN through connectorx; None where it cannot be read that way (no KERN table, a damaged file, a value of
    another type than its column declares, an undeclared column type): the sqlite3 path then reads it or says
    why it cannot. A column with no declared type is left to sqlite3, which types it by its values."""
    try:
        con = _connect(path)
        try:
            declared = [r[2] for r in con.execute(f'PRAGMA table_info("{TABLE}")')]
            count = con.execute(f'SELECT count(*) FROM "{TABLE}"').fetchone()[0] if declared else 0
        finally:
            con.close()
        if not declared or not all(declared):
            return None
        table = select_arrow(path, f'SELECT * FROM "{TABLE}"')
    except BaseException as exc:  # noqa: BLE001 - any failure falls back to the sqlite3 reader
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise  # (a Rust panic on a damaged file is a BaseException too: pyo3's PanicException)
        log.debug("%s: connectorx could not read %s (%s); using sqlite3", path, TABLE, exc)
        return None
    return table if table.num_rows == count else None


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernel rows with canonical names where known (amd_common's mapping), every other column kept."""
    source = Path(raw.source).name
    out = raw.start_output(None)
    df = amd_common.map_amd_dispatch_columns(amd_common.raw_frame(raw, RAW_TABLE), out, source)
    df = amd_common.check_timestamps(df, out, source)
    out.kernels = amd_common.drop_nameless(df, out)
    return out


def read(path: Path) -> ReaderOutput:
    """Kernel rows of KERN, canonical names where known, every other column kept."""
    return normalize(read_raw(path))
