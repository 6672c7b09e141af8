"""The SQL pieces the host-facts passes share (gpuvar.ingest.nsys_host_facts, nsys_host_sweep, nsys_host_parquet):
how a launch's rows are selected with their call, the NVTX text, the export's row ids and the integer reads.

Why one module: the passes (nsys_host_facts), the sweep (nsys_host_sweep) and the Parquet facts
(nsys_host_parquet) each query the same export, and the launches they place must be the same rows, read the same
way: one spelling of a launch's select, of a time or id read through float64, of the rowid, so that a change to
one is a change to all. Every query here runs on the scratch connection of nsys_host_facts.open_scratch, with the
export attached read-only as `x`; launches_with_calls_sql also joins the scratch table `calls` (pass 1).
"""

from __future__ import annotations

import sqlite3

from gpuvar.ingest import nsys
from gpuvar.ingest.nsys_plan import NotInPieces, kept_kernels_sql

FETCH_ROWS = 1 << 16  # rows per fetch from SQLite (and per batch read back from the Parquet facts)
PID_MASK_SQL = str(nsys.PID_MASK)  # the pid bits of a globalPid / globalTid after `>> 24`, as SQL text


def through_float64(expr: str) -> str:
    """expr read as host_timeline.ints reads it: through float64. Epoch nanoseconds beyond 2**53 round there, and
    the passes must order and match launches on the same values as the in-memory path."""
    return f"CAST(CAST({expr} AS REAL) AS INTEGER)"


def export_rowid(con: sqlite3.Connection, table: str) -> str:
    """The name that selects the export table's real rowid (nsys_sqlite.rowid_name, on the attached export): the
    facts are keyed by it, so a column named rowid must not shadow it."""
    from gpuvar.ingest.nsys_sqlite import ROWID_ALIASES

    columns = {r[1].lower() for r in con.execute(f'PRAGMA x.table_info("{table}")')}
    alias = next((a for a in ROWID_ALIASES if a not in columns), None)
    if alias is None:
        raise NotInPieces(f"{table} has no rowid that a column does not shadow")
    return alias


def fetch_batches(con: sqlite3.Connection, sql: str, params=()):
    """The rows of a query in lists of up to FETCH_ROWS tuples: memory follows the batch, not the table."""
    cursor = con.execute(sql, params)
    while True:
        rows = cursor.fetchmany(FETCH_ROWS)
        if not rows:
            return
        yield rows


def launches_with_calls_sql(con, head: nsys.ExportHead, table: str, kind: int, extra: list[str]) -> str:
    """One table's launches (those the reader keeps) with their call: kind, rowid, GPU start, correlation id (-1
    for none), whether a call was found, call time (else GPU start), thread (-1 for none), extra columns.
    Pass 3 and the sweep select the kernels through it, so both see the same launches in the same call order."""
    columns = head.k_cols if table == nsys.KERNEL_TABLE else head.m_cols
    pid = f"coalesce(({through_float64('t.globalPid')} >> 24) & {PID_MASK_SQL}, -1)" if "globalPid" in columns else "-1"
    corr = f"coalesce({through_float64('t.correlationId')}, -1)" if "correlationId" in columns else "-1"
    join = f"LEFT JOIN calls c ON c.pid = {pid} AND c.corr = {corr} AND {corr} >= 0"
    gs = through_float64("t.start")
    return (
        f"SELECT {kind} AS kind, t.{export_rowid(con, table)} AS rid, {gs} AS gs, {corr} AS corr,"
        f" c.ts IS NOT NULL AS hc, coalesce(c.ts, {gs}) AS ot, coalesce(c.tid, -1) AS th"
        f"{''.join(', ' + e for e in extra)}"
        f' FROM x."{table}" t {join} WHERE {kept_kernels_sql("t")}'
    )


def nvtx_text_sql(head: nsys.ExportHead) -> tuple[str, str]:
    """(the NVTX text expression, the join it needs): text, else StringIds' value for textId. The step ranges
    (pass 2) and the op ranges (the sweep) must read a range's text alike, or a step would be an op."""
    columns = head.tables.get(nsys.NVTX_TABLE, [])
    text = "n.text" if "text" in columns else "NULL"
    if "textId" in columns and "StringIds" in head.tables:
        return f"coalesce({text}, s.value)", "LEFT JOIN x.StringIds s ON s.id = n.textId"
    return text, ""


def has_nvtx_ranges(head: nsys.ExportHead) -> bool:
    """Whether the export has the NVTX table with the columns a range needs (nsys.HOST_COLUMNS): without it there
    are no step ranges and no op ranges to read."""
    return nsys.HOST_COLUMNS[nsys.NVTX_TABLE][1] <= set(head.tables.get(nsys.NVTX_TABLE, ()))
