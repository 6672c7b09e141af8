"""An Nsight Systems SQLite export's tables fetched as Arrow, and a damaged file as one line.

connectorx reads a table (2 partitions on the real rowid when it is big and has one, put back in rowid order);
where it cannot read a file, or reads another number of rows than SQLite counts, the pure-sqlite3 reader
(fetch_sqlite3, typed by the declared column types as connectorx types them) is used. Apart from the reader
(gpuvar.ingest.nsys) because this is how rows leave SQLite, not what they mean; `gpuvar bench ingest` times it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest.base import connect_sqlite_readonly, connectorx_uri

SQLITE_MAGIC = b"SQLite format 3\x00"
PARTITION_MIN_ROWS = 200_000  # smaller tables: one query (a partitioned read first scans min/max rowid)
_INT64 = pa.int64()

log = logging.getLogger("gpuvar.ingest.nsys_sqlite")


def connect(path: Path) -> sqlite3.Connection:
    """Read-only connection, shared across the reader's threads."""
    return connect_sqlite_readonly(path, check_same_thread=False)


def catalog(con: sqlite3.Connection) -> dict[str, list[str]]:
    """Table name -> column names of every table (PRAGMA is cheap: the export has ~50-90 tables)."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: [r[1] for r in con.execute(f'PRAGMA table_info("{n}")')] for n in names}


def damaged(path: Path, exc: Exception) -> InputError:
    """One-line error for an unreadable database, saying whether the file is shorter than its header claims."""
    detail = "invalid UTF-8 in the schema" if isinstance(exc, UnicodeDecodeError) else exc
    reason = f"not a readable SQLite database ({detail})"
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
        if not header.startswith(SQLITE_MAGIC):  # (--format nsys-sqlite on a JSON or CSV file)
            return InputError(path, f"not a SQLite database (it starts with {header[:16]!r}, not {SQLITE_MAGIC!r})")
        page = int.from_bytes(header[16:18], "big")
        page = 65536 if page == 1 else page
        pages = int.from_bytes(header[28:32], "big")
        size = os.path.getsize(path)
        if page and pages and size < page * pages:
            reason = f"truncated SQLite database ({size} of {page * pages} bytes; {detail})"
    except OSError:
        pass
    return InputError(path, reason)


def fetch_sqlite3(con: sqlite3.Connection, table: str, columns: list[str]) -> pa.Table:
    """Pure-sqlite3 fallback: rows -> Arrow arrays typed by the declared column type, like connectorx
    (INTEGER -> int64, TEXT -> string, even when every value is NULL); values that do not fit become text."""
    declared = {r[1]: (r[2] or "").upper() for r in con.execute(f'PRAGMA table_info("{table}")')}
    rows = con.execute(f'SELECT {", ".join(quote_name(c) for c in columns)} FROM "{table}"').fetchall()
    arrays = []
    for name, values in zip(columns, zip(*rows) if rows else [()] * len(columns)):
        decl = declared.get(name, "")
        typ = _INT64 if "INT" in decl else pa.string() if any(t in decl for t in ("CHAR", "TEXT", "CLOB")) else None
        try:
            arr = pa.array(values, type=typ)
            arrays.append(arr if arr.type != pa.null() else arr.cast(pa.string()))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            arrays.append(pa.array([None if v is None else str(v) for v in values], type=pa.string()))
    return pa.Table.from_arrays(arrays, names=columns)


def quote_name(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


ROWID_ALIASES = ("_rowid_", "rowid", "oid")  # SQLite's names of a table's rowid, unless a column takes one


def rowid_span(con: sqlite3.Connection, table: str, key: str) -> tuple[int | None, int | None]:
    """(smallest, largest) rowid of `table` (`key`: its rowid_name), (None, None) when it is empty: two b-tree
    lookups. Two subqueries: SQLite looks a lone min() or max() up in the b-tree, but scans for min() and max()
    together."""
    return con.execute(f'SELECT (SELECT min({key}) FROM "{table}"), (SELECT max({key}) FROM "{table}")').fetchone()


def rowid_name(con: sqlite3.Connection, table: str) -> str | None:
    """The name under which `table`'s real rowid can be selected: the first alias no column of the table shadows
    (a column named `rowid` is what `rowid` then means), or None: every alias is a column, or the table is
    WITHOUT ROWID."""
    columns = {r[1].lower() for r in con.execute(f'PRAGMA table_info("{table}")')}
    alias = next((a for a in ROWID_ALIASES if a not in columns), None)
    if alias is None:
        return None
    try:
        con.execute(f'SELECT {alias} FROM "{table}" LIMIT 1').fetchall()
    except sqlite3.OperationalError:  # no such column: a WITHOUT ROWID table
        return None
    return alias


def fetch_connectorx(path: Path, table: str, columns: list[str], rows: int, rowid: str | None) -> pa.Table:
    """The table as Arrow through connectorx (gpuvar.ingest.base.connectorx_uri), 2 partitions on the real rowid
    when it is big and has one."""
    import connectorx as cx

    select = ", ".join(quote_name(c) for c in columns)
    with connectorx_uri(path) as uri:
        if rowid is not None and rows >= PARTITION_MIN_ROWS and (os.cpu_count() or 1) > 1:
            sql = f'SELECT {rowid} AS "__gpuvar_rowid", {select} FROM "{table}"'
            result = cx.read_sql(uri, sql, return_type="arrow", partition_on="__gpuvar_rowid", partition_num=2)
            result = in_rowid_order(result, "__gpuvar_rowid").drop_columns(["__gpuvar_rowid"])
        else:
            result = cx.read_sql(uri, f'SELECT {select} FROM "{table}"', return_type="arrow")
    if result.column_names != columns:
        raise ValueError(f"connectorx returned columns {result.column_names}")
    return result


def in_rowid_order(table: pa.Table, rowid: str) -> pa.Table:
    """The partitions' record batches come back interleaved: put them back in table order by their first
    rowid (no copy), so that a table already in start order stays sorted and needs no sort at write time."""
    batches = [b for b in table.to_batches() if b.num_rows]
    batches.sort(key=lambda b: b.column(rowid)[0].as_py())
    ordered = pa.Table.from_batches(batches, schema=table.schema)
    ids = ordered.column(rowid)
    if ids.null_count == 0 and len(ids) > 1:
        values = ids.to_numpy()
        if not (values[1:] > values[:-1]).all():  # batches overlap: order the rows themselves
            ordered = ordered.take(np.argsort(values, kind="stable"))
    return ordered


def fetch(path: Path, table: str, columns: list[str]) -> pa.Table:
    """Whole table as Arrow: connectorx when it reads every row of it on this file, sqlite3 otherwise (own
    connection, so the kernel and memcpy tables can be fetched from two threads). The rows SQLite counts are
    compared with the rows fetched: a lossy fetch (a partition range that misses a row) is never counted."""
    con = connect(path)
    try:
        rows = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        try:
            result = fetch_connectorx(path, table, columns, rows, rowid_name(con, table))
            if result.num_rows == rows:
                return result
            log.debug("%s: connectorx read %d of the %d rows of %s; using sqlite3", path, result.num_rows, rows, table)
        except BaseException as exc:  # noqa: BLE001 - any connectorx failure falls back to the reference reader
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise  # (a Rust panic on a damaged file is a BaseException too: pyo3's PanicException)
            log.debug("%s: connectorx could not read %s (%s); using sqlite3", path, table, exc)
        return fetch_sqlite3(con, table, columns)
    finally:
        con.close()
