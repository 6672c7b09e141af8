"""Where the findings read launches from: the columns a pass needs, one batch of rows at a time.

Why: a trace of 20 M launches is ~60 columns x 20 M values (a pandas frame of it took 2.8 KB per launch), while
the findings need a dozen columns for their dataset-level numbers and the feature columns only for the launches
they fit. So kernels.parquet is never read whole: each pass names its columns and gets them as pandas frames of
at most BATCH_ROWS rows (pyarrow, one Parquet row group after another), indexed by the row's position in the file.
The reader does not pre-buffer: with pre-buffering on, pyarrow keeps every row group's column chunks it has read
until the file is closed (memory that grows with the trace: 80 MB for two columns of 20 M rows).
The frames have the dtypes a whole-table read gives (an integer column with a null anywhere in the file is
float64 in every batch, a boolean one object), so every computation sees the values, and the JSON the types, it
saw when the table was read whole. A DataFrame already in memory (tests, library callers) is a source of one batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError, path_problem

BATCH_ROWS = 1 << 16  # a quarter of the canonical row group: the reader decodes a batch at a time
REQUIRED = ("kernel_name", "duration")


class FrameSource:
    """A DataFrame in memory: one batch, its own index."""

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame
        self.columns = [str(c) for c in frame.columns]
        self.rows = len(frame)
        self.path = None

    def empty(self) -> pd.DataFrame:
        """No rows, the table's columns and dtypes (what size_columns and counter_columns look at)."""
        return self.frame.iloc[:0]

    def batches(self, columns: list[str], categories: bool = False) -> Iterator[pd.DataFrame]:
        yield self.frame[[c for c in self.columns if c in set(columns)]]

    def picked(self, columns: list[str], pick) -> Iterator[tuple[pd.DataFrame, np.ndarray, object]]:
        frame = self.frame[[c for c in self.columns if c in set(columns)]]
        positions, payload = pick(pd.to_numeric(self.frame["duration"], errors="coerce").to_numpy(np.float64))
        yield frame.iloc[positions], np.asarray(positions, np.int64), payload

    def frame_of(self, pieces: list[pd.DataFrame], rows: np.ndarray) -> pd.DataFrame:
        return pd.concat(pieces) if len(pieces) > 1 else pieces[0]


class ParquetSource:
    """kernels.parquet of an ingest folder, read column by column and batch by batch (pyarrow)."""

    def __init__(self, path: Path):
        import pyarrow.parquet as pq

        self.path = Path(path)
        try:
            self.file = pq.ParquetFile(self.path, pre_buffer=False)
            schema = self.file.schema_arrow
        except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
            raise InputError(self.path, f"cannot read: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
        self.schema = schema
        self.columns = [str(n) for n in schema.names]
        self.rows = self.file.metadata.num_rows
        self._nulls: dict[str, bool] = {}
        for column in REQUIRED:
            if column not in self.columns:
                raise InputError(self.path, f"missing column {column!r}")

    def _has_nulls(self, column: str) -> bool:
        """Whether the column has a null anywhere: the row groups' statistics, else one read of that column."""
        if column not in self._nulls:
            meta, k = self.file.metadata, self.columns.index(column)
            counts = []
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(k).statistics
                counts.append(stats.null_count if stats is not None and stats.has_null_count else None)
            if any(c is None for c in counts):
                counts = [self.file.read([column]).column(0).null_count]
            self._nulls[column] = sum(counts) > 0
        return self._nulls[column]

    def _fix(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The dtypes of a whole-table read (module docstring)."""
        import pyarrow as pa

        for column in frame.columns:
            typ = self.schema.field(column).type
            if pa.types.is_integer(typ) and frame[column].dtype.kind in "iu" and self._has_nulls(column):
                frame[column] = frame[column].astype(np.float64)
            elif pa.types.is_boolean(typ) and frame[column].dtype == bool and self._has_nulls(column):
                frame[column] = frame[column].astype(object)
        return frame

    def empty(self) -> pd.DataFrame:
        frame = self.schema.empty_table().to_pandas()
        return self._fix(frame)

    def _arrow_batches(self, columns: list[str], categories: bool = False):
        import pyarrow as pa
        import pyarrow.parquet as pq

        wanted = [c for c in self.columns if c in set(columns)]
        file = self.file
        if categories:  # text read as dictionaries: a kernel name is decoded once per page, not once per launch
            text = [c for c in wanted if pa.types.is_string(self.schema.field(c).type)]
            file = pq.ParquetFile(self.path, read_dictionary=text, pre_buffer=False)
        # the columns of a batch decoded on Arrow's threads (the same values): the pass that gathers the fits'
        # launches reads all 51 columns of 20 M launches in 1.4 s instead of 2.3 s on two cores
        batches = file.iter_batches(batch_size=BATCH_ROWS, columns=wanted, use_threads=True)
        while True:
            try:
                batch = next(batches, None)
            except Exception as exc:  # noqa: BLE001 - a damaged row group is a bad input file
                raise InputError(self.path, f"cannot read: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
            if batch is None:
                return
            yield batch

    def batches(self, columns: list[str], categories: bool = False) -> Iterator[pd.DataFrame]:
        """Frames of the columns, batch by batch. categories: text columns as pandas categoricals (each distinct
        text one Python string per batch instead of one per row: what a pass that only groups by them needs)."""

        offset = 0
        for batch in self._arrow_batches(columns, categories):
            frame = batch.to_pandas()
            frame.index = pd.RangeIndex(offset, offset + len(frame))
            offset += len(frame)
            yield self._fix(frame)

    def picked(self, columns: list[str], pick):
        """For each batch: pick(its durations as float64) -> (positions, payload); yields (those rows as an Arrow
        record batch, their row numbers in the file, payload). Rows become pandas objects only in frame_of, once
        per round of groups: no per-batch Python strings, no small frames left behind between large ones."""
        import pyarrow as pa

        offset = 0
        wanted = [c for c in self.columns if c in set(columns)]
        for batch in self._arrow_batches(sorted(set(columns) | {"duration"}), categories=True):
            d = pd.to_numeric(batch.column("duration").to_pandas(), errors="coerce").to_numpy(np.float64)
            positions, payload = pick(d)
            positions = np.asarray(positions, np.int64)
            yield self._as_stored(batch.select(wanted).take(pa.array(positions))), offset + positions, payload
            offset += batch.num_rows

    def _as_stored(self, batch):
        """The picked rows' text columns, read as dictionaries (a page's kernel names decoded once, not once per
        launch: 3.7 -> 2.2 s for the 51 columns of 20 M launches), back to the file's text type: the frames of a
        whole-table read."""
        import pyarrow as pa

        schema = batch.schema
        for k, field in enumerate(schema):
            stored = self.schema.field(field.name)
            if pa.types.is_dictionary(field.type) and not pa.types.is_dictionary(stored.type):
                schema = schema.set(k, field.with_type(stored.type))
        if schema == batch.schema:
            return batch
        return pa.RecordBatch.from_arrays([c.cast(f.type) for c, f in zip(batch.columns, schema)], schema=schema)

    def frame_of(self, pieces: list, rows: np.ndarray) -> pd.DataFrame:
        """One frame of record batches or tables from picked(): the whole-table dtypes, row numbers as index."""
        import pyarrow as pa

        tables = [pa.Table.from_batches([p]) if isinstance(p, pa.RecordBatch) else p for p in pieces]
        frame = pa.concat_tables(tables).to_pandas() if tables else self.empty()
        frame.index = pd.Index(np.asarray(rows, np.int64))
        return self._fix(frame)


def kernels_source(ingest_dir: Path) -> ParquetSource:
    """The ingest folder's kernels table as a source (one line naming the file when it is missing or bad)."""
    from gpuvar.layout import KERNELS_TABLE

    path = Path(ingest_dir) / KERNELS_TABLE
    problem = path_problem(path)
    if problem:
        raise InputError(path, f"{problem} (run `gpuvar ingest` first)")
    return ParquetSource(path)


def source_of(kernels) -> FrameSource | ParquetSource:
    return kernels if isinstance(kernels, FrameSource | ParquetSource) else FrameSource(kernels)
