"""The part of pass 3 of an export ingested in pieces (gpuvar.ingest.nsys_pieces) that no piece carries to the next,
done ahead for the pieces to come, in worker processes.

Why: one process ingested an export piece after piece (2.5 s a million launches on the 2-core VM, 5.9 s on a
16-core Xeon) while the machine's other cores waited. Most of a piece's work depends on nothing carried from piece
to piece but offsets the main process adds after:
  * its kernel rows fetched and normalized (names, canonical columns, the reader's drops; launch ids from 0), the
    later kernels its context needs, and, for an export without launch calls, its call sites (the plan's
    iterations for its rows travel with the task; the note's counts come back as a SiteSummary);
  * each copy bucket fetched (or read from its file), normalized and sorted, with its context inputs, except where
    an export's launch calls place the copies (the main process holds those facts);
  * its context columns, once the main process has the kernels carried from the piece before (context_of).
The main process keeps what carries (offsets, drops, the copy window, the kernels carried, the step offsets) and
writes in order: the same bytes for any number of workers (tests/test_nsys_pieces.py).

PieceWork(workers=0) prepares the next piece or bucket in a thread while the main process works on one, and computes
contexts itself; workers >= 1 uses that many processes (spawned: the main process runs connectorx's and Arrow's
threads, which a fork would copy mid-lock), with up to workers + 1 tasks prepared or in preparation, which bounds
the main process's memory. The tasks run in the order pass 3 takes them: piece k, then the buckets up to the last
one its kernels can overlap. A worker hands its table back as an Arrow IPC file in the pieces' temporary folder.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import worker_death
from gpuvar.ingest import nsys
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.context import input_frame
from gpuvar.ingest.host_timeline import MISSING
from gpuvar.ingest.nsys_plan import kept_rows, last_overlapped, light_columns
from gpuvar.ingest.nsys_sources import ROWID
from gpuvar.ingest.sanity import drop_negative_durations, require_int64_times
from gpuvar.schema import finalize_kernels

KERNEL_LIGHT = ("start", "end", "device_id", "stream_id", "rank", "process_id")  # context and co-running inputs


@dataclass
class Prepared:
    """A piece's kernels as pass 3 takes them."""

    kernels: pa.Table  # canonical, launch ids from 0 (the caller adds the launches before)
    taken: int  # rows after the reader's own drops: the launch ids they took
    dropped: dict  # table -> reason -> rows (ReaderOutput.dropped)
    unresolved: dict  # name column -> rows whose name id StringIds lacks (nsys._kernels)
    rowids: np.ndarray | None  # the rowids of the rows kept, when asked (an export with launch calls)
    ahead: pd.DataFrame | None  # light columns of the later kernels starting by the piece's last end, None if none
    sites: object = None  # the call-site note's counts (call_sites.SiteSummary), where the call sites were set here


def normalize_kernels(table: pa.Table, head: nsys.ExportHead, out: ReaderOutput, unresolved: dict | None):
    """Canonical kernels of fetched rows, as the in-memory path makes them, launch ids from 0; (table, rows after
    the reader's own drops: the launch ids they took)."""
    keep = bool(head.raw.info.get("keep_vendor_columns", True))
    frame = nsys._kernels(table.drop_columns([ROWID]), head.raw.tables.get(nsys.RAW_STRINGS), out, keep, unresolved)
    kernels = drop_negative_durations(finalize_kernels(frame), out, "kernels")
    require_int64_times(nsys.FORMAT, kernels=kernels)
    return kernels, len(frame)


def prepare(source, head: nsys.ExportHead, span: tuple, ahead: tuple | None, rowids: bool, sites=None) -> Prepared:
    """Fetch and normalize the kernel rows of rowids span = (lo, hi), and the kernels of ahead = (lo, hi, last end)
    that start by that end. sites: (steps, positions, note) of the trace's iterations for these rows in launch
    order (an export without launch calls: nsys_plan._iterations), from which the call sites are set here."""
    table = source.fetch(nsys.KERNEL_TABLE, head.k_cols, *span)
    nsys.check_times(source.path, table, nsys.KERNEL_TABLE)
    kept = None
    if rowids:
        light = light_columns(table)
        kept = light["rowid"][kept_rows(light["start"], light["end"], light["valid"])]
    part, unresolved = ReaderOutput(nsys.FORMAT, None), {}
    kernels, taken = normalize_kernels(table, head, part, unresolved)
    del table
    later = None
    if ahead is not None:
        lo, hi, last_end = ahead
        chunk = source.fetch(nsys.KERNEL_TABLE, head.k_cols, lo, hi, start_max=last_end)
        later = input_frame(normalize_kernels(chunk, head, ReaderOutput(nsys.FORMAT, None), {})[0], KERNEL_LIGHT)
    dropped = {name: dict(reasons) for name, reasons in part.dropped.items()}
    summary = None
    if sites is not None:
        kernels, summary = with_call_sites(kernels, *sites)
    return Prepared(kernels, taken, dropped, unresolved, kept, later, summary)


def with_call_sites(kernels: pa.Table, steps: np.ndarray | None, positions: np.ndarray | None, note: str | None):
    """(the kernels with their call-site columns, the note's counts): add_call_sites with the trace's iterations,
    given in launch order (start, then correlation id, then the row), put back in table order."""
    from gpuvar.ingest.call_sites import Iterations, SiteSummary, add_call_sites
    from gpuvar.ingest.nsys_plan import exact_ints

    n = kernels.num_rows
    step, position = np.full(n, MISSING, np.int64), np.full(n, -1, np.int64)
    if steps is not None:
        corr = exact_ints(kernels.column("correlation_id"), MISSING)
        order = np.lexsort((np.arange(n), corr, exact_ints(kernels.column("start"), MISSING)))
        step[order] = np.where(steps >= 0, steps.astype(np.int64), MISSING)
        position[order] = positions.astype(np.int64)
    summary = SiteSummary()
    out = ReaderOutput(nsys.FORMAT, None)  # (with a summary, the note is the summary's)
    kernels, _ = add_call_sites(
        None, out, kernels, None, host=None, iterations=Iterations(step, position, note), summary=summary
    )
    return kernels, summary


@dataclass
class PreparedCopies:
    """A bucket's copies as pass 3 takes them."""

    memcpy: pa.Table  # canonical, launch ids from 0; sorted unless `facts`
    taken: int  # rows after the reader's own drops: the launch ids they took
    dropped: dict
    facts: tuple | None  # (launching op, step) per row where the export's launch calls place the copies (the caller
    # sets them: copies_from_facts), else None
    light: pd.DataFrame | None = None  # the copies' context inputs (COPY_INPUTS) in bucket order, when facts is None
    duplicates: int = 0  # rows repeating an earlier one (recorded_duplicates), when facts is None


def prepare_copies(bucket, head: nsys.ExportHead, kind_names: dict, source=None, schema=None) -> PreparedCopies:
    """The canonical copies of a bucket, as the in-memory path makes them, launch ids from 0. bucket: its IPC file
    (removed once read), a table, or its rowid range (lo, hi) in `source`, fetched and cast to `schema`."""
    from gpuvar.canonical_io import sort_canonical
    from gpuvar.ingest import recorded_duplicates
    from gpuvar.ingest.call_sites import copies_without_host
    from gpuvar.ingest.context import COPY_INPUTS
    from gpuvar.ingest.nsys_host_facts import COPY_FACTS
    from gpuvar.ingest.nsys_plan import exact_ints
    from gpuvar.schema import finalize_memcpy

    table = bucket
    if isinstance(bucket, tuple):
        table = source.fetch(nsys.MEMCPY_TABLE, head.m_cols, *bucket).drop_columns([ROWID])
        nsys.check_times(source.path, table, nsys.MEMCPY_TABLE)
        table = table.cast(schema) if table.schema != schema else table
    elif not isinstance(bucket, pa.Table):
        with pa.ipc.open_stream(bucket) as reader:
            table = reader.read_all()
        os.unlink(bucket)
    part, facts = ReaderOutput(nsys.FORMAT, None), None
    if COPY_FACTS[0] in table.column_names:  # the copies' facts, for the rows the reader keeps
        start, end = table.column("start"), table.column("end")
        valid = ~(np.asarray(start.is_null()) | np.asarray(end.is_null()))
        kept = kept_rows(exact_ints(start, 0), exact_ints(end, 0), valid)
        facts = (exact_ints(table.column(COPY_FACTS[0]))[kept], exact_ints(table.column(COPY_FACTS[1]), MISSING)[kept])
        table = table.drop_columns(list(COPY_FACTS))
    frame = nsys._memcpy(table, kind_names, part, bool(head.raw.info.get("keep_vendor_columns", True)))
    memcpy = drop_negative_durations(finalize_memcpy(frame), part, "memcpy")
    require_int64_times(nsys.FORMAT, memcpy=memcpy)
    dropped = {name: dict(reasons) for name, reasons in part.dropped.items()}
    ready = PreparedCopies(memcpy, len(frame), dropped, facts)
    if facts is None:
        memcpy = copies_without_host(memcpy)
        ready.light, ready.duplicates = input_frame(memcpy, COPY_INPUTS), recorded_duplicates(memcpy)
        ready.memcpy = sort_canonical(memcpy)
    return ready


def context_of(inputs: pd.DataFrame, copies: pd.DataFrame | None, rows: slice) -> dict:
    """The context columns (gpuvar.ingest.context.context_columns) of a piece's rows, `rows` of `inputs`: the
    kernels carried from the pieces before, the piece's and the later ones starting by its last end."""
    from gpuvar.ingest.context import context_columns

    return {name: values[rows] for name, values in context_columns(inputs, copies).items()}


_WORKER: dict = {}  # a worker process's source, export head, copy kinds and scratch folder (set once, by _start)


def _start(source, head, kind_names: dict, folder: Path) -> None:
    _WORKER.update(source=source, head=head, kind_names=kind_names, folder=Path(folder))


def _run(task: tuple, args: tuple):
    """A task in this process: ("piece", k) -> prepare(...), ("copies", j) -> prepare_copies(...)."""
    if task[0] == "piece":
        return prepare(_WORKER["source"], _WORKER["head"], *args)
    return prepare_copies(args[0], _WORKER["head"], _WORKER["kind_names"], _WORKER["source"], args[1])


def _run_there(task: tuple, args: tuple):
    """A task in a worker; its table goes back as an Arrow IPC file in the scratch folder, which the main process
    maps instead of unpickling 40 MB a piece from a pipe (2-3x the piece's preparation in its own time)."""
    ready = _run(task, args)
    name = "kernels" if task[0] == "piece" else "memcpy"
    table = getattr(ready, name)
    path = _WORKER["folder"] / f"{task[0]}-{task[1]}.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    setattr(ready, name, str(path))
    return ready


def _mapped(path: str) -> pa.Table:
    """The table of an IPC file, mapped (no copy); the file is removed (the mapping keeps its pages)."""
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    os.unlink(path)
    return table


def task_order(plan, buckets: list) -> list[tuple]:
    """The tasks in the order pass 3 takes them: ("piece", k), then ("copies", j) for each bucket with rows
    (buckets[j] not None) up to the last one piece k's kernels can overlap (nsys_pieces._read_buckets)."""
    order, read = [], 0
    for k in range(len(plan.pieces)):
        order.append(("piece", k))
        if not buckets:
            continue
        last = last_overlapped(plan, k)
        order.extend(("copies", j) for j in range(read, last + 1) if buckets[j] is not None)
        read = max(read, last + 1)
    return order


class PieceWork:
    """The pieces and copy buckets of a plan prepared ahead, handed out in order (module docstring). A context
    manager. buckets: the copy buckets, IPC files or rowid ranges (None where a bucket has no rows; [] without copies),
    schema: the one the ranges are cast to."""

    def __init__(self, source, head, plan, workers: int, rowids: bool, folder: Path, buckets: list, kind_names, schema):
        self.source, self.head, self.plan, self.rowids, self.folder = source, head, plan, rowids, Path(folder)
        self.buckets, self.kind_names, self.schema = buckets, kind_names, schema
        self.workers = max(0, int(workers))
        self.depth = self.workers + 1
        self.pool: Executor | None = None
        self.order = task_order(plan, buckets)
        self.kept_before = np.cumsum([0] + [p.kept for p in plan.pieces])  # each piece's place in the launch order
        self.futures: dict = {}
        self.next = 0  # the next task to submit
        self.taken = 0  # the tasks handed out

    def __enter__(self) -> PieceWork:
        if self.workers:
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.source, self.head, self.kind_names, self.folder),
            )
        else:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuvar-piece")
        return self

    def __exit__(self, *exc) -> None:
        for future in self.futures.values():
            future.cancel()
        self.futures.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _args(self, task: tuple) -> tuple:
        if task[0] == "copies":
            bucket = self.buckets[task[1]]
            return (bucket if isinstance(bucket, tuple) else str(bucket)), self.schema
        pieces = self.plan.pieces
        piece, last = pieces[task[1]], last_overlapped(self.plan, task[1])
        ahead = (piece.hi, pieces[last].hi, piece.last_end) if last > task[1] else None
        sites = None
        if not self.rowids:  # no launch calls: the call sites from the plan's iterations, set with the piece
            at = slice(self.kept_before[task[1]], self.kept_before[task[1]] + piece.kept)
            plan = self.plan
            sites = (None, None, plan.note) if plan.step is None else (plan.step[at], plan.position[at], plan.note)
        return (piece.lo, piece.hi), ahead, self.rowids, sites

    def _submit(self, task: tuple) -> None:
        if self.workers:
            self.futures[task] = self.pool.submit(_run_there, task, self._args(task))
        elif task[0] == "piece":
            self.futures[task] = self.pool.submit(prepare, self.source, self.head, *self._args(task))
        else:
            bucket, schema = self._args(task)
            self.futures[task] = self.pool.submit(
                prepare_copies, bucket, self.head, self.kind_names, self.source, schema
            )

    def _died(self):
        return worker_death(f"{self.source.path}: a worker preparing its pieces (--workers 0 prepares them here)")

    def context(self, inputs: pd.DataFrame, copies: pd.DataFrame | None, rows: slice):
        """A piece's context columns (context_of): a dict here without workers, else a Future of a worker's, which
        `contexts` turns into the dict."""
        if not self.workers:
            return context_of(inputs, copies, rows)
        with self._died():
            return self.pool.submit(context_of, inputs, copies, rows)

    def contexts(self, context) -> dict:
        """The dict of `context`'s result."""
        if isinstance(context, dict):
            return context
        with self._died():
            return context.result()

    def take(self, task: tuple):
        """The next task's result (Prepared or PreparedCopies); `task` is the one pass 3 expects (checked); the next
        ones are set going."""
        if self.taken >= len(self.order) or self.order[self.taken] != task:
            raise RuntimeError(f"pass 3 asked for {task}, the plan's next task is {self.order[self.taken :][:1]}")
        with self._died():
            while self.next < len(self.order) and self.next <= self.taken + self.depth:
                self._submit(self.order[self.next])
                self.next += 1
            ready = self.futures.pop(task).result()
        self.taken += 1
        name = "kernels" if task[0] == "piece" else "memcpy"
        if isinstance(getattr(ready, name), str):
            setattr(ready, name, _mapped(getattr(ready, name)))
        return ready
