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
Slurm: ingest_mb follows the trace's size (gpuvar.ingest.footprint), and doubles on the retry after a failure (the profile's
`retries: 1`: a job past its request is killed, then resubmitted with twice the memory).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gpuvar.canonical_io import ROW_GROUP_ROWS

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


def ingest_mb(sources, fmt: str = "auto", attempt: int = 1) -> int:
    """mem_mb for ingesting `sources` (the files of one trace, or a folder): its estimated peak
    (gpuvar.ingest.footprint), at least the floor, times the attempt (a retry after the job was killed asks for
    twice as much). Sources that do not exist yet (the demo's, on a dry run) count nothing."""
    from gpuvar.ingest.footprint import peak_bytes

    return max(FLOOR_MB, math.ceil(peak_bytes(sources, fmt) / 2**20)) * max(1, int(attempt))
