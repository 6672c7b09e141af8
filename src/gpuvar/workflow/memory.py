"""The memory a workflow job asks for, from what it will hold, where a constant would be wrong by orders.

Why: on Slurm a job past its request is killed (OUT_OF_MEMORY), and the executor asks for `mem_mb`. Most jobs
hold a bounded amount whatever the trace (ingest in pieces, binning and findings in batches), but merge_ranks
(`gpuvar ingest-merge`) still holds every rank's rows at once: measured 3.40 GB peak for 32 ranks of 100 k Kineto
launches (3.2 M rows, 54 columns, 3.3 s; 6.05 GB before it took the rows a column at a time), ~1.06 KB a row. Its
old constant 4000 MB fitted ~3 M launches; a 256-rank job of 100 k launches each needs ~28 GB there, so it asks
for that instead of failing after its ranks were ingested.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

MERGE_BYTES_PER_ROW = 1280  # measured 1.06 KB (above), with a margin
MERGE_BASE_MB = 1000  # the interpreter, pyarrow and pandas, the reports
FLOOR_MB = 4000  # default-resources' mem_mb in profiles/slurm: never ask for less than a plain job


def rows_in_reports(reports) -> int:
    """The rows the per-rank ingests wrote (every table of each ingest.json); reports not written yet count 0."""
    rows = 0
    for path in reports:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue  # a dry run before the ranks are ingested: the floor
        tables = report.get("tables") if isinstance(report, dict) else None
        for table in tables.values() if isinstance(tables, dict) else ():
            written = table.get("rows_written") if isinstance(table, dict) else None
            rows += written if isinstance(written, int) and written > 0 else 0
    return rows


def merge_mb(reports) -> int:
    """mem_mb for merging the ranks whose ingest.json files are `reports`."""
    need = MERGE_BASE_MB + math.ceil(rows_in_reports(reports) * MERGE_BYTES_PER_ROW / 2**20)
    return max(FLOOR_MB, need)
