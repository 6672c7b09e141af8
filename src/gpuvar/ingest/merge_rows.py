"""The ranks' rows written in their merged order without holding them: a k-way merge of the parts' files.

Why: `gpuvar ingest-merge` (the workflow's merge_ranks) held every rank's table at once, 1.06 KB a launch: ~28 GB
for a 256-rank job of 100 k launches each, on one node, after every rank had been ingested (issue 38 item 1). The
merged order is known from a few key columns (gpuvar.ingest.merge reads only those), and each part's rows keep
their file order in it, so the merged file is a k-way merge: each output row group takes the next rows of each
part. What is held: the order (a source label per row), a few pages of each open file, and two row groups.

Fan-in: an open Parquet file holds its current page of every column, ~6 MB for a 100 k-launch Kineto rank (16 such
files: +92 MB of Arrow memory); 256 files at once would hold ~1.5 GB of pages. Beyond `fan_in` files, groups of
`fan_in` are first merged into scratch files with small pages, and those are merged in turn, as an external
merge sort does. The scratch files are written under a folder the caller gives and removed level by level.

Same bytes: the final file goes through CanonicalWriter, a row group of ROW_GROUP_ROWS rows at a time in one
Arrow chunk per column, as write_canonical writes the whole merged table; tests/test_merge.py holds the k-way
merge to the whole-table merge's bytes, with and without scratch levels.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar.canonical_io import ROW_GROUP_ROWS, CanonicalWriter, from_numpy
from gpuvar.errors import InputError

FAN_IN = 16  # files open at once: 16 Kineto ranks' pages ~0.1 GB
READ_BATCH_ROWS = 4096  # rows decoded at a time from one file: a 256-rank row group takes ~1 k of each
SCRATCH_OPTIONS = {"compression": "zstd", "compression_level": 1, "data_page_size": 64 << 10}
SCRATCH_ROW_GROUP_ROWS = 1 << 16


class Source:
    """One part's file, read in file order a few rows at a time, its rows conformed to the merged `schema`: columns
    the part lacks are nulls, `rank` (when given) is set, types are cast as the permissive concatenation casts."""

    def __init__(self, path: Path, schema: pa.Schema, rank: int | None = None):
        self.path, self.schema, self.rank = path, schema, rank
        self.file = pq.ParquetFile(path)
        self.batches = self.file.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False)
        self.held: list[pa.Table] = []
        self.count = 0

    def take(self, rows: int) -> pa.Table:
        """The next `rows` rows."""
        while self.count < rows:
            batch = next(self.batches, None)
            if batch is None:
                raise InputError(self.path, "fewer rows than when its key columns were read (changed while merged?)")
            table = self._conformed(batch)
            self.held.append(table)
            self.count += table.num_rows
        whole = pa.concat_tables(self.held)
        rest = whole.slice(rows)
        self.held, self.count = ([rest] if rest.num_rows else []), rest.num_rows
        return whole.slice(0, rows)

    def _conformed(self, batch: pa.RecordBatch) -> pa.Table:
        rows, names, columns = batch.num_rows, batch.schema.names, []
        for field in self.schema:
            if field.name == "rank" and self.rank is not None:
                columns.append(from_numpy(np.full(rows, self.rank, np.int64)))
            elif field.name in names:
                column = batch.column(names.index(field.name))
                columns.append(column if column.type == field.type else column.cast(field.type))
            else:
                columns.append(pa.nulls(rows, field.type))
        return pa.Table.from_arrays(columns, schema=self.schema)

    def close(self) -> None:
        self.batches = None
        self.file.close()


def write_merged(
    sources: list[tuple[Path, int | None]],
    labels: np.ndarray,
    schema: pa.Schema,
    path: Path,
    metadata: dict,
    scratch: Path,
    extra: Callable[[pa.Table, int], pa.Table] | None = None,
    fan_in: int = FAN_IN,
) -> None:
    """Write to `path` (a canonical file) the rows of `sources` ((file, rank to set or None)) in the order `labels`
    gives: labels[i] is the source of output row i, and each source's rows come in their file order.
    extra(table, first_row): the final rows with columns set that no part holds (the co-running columns)."""
    if fan_in < 2:
        raise ValueError("fan_in must be at least 2")
    labels = np.asarray(labels)
    level = 0
    while len(sources) > fan_in:
        merged = _scratch(scratch, level, sources, fan_in)
        labels = _merge_level(sources, labels, schema, scratch, level, fan_in)
        sources, level = merged, level + 1
    with CanonicalWriter(path, metadata) as writer:
        _merge_into(sources, labels, schema, lambda table, first: writer.add(extra(table, first) if extra else table))
    if level:
        for file, _ in sources:
            file.unlink()


def _scratch(scratch: Path, level: int, sources: list, fan_in: int) -> list[tuple[Path, None]]:
    return [(scratch / f"merge-{level}-{g}.parquet", None) for g in range(0, len(sources), fan_in)]


def _merge_level(sources, labels, schema, scratch: Path, level: int, fan_in: int) -> np.ndarray:
    """Merge each group of `fan_in` sources into a scratch file (in the rows' final order); return the labels that
    point at the scratch files. The previous level's scratch files (not the parts) are removed once read."""
    groups = labels // fan_in
    for g, (out, _) in enumerate(_scratch(scratch, level, sources, fan_in)):
        members = sources[g * fan_in : (g + 1) * fan_in]
        with pq.ParquetWriter(out, schema, **SCRATCH_OPTIONS) as writer:
            _merge_into(
                members,
                labels[groups == g] - g * fan_in,
                schema,
                lambda table, _: writer.write_table(table, row_group_size=SCRATCH_ROW_GROUP_ROWS),
            )
        if level:
            for file, _ in members:
                file.unlink()
    return groups.astype(label_type(len(sources) // fan_in + 1))


def label_type(count: int) -> np.dtype:
    """The narrowest label type: a stable sort of int16 is a radix sort (numpy), 5-10x a timsort of int64."""
    return np.dtype(np.int16) if count < 2**15 else np.dtype(np.int32) if count < 2**31 else np.dtype(np.int64)


def _merge_into(sources, labels: np.ndarray, schema: pa.Schema, sink: Callable[[pa.Table, int], None]) -> None:
    """Feed sink(rows, first_row) the merged rows, ROW_GROUP_ROWS at a time."""
    opened = [Source(Path(file), schema, rank) for file, rank in sources]
    try:
        for first in range(0, len(labels), ROW_GROUP_ROWS):
            chunk = labels[first : first + ROW_GROUP_ROWS]
            counts = np.bincount(chunk, minlength=len(opened))
            table = pa.concat_tables([opened[s].take(int(n)) for s, n in enumerate(counts) if n])
            # the taken rows lie grouped by source, each source's in file order: a stable sort of the labels
            # maps output rows to them; its inverse puts them in output order
            by_source = np.argsort(chunk, kind="stable")
            position = np.empty(len(chunk), np.int64)
            position[by_source] = np.arange(len(chunk))
            sink(table.take(from_numpy(position)), first)
    finally:
        for source in opened:
            source.close()


def in_part_order(labels: np.ndarray, rows_from: np.ndarray) -> bool:
    """Whether every part's rows keep their file order in the merge: rows_from[i] is output row i's position in
    the parts' concatenation, labels[i] its part. Taken by part (a stable sort), the positions must count up."""
    by_part = rows_from[np.argsort(labels, kind="stable")]
    return bool((by_part == np.arange(len(by_part))).all())
