"""Reading and writing canonical Parquet.

Layout chosen for the MPI binning job (docs/performance.md; §3 of the shared field guide ../shared/GUIDE.md, outside the
repo): rows sorted by start time (launch order where there is no timeline), fixed-size row groups so ranks can read
disjoint slices, zstd, and DELTA_BINARY_PACKED without dictionary for the monotone time columns, which roughly halves
the decode time of start/end. Row groups of 256 Ki rows: the binning job re-reads the rows of its top-k bins, and a
column chunk decodes from its first row (pyarrow cannot skip pages), so a bin's rows cost up to a row group of decode:
at 20 M rows (same data, alternating runs) that phase took 0.24-0.33 s with 1 Mi-row groups, 0.13-0.19 s with 256 Ki.
Files are written to a temporary name and renamed, so an interrupted run never leaves a complete-looking file.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar.output import replacing

ROW_GROUP_ROWS = 1 << 18
DELTA_COLUMNS = ("start", "end", "duration", "launch_id", "correlation_id")
METADATA_KEY = b"gpuvar"


def sort_canonical(table: pa.Table) -> pa.Table:
    """Sort by start time (nulls last), ties and timeline-less data by launch id."""
    order = canonical_order(table)
    return table if order is None else table.take(order)


def canonical_order(table: pa.Table) -> pa.Array | None:
    """The row order sort_canonical puts `table` in (a stable sort), None where it keeps the rows as they are. Only
    the key columns are read: a caller can ask it of a table of just those (gpuvar.ingest.merge does)."""
    keys = [(c, "ascending", "at_end") for c in ("start", "launch_id") if c in table.column_names]
    if not keys or table.num_rows == 0 or _already_sorted(table, [k for k, _, _ in keys]):
        return None
    import pyarrow.compute as pc  # (here: its import costs ~0.045 s, which a binning rank writing sorted rows saves)

    return pc.sort_indices(table.select([k for k, _, _ in keys]), sort_keys=keys)


def _already_sorted(table: pa.Table, keys: list[str]) -> bool:
    """Whether the stable sort on `keys` leaves the rows where they are: null-free integer keys, in order (ties of
    the last key kept in place, as a stable sort keeps them). Skips a full take(), a copy of the table: exports
    and demo data rise strictly in start time, and a job of many ranks ties starts across ranks (the rows of its
    merged table, and of the bins chosen from it, are already in order by start, then launch id)."""
    first = _null_free_ints(table, keys[0])
    if first is None:
        return False
    if len(keys) == 1:
        return bool((first[1:] >= first[:-1]).all())
    rises = first[1:] > first[:-1]
    if rises.all():
        return True
    second = _null_free_ints(table, keys[1])
    if second is None:
        return False
    return bool((rises | (first[1:] == first[:-1]) & (second[1:] >= second[:-1])).all())


def _null_free_ints(table: pa.Table, name: str) -> np.ndarray | None:
    """A null-free integer column's values (a view where it is one chunk); None for any other column."""
    col = table.column(name)
    if col.null_count or not pa.types.is_integer(col.type):
        return None
    return np.concatenate([numpy_view(c) for c in col.chunks]) if col.num_chunks != 1 else numpy_view(col.chunk(0))


# Array.to_numpy / pa.array(ndarray) / pa.table(dict) import pandas on first use (0.2-0.4 s): the MPI ranks
# and the writers move numbers between numpy and Arrow through the buffers instead.


def numpy_view(arr: pa.Array) -> np.ndarray:
    """Values of a numeric Arrow array as numpy, zero-copy (values under nulls are undefined)."""
    typ = arr.type
    kind = "f" if pa.types.is_floating(typ) else "i" if pa.types.is_signed_integer(typ) else "u"
    dtype = np.dtype(f"<{kind}{typ.bit_width // 8}")
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + len(arr))[arr.offset :]


def strings_from_codes(codes: np.ndarray, names: list[str]) -> pa.Array:
    """names[codes[i]] as a plain Arrow string array, built from buffers (pa.array(list) imports pandas)."""
    encoded = [n.encode("utf-8") for n in names]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded) or b"\0")
    dictionary = pa.Array.from_buffers(pa.string(), len(names), [None, pa.py_buffer(offsets), data])
    indices = from_numpy(np.asarray(codes, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.string())


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-D numeric or bool numpy array as an Arrow array without nulls (NaN stays NaN, as pa.array does)."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


WIDE_COLUMNS = 4096  # real profiler files stay below (~2,700 Omniperf counters); per-column metadata dominates above


def _wide_options(table: pa.Table, delta: list[str]) -> dict:
    """Dictionary encoding and statistics for every column, except on very wide tables (a 100,000-counter CSV):
    there only string columns get a dictionary and only the first WIDE_COLUMNS columns (the canonical ones come
    first) get statistics, which bounds the writer's per-column work and memory."""
    names = table.column_names
    if len(names) <= WIDE_COLUMNS:
        return {"use_dictionary": [c for c in names if c not in delta], "write_statistics": True}
    strings = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    return {"use_dictionary": [c for c in strings if c not in delta], "write_statistics": names[:WIDE_COLUMNS]}


def _with_metadata(table: pa.Table, metadata: dict | None) -> pa.Table:
    meta = dict(table.schema.metadata or {})
    meta[METADATA_KEY] = json.dumps(metadata or {}, sort_keys=True).encode()
    return table.replace_schema_metadata(meta)


def _options(table: pa.Table) -> dict:
    """The writer options of a canonical table: zstd, delta encoding for the integer time columns, dictionaries."""
    delta = [c for c in DELTA_COLUMNS if c in table.column_names and pa.types.is_integer(table.schema.field(c).type)]
    return {
        "compression": "zstd",
        "column_encoding": {c: "DELTA_BINARY_PACKED" for c in delta},
        **_wide_options(table, delta),
    }


def write_canonical(
    table: pa.Table,
    path: str | Path,
    metadata: dict | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
    in_order: bool = False,
) -> None:
    """Write a sorted canonical table (gpuvar.output.replacing: a temporary file renamed once complete).
    in_order: the rows are already in canonical_order's order (the caller took them so): no second copy."""
    table = _with_metadata(table if in_order else sort_canonical(table), metadata)
    with replacing(path) as tmp:
        pq.write_table(table, tmp, row_group_size=row_group_rows, **_options(table))


class CanonicalWriter:
    """A canonical table written in parts that arrive sorted (each part sorted, and after the one before): the file
    write_canonical makes of the whole table, with the same row groups (ROW_GROUP_ROWS rows, the last shorter) and
    options, holding at most a row group and a part. Used as a context manager; the file is in place on a clean
    exit, and nothing is on error (gpuvar.output.replacing).
    background: each row group is combined and encoded in a thread while the caller makes the next parts (the
    encoder releases the GIL; an export's ingest spends a quarter of its time there), at most one row group in
    flight, so the writer holds one row group more. The same calls in the same order: the same bytes."""

    def __init__(
        self,
        path: str | Path,
        metadata: dict | None = None,
        row_group_rows: int = ROW_GROUP_ROWS,
        background: bool = False,
    ):
        self.path, self.metadata, self.row_group_rows = Path(path), metadata, row_group_rows
        self.parts: list[pa.Table] = []
        self.buffered = 0
        self.schema: pa.Schema | None = None
        self.writer: pq.ParquetWriter | None = None
        self.background = background
        self._pool = None
        self._pending = None  # the row group being written in the background (a Future)

    def __enter__(self) -> CanonicalWriter:
        self._stack = ExitStack()
        self._tmp = self._stack.enter_context(replacing(self.path))
        return self

    def add(self, part: pa.Table) -> None:
        """Append a sorted part (its schema must be the first part's, less metadata: a ValueError otherwise)."""
        if self.schema is None:
            self.schema = _with_metadata(part, self.metadata).schema
        elif not part.schema.equals(self.schema, check_metadata=False):
            raise ValueError(f"{self.path}: a part's columns differ from the first part's")
        self.parts.append(part)
        self.buffered += part.num_rows
        while self.buffered >= self.row_group_rows:
            self._write(self.row_group_rows)

    def _write(self, rows: int) -> None:
        # one chunk per column, as the whole tables of the in-memory ingest have: pyarrow's pages follow the
        # chunks, so a row group written from several chunks is other bytes
        whole = pa.concat_tables(self.parts)
        columns, rest = whole.slice(0, rows).columns, whole.slice(rows)
        self.parts, self.buffered = ([rest] if rest.num_rows else []), rest.num_rows
        del whole
        self._wait()  # (one row group in flight: the writer's order and memory)
        if not self.background:
            self._encode(columns)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuvar-parquet")
        self._pending = self._pool.submit(self._encode, columns)
        del columns

    def _wait(self) -> None:
        """Wait for the row group in flight; its error, if any, is raised here."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _encode(self, columns: list) -> None:
        # combined a column at a time, each column's parts let go once it is combined: the table combined at once
        # held the parts and their copy together, two row groups (0.5 GB of a 61-column real capture) under the
        # encoder's peak; now the parts and one column's copy
        arrays = []
        for k in range(len(columns)):
            arrays.append(columns[k].combine_chunks())
            columns[k] = None
        group = pa.Table.from_arrays(arrays, schema=self.schema)
        del arrays
        if self.writer is None:
            self.writer = pq.ParquetWriter(self._tmp, self.schema, **_options(group))
        self.writer.write_table(group, row_group_size=self.row_group_rows)

    def _finish(self) -> None:
        if self.schema is None:
            raise ValueError(f"{self.path}: no part was written")
        self._wait()  # (the first row group makes the writer)
        if self.buffered or self.writer is None:
            self._write(self.buffered)
        self._wait()

    def _close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # (on error: the row group in flight ends before the file is removed)
            self._pool = self._pending = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def __exit__(self, kind, value, traceback) -> bool:
        if kind is None:
            try:
                self._finish()
            except BaseException as exc:
                self._close()
                self._stack.__exit__(type(exc), exc, exc.__traceback__)
                raise
        self._close()
        return bool(self._stack.__exit__(kind, value, traceback))
