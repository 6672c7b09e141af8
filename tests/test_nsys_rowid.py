"""No SQLite row is lost between the table and the kernels table (issue 35, item 3).

The Nsight Systems reader fetches big tables through connectorx in two partitions on rowid. Before: a user
column named `rowid` (which SQLite's `rowid` then means) holding NULLs lost those rows (216,000 of 240,000
kernels read), a row at rowid 2^63-1 fell outside the last range (239,999 of 240,000), rows at both extreme rowids
read as "no kernel rows", and a WITHOUT ROWID table was "not a readable SQLite database"; every case that read
reported `balanced: true`, because rows were counted after the fetch. Now the partitions use the real rowid
(`_rowid_`, `rowid` or `oid`, whichever no column shadows) and only where the table has one, `count(*)` is
compared with the rows fetched, and where they differ the exact sqlite3 reader reads the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuvar.ingest import ingest

ROWS = 3000
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
MAX_ROWID = 2**63 - 1


@pytest.fixture
def partitioned(monkeypatch):
    """Tables of the demo's size are read in two partitions (as tables of 200,000 rows and more are)."""
    from gpuvar.ingest import nsys_sqlite

    monkeypatch.setattr(nsys_sqlite, "PARTITION_MIN_ROWS", 100)
    monkeypatch.setattr(nsys_sqlite.os, "cpu_count", lambda: 2)


@pytest.fixture
def trace(tmp_path) -> Path:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    path = tmp_path / "t.sqlite"
    write_nsys_demo(path, ROWS, 1, 0)
    return path


def _edit(path: Path, *statements: str) -> None:
    con = sqlite3.connect(path)
    with con:
        for sql in statements:
            con.execute(sql)
    con.close()


def _kernels(path: Path, tmp_path: Path) -> dict:
    return ingest(path, tmp_path / "out")["tables"]["kernels"]


def _starts(path: Path) -> list[int]:
    con = sqlite3.connect(path)
    starts = sorted(r[0] for r in con.execute(f"SELECT start FROM {KERNELS}"))
    con.close()
    return starts


def _written_starts(tmp_path: Path) -> list[int]:
    import pyarrow.parquet as pq

    return sorted(pq.read_table(tmp_path / "out" / "kernels.parquet").column("start").to_pylist())


def test_a_user_column_named_rowid_holding_nulls(trace, tmp_path, partitioned):
    _edit(
        trace,
        f"ALTER TABLE {KERNELS} ADD COLUMN rowid INTEGER",
        f"UPDATE {KERNELS} SET rowid = CASE WHEN _rowid_ % 10 = 0 THEN _rowid_ END",  # 90 % NULL
    )
    k = _kernels(trace, tmp_path)
    assert (k["rows_read"], k["rows_written"]) == (ROWS, ROWS)
    assert _written_starts(tmp_path) == _starts(trace)


def test_a_row_at_the_largest_rowid(trace, tmp_path, partitioned):
    _edit(trace, f"UPDATE {KERNELS} SET _rowid_ = {MAX_ROWID} WHERE _rowid_ = (SELECT max(_rowid_) FROM {KERNELS})")
    k = _kernels(trace, tmp_path)
    assert (k["rows_read"], k["rows_written"]) == (ROWS, ROWS)
    assert _written_starts(tmp_path) == _starts(trace)


def test_rows_at_both_extreme_rowids(trace, tmp_path, partitioned):
    _edit(
        trace,
        f"UPDATE {KERNELS} SET _rowid_ = {MAX_ROWID} WHERE _rowid_ = (SELECT max(_rowid_) FROM {KERNELS})",
        f"UPDATE {KERNELS} SET _rowid_ = {-MAX_ROWID - 1} WHERE _rowid_ = (SELECT min(_rowid_) FROM {KERNELS})",
    )
    k = _kernels(trace, tmp_path)
    assert (k["rows_read"], k["rows_written"]) == (ROWS, ROWS)


def test_a_without_rowid_kernel_table(trace, tmp_path):
    """Item 9's wrong reason: 'not a readable SQLite database' for a table SQLite reads fine."""
    con = sqlite3.connect(trace)
    columns = ", ".join(f'"{r[1]}" {r[2]}' for r in con.execute(f"PRAGMA table_info({KERNELS})"))
    con.close()
    _edit(
        trace,
        f"ALTER TABLE {KERNELS} RENAME TO old_kernels",
        f"CREATE TABLE {KERNELS} ({columns}, PRIMARY KEY (start, correlationId)) WITHOUT ROWID",
        f"INSERT INTO {KERNELS} SELECT * FROM old_kernels",
        "DROP TABLE old_kernels",
    )
    k = _kernels(trace, tmp_path)
    assert (k["rows_read"], k["rows_written"]) == (ROWS, ROWS)
    assert _written_starts(tmp_path) == _starts(trace)


def test_a_fetch_that_loses_rows_falls_back_to_the_exact_reader(trace, tmp_path, monkeypatch):
    """Whatever made connectorx return fewer rows than the table holds, the count check catches it."""
    from gpuvar.ingest import nsys_sqlite

    real = nsys_sqlite.fetch_connectorx

    def lossy(path, table, columns, rows_hint, rowid):
        result = real(path, table, columns, rows_hint, rowid)
        return result.slice(0, result.num_rows - 1) if table == KERNELS else result

    monkeypatch.setattr(nsys_sqlite, "fetch_connectorx", lossy)
    k = _kernels(trace, tmp_path)
    assert (k["rows_read"], k["rows_written"]) == (ROWS, ROWS)
