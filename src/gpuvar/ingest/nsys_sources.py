"""Where the pieces of a big Nsight Systems export are read from (gpuvar.ingest.nsys_pieces): the export itself
(SqliteSource, `gpuvar ingest`), or the raw tables `gpuvar read` stored (ParquetSource, `gpuvar normalize`: the
workflow's two-step ingest), and the raw read of such an export written range by range (write_raw_in_ranges).

Both sources give a table's rows in ranges [lo, hi) of a row key with that key as the first column (ROWID): the
SQLite rowid (a range scan of its b-tree through connectorx, one query per range), or the row's index in the raw
Parquet file (the row groups that hold the range; the last one read is kept for the next range).
"""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar.ingest import nsys
from gpuvar.ingest.base import select_arrow
from gpuvar.ingest.nsys_sqlite import connect, quote_name, rowid_name, rowid_span

ROWID = "__gpuvar_rowid"
RAW_NAMES = {nsys.KERNEL_TABLE: nsys.RAW_KERNELS, nsys.MEMCPY_TABLE: nsys.RAW_MEMCPY}


class SqliteSource:
    """An export's kernel and memcpy tables read in rowid ranges."""

    def __init__(self, path: Path):
        self.path = Path(path)
        con = connect(self.path)
        try:
            present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            host = [t for t in (nsys.RUNTIME_TABLE, nsys.NVTX_TABLE) if t in present]
            self.rowids = {t: rowid_name(con, t) for t in [*RAW_NAMES, *host]}
        finally:
            con.close()

    def first(self, table: str) -> int:
        """The table's first rowid (a b-tree lookup; 0 when empty)."""
        con = connect(self.path)
        try:
            found = con.execute(f'SELECT min({self.rowids[table]}) FROM "{table}"').fetchone()[0]
        finally:
            con.close()
        return int(found) if found is not None else 0

    def rows(self, table: str) -> int:
        """The rows SQLite counts (a scan of the table's b-tree pages)."""
        con = connect(self.path)
        try:
            return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        finally:
            con.close()

    def _query(self, table: str, columns: list[str], where: str, tail: str = "") -> pa.Table:
        from gpuvar.ingest.nsys_plan import NotInPieces

        rowid = self.rowids[table]
        select = ", ".join(quote_name(c) for c in columns)
        try:
            return select_arrow(
                self.path, f'SELECT {rowid} AS "{ROWID}", {select} FROM "{table}" WHERE {where} ORDER BY {rowid}{tail}'
            )
        except Exception as exc:  # noqa: BLE001 - a value not of its column's type: the in-memory reader takes it as text
            detail = " ".join(str(exc).split())[:200]
            raise NotInPieces(f"connectorx cannot read {table} range by range ({detail})") from None

    def fetch(self, table: str, columns: list[str], lo: int, hi: int | None, start_max: int | None = None) -> pa.Table:
        """Rows lo <= rowid < hi (hi None: to the end) in rowid order, only those starting by start_max if given."""
        rowid = self.rowids[table]
        where = f"{rowid} >= {int(lo)}" + (f" AND {rowid} < {int(hi)}" if hi is not None else "")
        return self._query(table, columns, where + (f" AND start <= {int(start_max)}" if start_max is not None else ""))

    def spans(self, table: str, columns: list[str], step: int, ahead: int = 3):
        """ranges(), read faster: where the rowids are dense (their span at most twice the rows), consecutive rowid
        ranges of `step` rowids, `ahead` read at once in threads (connectorx releases the GIL: pass 1 of an export
        in pieces waited on SQLite for two thirds of its time); else ranges() with the next run read ahead."""
        rows = self.rows(table)
        con = connect(self.path)
        try:
            lo, hi = rowid_span(con, table, self.rowids[table])
        finally:
            con.close()
        if not rows or lo is None or hi - lo + 1 > 2 * rows:
            return rows, prefetched(self.ranges(table, columns, step)[1])
        fetch = partial(self.fetch, table, columns)
        return rows, _in_order(lambda a: fetch(a, a + step), range(lo, hi + 1, step), ahead)

    def first_run(self, table: str, columns: list[str], step: int) -> pa.Table:
        """The first run ranges() yields, without counting the table (count(*) scans its pages)."""
        return self._query(table, columns, "1", f" LIMIT {int(step)}")

    def ranges(self, table: str, columns: list[str], step: int):
        """(rows SQLite counts, the rows in consecutive runs of `step` rows): each run starts after the last rowid
        of the one before, a seek in the b-tree, so sparse rowids (up to 2**63 - 1) cost nothing."""

        def runs():
            last = None
            while True:
                where = f"{self.rowids[table]} > {last}" if last is not None else "1"
                chunk = self._query(table, columns, where, f" LIMIT {int(step)}")
                if chunk.num_rows:
                    yield chunk
                    last = int(chunk.column(ROWID)[-1].as_py())
                if chunk.num_rows < step:
                    return

        return self.rows(table), runs()


def prefetched(runs):
    """The runs of an iterator, each next one read in a thread while the caller works on the one it has (connectorx
    and the Parquet reader release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    runs, done = iter(runs), object()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuvar-runs") as pool:
        pending = pool.submit(next, runs, done)
        while (run := pending.result()) is not done:
            pending = pool.submit(next, runs, done)
            yield run


def _in_order(fetch, starts, ahead: int):
    """fetch(a) for each a of `starts`, `ahead` at once in threads, yielded in order (those with rows)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor
    from itertools import islice

    starts = iter(starts)
    with ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="gpuvar-spans") as pool:
        pending = deque(pool.submit(fetch, a) for a in islice(starts, ahead))
        while pending:
            chunk = pending.popleft().result()
            following = next(starts, None)
            if following is not None:
                pending.append(pool.submit(fetch, following))
            if chunk.num_rows:
                yield chunk


class ParquetSource:
    """The raw kernel and memcpy tables of `gpuvar read` (raw/<table>.parquet), read in row ranges."""

    def __init__(self, folder: Path, label: str):
        self.folder, self.path = Path(folder), Path(label)
        self._cache: dict[tuple, pa.Table] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_cache": {}}  # (a worker of nsys_piece_work reads its own row groups)

    def _file(self, table: str) -> pq.ParquetFile:
        from gpuvar.ingest.raw import table_file

        return pq.ParquetFile(self.folder / table_file(RAW_NAMES[table]))

    def first(self, table: str) -> int:
        return 0

    def fetch(self, table: str, columns: list[str], lo: int, hi: int | None, start_max: int | None = None) -> pa.Table:
        file = self._file(table)
        hi = file.metadata.num_rows if hi is None else hi
        sizes = [file.metadata.row_group(g).num_rows for g in range(file.metadata.num_row_groups)]
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        parts = []
        for g in range(len(sizes)):
            a, b = max(lo, int(offsets[g])), min(hi, int(offsets[g + 1]))
            if a >= b:
                continue
            key = (table, tuple(columns), g)
            if key not in self._cache:
                self._cache = {key: file.read_row_group(g, columns=columns)}  # the last group read only
            parts.append(self._cache[key].slice(a - int(offsets[g]), b - a))
        schema = file.schema_arrow
        empty = pa.table({c: pa.array([], schema.field(c).type) for c in columns})
        result = pa.concat_tables(parts).combine_chunks() if parts else empty
        result = result.add_column(0, ROWID, pa.array(np.arange(lo, lo + result.num_rows, dtype=np.int64)))
        if start_max is not None:
            result = result.filter(pc.fill_null(pc.less_equal(result.column("start"), start_max), True))
        return result

    def first_run(self, table: str, columns: list[str], step: int) -> pa.Table:
        """The first run ranges() yields."""
        return self.fetch(table, columns, 0, min(step, self._file(table).metadata.num_rows))

    def spans(self, table: str, columns: list[str], step: int):
        """ranges() with the next run read ahead (one reader: the row-group cache is this object's)."""
        rows, runs = self.ranges(table, columns, step)
        return rows, prefetched(runs)

    def ranges(self, table: str, columns: list[str], step: int):
        rows = self._file(table).metadata.num_rows
        return rows, (self.fetch(table, columns, a, min(a + step, rows)) for a in range(0, rows, step))


def write_raw_in_ranges(path: Path, folder: Path, keep_vendor_columns: bool, step: int) -> dict:
    """`gpuvar read` of a big export: what write_raw stores (the tables, raw.json last), the kernel, memcpy and host
    tables copied range by range into Parquet row groups of `step` rows; for an export with CUDA API calls, the
    launches' facts too (gpuvar.ingest.nsys_host_facts: `gpuvar normalize` then takes it in pieces). Returns the
    rows per table."""
    import tempfile

    from gpuvar.ingest.nsys_host_facts import NotInPieces, Scratch, has_launch_calls, host_facts
    from gpuvar.ingest.nsys_host_parquet import export_facts
    from gpuvar.ingest.raw import table_file, write_manifest

    head = nsys.export_head(path, keep_vendor_columns)
    raw, source = head.raw, SqliteSource(path)
    folder.mkdir(parents=True, exist_ok=True)
    shapes = {}
    enum = raw.tables.pop(nsys.RAW_MEMCPY_ENUM, None)  # (the order read_raw gives the tables)
    for name, table in list(raw.tables.items()):
        pq.write_table(table, folder / table_file(name), compression="zstd")
        shapes[name] = (table.num_rows, table.num_columns)
    for table, columns in ((nsys.KERNEL_TABLE, head.k_cols), (nsys.MEMCPY_TABLE, head.m_cols)):
        if columns is None:
            continue
        if table == nsys.MEMCPY_TABLE and enum is not None:
            pq.write_table(enum, folder / table_file(nsys.RAW_MEMCPY_ENUM), compression="zstd")
            shapes[nsys.RAW_MEMCPY_ENUM] = (enum.num_rows, enum.num_columns)
        written = _copy_in_ranges(source, table, columns, folder / table_file(RAW_NAMES[table]), step, check=True)
        shapes[RAW_NAMES[table]] = (written, len(columns))
        raw.rows_read["kernels" if table == nsys.KERNEL_TABLE else "memcpy"] = written
    for table, (wanted, required) in nsys.HOST_COLUMNS.items():  # (NVTX ranges: no launch calls to place)
        if required <= set(head.tables.get(table, ())):
            columns = [c for c in wanted if c in head.tables[table]]
            written = _copy_in_ranges(source, table, columns, folder / table_file(table.lower()), step, check=False)
            shapes[table.lower()] = (written, len(columns))
    extra = None
    if has_launch_calls(head):
        with tempfile.TemporaryDirectory(prefix=".gpuvar-host-", dir=folder) as scratch_folder:
            scratch = Scratch(path, Path(scratch_folder))
            try:
                host_facts(scratch, head, None)
                extra = {"host_facts": export_facts(scratch, head, folder)}
            except NotInPieces as exc:  # `gpuvar normalize` takes it in memory
                import logging

                logging.getLogger("gpuvar.ingest.nsys_sources").info("%s: no launch facts stored: %s", path, exc)
            finally:
                scratch.close()
    write_manifest(raw, shapes, folder, extra)
    return {name: rows for name, (rows, _) in shapes.items()}


def _copy_in_ranges(source: SqliteSource, table: str, columns: list[str], target: Path, step: int, check: bool) -> int:
    """A table copied range by range into the Parquet file `target`; its rows (an InputError where SQLite counts
    another number). check: the times must be integer nanoseconds (kernels, copies)."""
    rows, chunks = source.ranges(table, columns, step)
    written, writer = 0, None
    try:
        for chunk in chunks:
            chunk = chunk.drop_columns([ROWID])
            if check:
                nsys.check_times(source.path, chunk, table)
            if writer is None:
                writer = pq.ParquetWriter(target, chunk.schema, compression="zstd")
            writer.write_table(chunk.cast(writer.schema) if chunk.schema != writer.schema else chunk)
            written += chunk.num_rows
        if writer is None:  # no rows: the empty table, typed as the query types it
            empty = source.fetch(table, columns, 0, 0).drop_columns([ROWID])
            pq.write_table(empty, target, compression="zstd")
    finally:
        if writer is not None:
            writer.close()
    if written != rows:
        raise nsys.damaged(source.path, sqlite3.DatabaseError(f"{table}: read {written} of the {rows} rows it counts"))
    return written
