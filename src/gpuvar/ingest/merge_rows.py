"""The ranks' rows merged into one file without holding them: a k-way merge of the parts' files, in bounded memory.

Why: `gpuvar ingest-merge` (the workflow's merge_ranks) held every rank's table at once, 1.06 KB a launch: ~28 GB
for a 256-rank job of 100 k launches each, on one node, after every rank had been ingested (issue 38 item 1).

The merged order (gpuvar.ingest.merge._ordering: sorted by (start, rank, launch id), then stably by (start, launch
id), nulls last) is the order of the key K = (start, launch id, rank, row in its file). Every part gpuvar wrote is
sorted by (start, launch id) (write_canonical; `part_facts` checks it, else the caller merges in memory), so along
each file K only grows, and the merge is a k-way merge on K:
  1. keys: each file's key columns are read a batch at a time; the rows below the smallest "last key read" of the
     files not yet finished are merged (a sort of that handful of rows) and each row's file is written to a scratch
     file of labels (2 bytes a row); the co-running columns are computed on the way (gpuvar.ingest.merge_corun);
  2. rows: every column of every file is read a few rows at a time, and each output row group takes the next rows
     of the files its labels name.
Memory: a batch of keys and of rows per open file, the co-running window, two row groups.

Fan-in: an open Parquet file holds its current page of every column, ~6 MB for a 100 k-launch Kineto rank (16 such
files: +92 MB of Arrow memory); 256 files at once would hold ~1.5 GB of pages. Beyond `fan_in` files, groups of
`fan_in` are first merged into scratch files (small pages; a rank column, so K is read back from them), and those
are merged in turn, as an external merge sort does. Scratch files lie under a folder the caller gives; each is
removed once read.

Same bytes: the final file goes through CanonicalWriter, a row group of ROW_GROUP_ROWS rows in one Arrow chunk per
column, as write_canonical writes the whole merged table; tests/test_merge.py holds the k-way merge to the
whole-table merge's bytes, with and without scratch levels, on real and planted parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuvar.canonical_io import CanonicalWriter, from_numpy, write_canonical
from gpuvar.errors import InputError

FAN_IN = 16  # files open at once: 16 Kineto ranks' pages ~0.1 GB
KEY_BATCH_ROWS = 8192  # keys read at a time from one file
READ_BATCH_ROWS = 4096  # rows read at a time from one file: a 256-rank row group takes ~1 k of each
MERGE_ROWS = 1 << 16  # rows merged at a time (a quarter of a canonical row group: ~45 MB of Kineto rows)
SCRATCH_OPTIONS = {"compression": "lz4", "write_statistics": False, "data_page_size": 64 << 10}
SCRATCH_ROW_GROUP_ROWS = 1 << 16
LABEL = np.dtype(np.int16)  # a row's file among at most FAN_IN_MAX
FAN_IN_MAX = 2**15 - 1
LAST = np.iinfo(np.int64).max  # a null key sorts last
# how an open file is read: pyarrow's default pre-buffers a whole row group of every column (43 MB for a scratch
# row group of Kineto rows, 16 files 0.7 GB); unbuffered, each column chunk is read whole; streamed through a
# 64 KiB buffer per column, an open scratch file holds ~10 MB
READ_OPTIONS = {"pre_buffer": False, "buffer_size": 1 << 16}


@dataclass
class PartFacts:
    """What the merge needs to know of one part before merging it, read a batch at a time."""

    rows: int = 0
    in_order: bool = True  # rows sorted by (start, launch id), nulls last, integer keys: K grows along the file
    timed: bool = False  # a row with a start time
    devices: set[int] = field(default_factory=set)  # device ids (not null)
    processes: set = field(default_factory=set)  # process ids, None for null (a column absent: {None})


def part_facts(path: Path) -> PartFacts:
    """PartFacts of one part's file."""
    file = pq.ParquetFile(path, **READ_OPTIONS)
    names = file.schema_arrow.names
    columns = [c for c in ("start", "launch_id", "device_id", "process_id") if c in names]
    facts, last = PartFacts(), None
    for key in ("start", "launch_id"):
        if key in names and not pa.types.is_integer(file.schema_arrow.field(key).type):
            facts.in_order = False
    for batch in file.iter_batches(batch_size=1 << 16, columns=columns, use_threads=False):
        n = batch.num_rows
        facts.rows += n
        s, ln = _ints(_column(batch, "start"), LAST, n), _ints(_column(batch, "launch_id"), LAST, n)
        if facts.in_order and n:
            if last is not None:
                s, ln = np.concatenate(([last[0]], s)), np.concatenate(([last[1]], ln))
            grows = (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (ln[1:] >= ln[:-1]))
            facts.in_order = bool(grows.all())
            last = (s[-1], ln[-1])
        start = _column(batch, "start")
        facts.timed = facts.timed or (start is not None and start.null_count < n)
        device = _column(batch, "device_id")
        if device is not None:
            facts.devices.update(int(d) for d in pc.unique(device.drop_null()).to_pylist())
        process = _column(batch, "process_id")
        facts.processes.update(pc.unique(process).to_pylist() if process is not None else [None] if n else [])
    return facts


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    return batch.column(batch.schema.get_field_index(name)) if name in batch.schema.names else None


def _ints(column: pa.Array | None, null: int, rows: int, absent: int = 0) -> np.ndarray:
    """An integer column as int64 numpy, nulls as `null`; `absent` everywhere when there is no such column."""
    if column is None:
        return np.full(rows, absent, np.int64)
    if column.type != pa.int64():
        column = column.cast(pa.int64())
    return column.fill_null(null).to_numpy()


class Keys:
    """One file's merge keys (and the co-running inputs, with_corun) in file order, read a batch at a time. rank:
    the rank of every row (a part), or None to read its `rank` column (a scratch file). merged: the merged table's
    columns: a key column the file lacks is null in it (sorts last), one no file has is no key."""

    def __init__(self, path: Path, rank: int | None, with_corun: bool, merged: list[str]):
        self.file = pq.ParquetFile(path, **READ_OPTIONS)
        names = self.file.schema_arrow.names
        self.absent = {key: LAST if key in merged else 0 for key in ("start", "launch_id")}
        want = ["start", "launch_id", *(["end", "device_id", "process_id"] if with_corun else [])]
        want += ["rank"] if rank is None else []
        self.rank, self.with_corun = rank, with_corun
        self.batches = self.file.iter_batches(
            batch_size=KEY_BATCH_ROWS, columns=[c for c in want if c in names], use_threads=False
        )
        self.held: dict[str, np.ndarray] | None = None
        self.done = False

    def __len__(self) -> int:
        return 0 if self.held is None else len(self.held["s"])

    def fill(self, rows: int) -> None:
        """Read until `rows` keys are held or the file is finished."""
        while not self.done and len(self) < rows:
            batch = next(self.batches, None)
            if batch is None:
                self.done = True
                break
            more = self._arrays(batch)
            self.held = more if self.held is None else {k: np.concatenate((v, more[k])) for k, v in self.held.items()}

    def last(self) -> tuple[int, int]:
        return int(self.held["s"][-1]), int(self.held["l"][-1])

    def below(self, key: tuple[int, int]) -> int:
        """How many held rows have (start, launch id) < key."""
        if not len(self):
            return 0
        s, ln = self.held["s"], self.held["l"]
        lo, hi = np.searchsorted(s, key[0], "left"), np.searchsorted(s, key[0], "right")
        return int(lo + np.searchsorted(ln[lo:hi], key[1], "left"))

    def take(self, rows: int) -> dict[str, np.ndarray]:
        taken = {k: v[:rows] for k, v in self.held.items()}
        self.held = {k: v[rows:] for k, v in self.held.items()}
        return taken

    def _arrays(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        n = batch.num_rows
        start = _column(batch, "start")
        s = _ints(start, LAST, n, self.absent["start"])
        rank = np.full(n, self.rank, np.int64) if self.rank is not None else _ints(_column(batch, "rank"), LAST, n)
        arrays = {"s": s, "l": _ints(_column(batch, "launch_id"), LAST, n, self.absent["launch_id"]), "rank": rank}
        if self.with_corun:
            end = _column(batch, "end")
            e = _ints(end, 0, n)
            timed = (s != LAST) & (e >= s) if start is not None and end is not None else np.zeros(n, bool)
            if end is not None and end.null_count:
                timed &= end.is_valid().to_numpy(zero_copy_only=False)
            process = _column(batch, "process_id")
            arrays |= {
                "e": e,
                "timed": timed,
                "dev": _ints(_column(batch, "device_id"), -1, n, absent=-1),
                "pid": process.cast(pa.float64()).to_numpy(zero_copy_only=False)
                if process is not None
                else np.full(n, np.nan),
            }
        return arrays

    def close(self) -> None:
        self.batches = None
        self.file.close()


def merge_keys(sources: list[tuple[Path, int | None]], schema: pa.Schema, with_corun: bool, emit: Callable) -> None:
    """The k-way merge of the files' keys: emit(labels, rows, threshold) for each run of merged rows, labels the
    file of each row (LABEL), rows their key arrays (with_corun: and the co-running inputs) in merged order,
    threshold the (start, launch id) every row not yet emitted is at or above (None after the last run)."""
    keys = [Keys(Path(path), rank, with_corun, schema.names) for path, rank in sources]
    try:
        for k in keys:
            k.fill(KEY_BATCH_ROWS)
        while True:
            reading = [k for k in keys if not k.done]
            threshold = min(k.last() for k in reading) if reading else None
            counts = [len(k) if threshold is None else k.below(threshold) for k in keys]
            if not sum(counts):
                if threshold is None:
                    break
                for k in reading:  # the files whose held keys all tie at the threshold read on
                    if k.last() == threshold:
                        k.fill(len(k) + KEY_BATCH_ROWS)
                continue
            taken = [k.take(n) for k, n in zip(keys, counts) if n]
            rows = {name: np.concatenate([t[name] for t in taken]) for name in taken[0]}
            labels = np.repeat(np.arange(len(keys), dtype=LABEL), counts)
            order = np.lexsort((rows["rank"], rows["l"], rows["s"]))  # stable: a file's rows keep their order
            emit(labels[order], {name: v[order] for name, v in rows.items()}, threshold)
            for k in reading:
                k.fill(KEY_BATCH_ROWS)
        emit(np.zeros(0, LABEL), None, None)
    finally:
        for k in keys:
            k.close()


class Source:
    """One file's rows, read in file order a few at a time, conformed to the merged `schema`: columns the file
    lacks are nulls, `rank` (when given) is set, types are cast as the permissive concatenation casts them."""

    def __init__(self, path: Path, schema: pa.Schema, rank: int | None = None):
        self.path, self.schema, self.rank = path, schema, rank
        self.file = pq.ParquetFile(path, **READ_OPTIONS)
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
        for f in self.schema:
            if f.name == "rank" and self.rank is not None:
                columns.append(from_numpy(np.full(rows, self.rank, np.int64)))
            elif f.name in names:
                column = batch.column(names.index(f.name))
                columns.append(column if column.type == f.type else column.cast(f.type))
            else:
                columns.append(pa.nulls(rows, f.type))
        return pa.Table.from_arrays(columns, schema=self.schema)

    def close(self) -> None:
        self.batches = None
        self.file.close()


def merge_rows(sources, labels: Callable[[int], np.ndarray], rows: int, schema, sink) -> int:
    """Give sink.add(table) the merged rows of `sources` ((file, rank or None)), MERGE_ROWS at a time; labels(n)
    gives the next n rows' files. Returns the most rows held at once: the run, what the sink and the files hold."""
    opened = [Source(Path(path), schema, rank) for path, rank in sources]
    held = 0
    try:
        for first in range(0, rows, MERGE_ROWS):
            chunk = labels(min(MERGE_ROWS, rows - first))
            counts = np.bincount(chunk, minlength=len(opened))
            table = pa.concat_tables([opened[s].take(int(n)) for s, n in enumerate(counts) if n])
            # the taken rows lie grouped by file, each file's in its order: a stable sort of the labels maps output
            # rows to them; its inverse puts them in output order
            by_file = np.argsort(chunk, kind="stable")
            position = np.empty(len(chunk), np.int64)
            position[by_file] = np.arange(len(chunk))
            held = max(held, len(chunk) + sink.buffered + sum(o.count for o in opened))
            sink.add(table.take(from_numpy(position)))
    finally:
        for source in opened:
            source.close()
    return held


def _read_labels(handle) -> Callable[[int], np.ndarray]:
    return lambda n: np.fromfile(handle, dtype=LABEL, count=n)


def _level(sources, schema: pa.Schema, scratch: Path, sink, window=None, name: str = "merge") -> int:
    """One merge of `sources` into one file: keys (labels to scratch, the co-running window fed), then rows into
    `sink` (a context manager with add(table) and buffered), as many as labels were written. Returns the most rows
    held at once. `name`: the scratch file of labels (name.labels), its own for each merge of a level."""
    labels_path, rows = scratch / f"{name}.labels", 0
    with open(labels_path, "wb") as out:

        def emit(labels, keyed, threshold):
            nonlocal rows
            rows += len(labels)
            out.write(labels.tobytes())
            if window is not None:
                window.add(keyed, threshold)

        merge_keys(sources, schema, window is not None, emit)
    with open(labels_path, "rb") as handle, sink:
        held = merge_rows(sources, _read_labels(handle), rows, schema, sink)
    labels_path.unlink()
    return held


def write_merged(
    parts: list[tuple[Path, int]],
    schema: pa.Schema,
    rows: int,
    path: Path,
    metadata: dict,
    scratch: Path,
    window=None,
    fan_in: int = FAN_IN,
    jobs: int = 1,
) -> int:
    """Write to `path` (a canonical file) the rows of `parts` ((file, rank)) in the merged order (module
    docstring); `rows` in all. window: the co-running columns' computation (gpuvar.ingest.merge_corun.Window),
    fed the keys of the last level, setting the columns on each row group written. jobs: the merges of a scratch
    level run `jobs` at a time, in threads (each writes its own scratch file; the final file is the same bytes).
    Returns the most rows (of every column) held at once."""
    if not 2 <= fan_in <= FAN_IN_MAX:
        raise ValueError(f"fan_in must be 2 to {FAN_IN_MAX}")
    if rows == 0:  # what the whole-table merge writes of parts without rows
        write_canonical(schema.empty_table(), path, metadata, in_order=True)
        return 0
    sources, level, held = [(Path(p), rank) for p, rank in parts], 0, 0
    while len(sources) > fan_in:
        groups = [sources[g : g + fan_in] for g in range(0, len(sources), fan_in)]
        done = _each(partial(_scratch_merge, groups, level, schema, scratch), len(groups), jobs)
        # rows held at once: the `jobs` largest merges of the level, as if they ran side by side
        held = max(held, sum(sorted(most for _, most in done)[-max(1, jobs) :]))
        sources, level = [(out, None) for out, _ in done], level + 1
    held = max(held, _level(sources, schema, scratch, _FinalSink(path, metadata, window), window))
    if level:
        for file, _ in sources:
            file.unlink()
    return held


def _scratch_merge(groups: list, level: int, schema: pa.Schema, scratch: Path, g: int) -> tuple[Path, int]:
    """Merge group g of a scratch level into its scratch file: (the file, the most rows held at once). The files of
    a scratch level before it are removed once read."""
    name = f"merge-{level}-{g}"
    most = _level(groups[g], schema, scratch, _ScratchSink(scratch / f"{name}.parquet", schema), name=name)
    if level:
        for file, _ in groups[g]:
            file.unlink()
    return scratch / f"{name}.parquet", most


def _each(one: Callable[[int], tuple], count: int, jobs: int) -> list[tuple]:
    """[one(0), ..., one(count - 1)], `jobs` at a time in threads. Why threads: a merge's time is Arrow's (Parquet
    decode and encode, take), which runs without the GIL; 4 merges of 16 Kineto ranks took 7.6 s one at a time and
    5.0 s two at a time on 2 cores, in one process (+0.28 GB), where spawned processes would each load pyarrow.
    The whole merge of 256 such ranks: 64 s and 0.73 GB with jobs 1, 53 s and 0.83 GB with jobs 2."""
    if jobs <= 1 or count <= 1:
        return [one(g) for g in range(count)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(jobs, count)) as pool:
        return list(pool.map(one, range(count)))


class _ScratchSink:
    """A scratch file's writer: row groups of SCRATCH_ROW_GROUP_ROWS, written as they come."""

    buffered = 0

    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema = path, schema

    def __enter__(self):
        self.writer = pq.ParquetWriter(self.path, self.schema, **SCRATCH_OPTIONS, use_dictionary=_texts(self.schema))
        return self

    def add(self, table: pa.Table) -> None:
        self.writer.write_table(table, row_group_size=SCRATCH_ROW_GROUP_ROWS)

    def __exit__(self, *exc) -> None:
        self.writer.close()


def _texts(schema: pa.Schema) -> list[str]:
    """The columns a scratch file dictionary-encodes: text only. Why: the writer tried a dictionary on every
    column, and the numbers (times, ids, durations) overflow it and fall back to plain after the attempt: 16
    Kineto ranks' kernels (1.6 M rows) took 0.65 CPU-s and 74 MB, with text only 0.36 CPU-s and 57 MB. The merged
    file is the same: a scratch file's encoding does not change the values read back."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)]


class _FinalSink:
    """The canonical file's writer (it holds up to a row group), the window's co-running columns set on the rows."""

    def __init__(self, path: Path, metadata: dict, window):
        self.writer, self.window = CanonicalWriter(path, metadata), window

    @property
    def buffered(self) -> int:
        return self.writer.buffered

    def __enter__(self):
        self.writer.__enter__()
        return self

    def add(self, table: pa.Table) -> None:
        self.writer.add(self.window.set_columns(table) if self.window is not None else table)

    def __exit__(self, *exc):
        return self.writer.__exit__(*exc)
