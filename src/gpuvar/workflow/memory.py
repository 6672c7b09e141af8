"""The memory a workflow job asks for, from what it will hold, where a constant would be wrong by orders.

Why: on Slurm a job past its request is killed (OUT_OF_MEMORY), and the executor asks for `mem_mb`. Most jobs
hold a bounded amount whatever the trace (ingest in pieces, binning and findings in batches). merge_ranks
(`gpuvar ingest-merge`) once held every rank's rows (1.06 KB a Kineto launch: ~28 GB for 256 ranks of 100 k
launches); it is now a k-way merge of the ranks' files (gpuvar.ingest.merge_rows) that holds about one canonical
row group of the merged table: measured 0.65 GB peak for 32 ranks and ~0.7 GB for 256 (54 columns), ~40 bytes per
cell of a row group. So the request follows the row group's cells, not the launches: a merge of wide counter
tables (thousands of columns) asks for more than one of Kineto traces, a merge of many ranks no more than of few.
The rule's two threads merge two groups of 16 ranks into scratch files at once: each holds a quarter of the last
level's rows (a 64 Ki-row run and scratch row group against a row group and a run), 0.83 GB at 256 ranks.

The ingest jobs (ingest_trace / normalize_columns, ingest_rank / normalize_rank) hold the whole trace for every format
but big Nsight Systems exports (taken in pieces), so a constant request killed a big Kineto, rocpd or CSV trace on
Slurm: ingest_mb follows the trace's size (in_memory_bytes), and doubles on the retry after a failure (the profile's
`retries: 1`: a job past its request is killed, then resubmitted with twice the memory).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpuvar.canonical_io import ROW_GROUP_ROWS
from gpuvar.errors import GpuvarError

MERGE_BYTES_PER_CELL = 48  # measured ~40 (above), with a margin
MERGE_ROWS_HELD = ROW_GROUP_ROWS + (1 << 16)  # a row group written, a run of rows merged into the next
MERGE_BASE_MB = 1000  # the interpreter, pyarrow and pandas, the pages of the open files, the reports
FLOOR_MB = 4000  # default-resources' mem_mb in profiles/slurm: never ask for less than a plain job


def _tables(reports) -> dict[str, tuple[int, int]]:
    """Per table, (rows the per-rank ingests wrote in all, the most columns of one); reports not written yet
    count nothing."""
    tables: dict[str, tuple[int, int]] = {}
    for path in reports:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue  # a dry run before the ranks are ingested: the floor
        found = report.get("tables") if isinstance(report, dict) else None
        for name, table in found.items() if isinstance(found, dict) else ():
            if not isinstance(table, dict):
                continue
            rows, columns = (table.get(k) for k in ("rows_written", "columns"))
            rows = rows if isinstance(rows, int) and rows > 0 else 0
            columns = columns if isinstance(columns, int) and columns > 0 else 0
            before = tables.get(name, (0, 0))
            tables[name] = (before[0] + rows, max(before[1], columns))
    return tables


def rows_in_reports(reports) -> int:
    """The rows the per-rank ingests wrote (every table of each ingest.json)."""
    return sum(rows for rows, _ in _tables(reports).values())


def merge_mb(reports) -> int:
    """mem_mb for merging the ranks whose ingest.json files are `reports`: the widest table's row group."""
    cells = max((min(rows, MERGE_ROWS_HELD) * columns for rows, columns in _tables(reports).values()), default=0)
    return max(FLOOR_MB, MERGE_BASE_MB + math.ceil(cells * MERGE_BYTES_PER_CELL / 2**20))


# What an in-memory ingest holds at its peak (`gpuvar read` and `gpuvar normalize` each; /usr/bin/time, 2026-11-27),
# beyond INGEST_BASE_MB: per byte of the (uncompressed) file for text and rocpd traces, per row for Nsight Systems
# exports below the pieces threshold. Measured: Kineto 0.59 GB for 338 MB of JSON (300 k kernels), 1.34 GB for
# 1.13 GB (1 M); rocpd 0.33 GB for 15.7 MB (180 k dispatches); rocprof v1 with 15 counters 1.64 GB for 292 MB
# (1 M); nsys 1.46 GB for 1 M kernels and 0.5 M copies, 1.81 GB with CUDA API calls.
INGEST_BASE_MB = 300
BYTES_PER_FILE_BYTE = {"pytorch-kineto": 1.5, "rocpd-sqlite": 12.0, "rocprof-csv": 6.0, "rocprofv3-csv": 6.0,
                       "ncu-csv": 6.0, "omniperf": 6.0}  # fmt: skip
NSYS_BYTES_PER_KERNEL, NSYS_BYTES_PER_COPY = 1600, 600
GZIP_RATIO_AT_LEAST = 5  # a JSON or CSV trace shrinks 8-15x; gzip records the size modulo 4 GiB only
OTHER_RATIO = 10  # bzip2, xz, zstd: their size is not read, the ratio assumed


def ingest_mb(sources, fmt: str = "auto", attempt: int = 1) -> int:
    """mem_mb for ingesting `sources` (the files of one trace, or a folder) in memory: the floor, or what the trace
    needs (in_memory_bytes), times the attempt (a retry after the job was killed asks for twice as much). Sources
    that do not exist yet (the demo's, on a dry run) count nothing."""
    files = [sources] if isinstance(sources, str | Path) else list(sources)
    need = sum(in_memory_bytes(Path(f), fmt) for f in files)
    return max(FLOOR_MB, INGEST_BASE_MB + math.ceil(need / 2**20)) * max(1, int(attempt))


def in_memory_bytes(path: Path, fmt: str = "auto") -> int:
    """What ingesting `path` holds beyond the interpreter: 0 for a format that is bounded (an Nsight Systems export
    in pieces), small or unknown, or a path that cannot be read (the ingest says why)."""
    from gpuvar.ingest import reader_for

    try:
        fmt = reader_for(path, fmt).FORMAT
        if fmt == "nsys-sqlite":
            return _nsys_bytes(path)
        factor = BYTES_PER_FILE_BYTE.get(fmt)
        if factor is None:
            return 0
        files = [f for f in sorted(path.rglob("*")) if f.is_file()] if path.is_dir() else [path]
        return int(factor * sum(_uncompressed_size(f) for f in files))
    except (OSError, GpuvarError, ValueError):
        return 0


def _nsys_bytes(path: Path) -> int:
    """An export below the pieces threshold is held whole: its kernel and copy rows (rowid spans, two b-tree
    lookups each); one taken in pieces holds about 1 GB whatever its size (gpuvar.ingest.nsys_pieces)."""
    import sqlite3

    from gpuvar.ingest import nsys
    from gpuvar.ingest.nsys_pieces import PieceSettings, plan_reason
    from gpuvar.ingest.nsys_sqlite import connect, rowid_name

    if plan_reason(path, PieceSettings()) is None:
        return 0
    con = connect(path)
    try:
        rows = {}
        for table in (nsys.KERNEL_TABLE, nsys.MEMCPY_TABLE):
            try:
                key = rowid_name(con, table)
            except sqlite3.Error:
                key = None
            if key is None:
                rows[table] = 0
                continue
            lo, hi = con.execute(
                f'SELECT (SELECT min({key}) FROM "{table}"), (SELECT max({key}) FROM "{table}")'
            ).fetchone()
            rows[table] = 0 if lo is None else hi - lo + 1
    finally:
        con.close()
    return rows[nsys.KERNEL_TABLE] * NSYS_BYTES_PER_KERNEL + rows[nsys.MEMCPY_TABLE] * NSYS_BYTES_PER_COPY


def _uncompressed_size(path: Path) -> int:
    """A file's size as read: a gzip file's recorded size (ISIZE, modulo 4 GiB: the wrap taken that makes it at
    least GZIP_RATIO_AT_LEAST times the compressed size), another compression's at OTHER_RATIO."""
    from gpuvar.ingest.compression import compression_of, read_raw_head

    size = path.stat().st_size
    kind = compression_of(read_raw_head(path))
    if kind is None:
        return size
    if kind != "gzip" or size < 18:
        return size * OTHER_RATIO
    with open(path, "rb") as fh:
        fh.seek(-4, 2)
        recorded = int.from_bytes(fh.read(4), "little")
    while recorded < GZIP_RATIO_AT_LEAST * size:
        recorded += 2**32
    return recorded
