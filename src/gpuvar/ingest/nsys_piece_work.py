"""The part of pass 3 of an export ingested in pieces (gpuvar.ingest.nsys_pieces) that no piece carries to the next,
done ahead for the pieces to come, in worker processes.

Why: one process ingested an export piece after piece (2.5 s a million launches on the 2-core VM, 5.9 s on a
16-core Xeon) while the machine's other cores waited. A piece's kernel rows fetched and normalized (names,
canonical columns, the reader's drops) and the later kernels its context needs depend on nothing carried from piece
to piece but the launch-id offset, which the main process adds after. So workers prepare pieces ahead while the main
process carries the state (context, call sites, step offsets) and writes in order: the same bytes for any number of
workers (tests/test_nsys_piece_work.py).

PieceWork(workers=0) prepares each next piece in a thread, as pass 3 always fetched it; workers >= 1 uses that
many processes (spawned: the main process runs connectorx's and Arrow's threads, which a fork would copy mid-lock),
with up to workers + 1 pieces prepared or in preparation, which bounds the main process's memory.
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
from gpuvar.ingest.nsys_plan import kept_rows, light_columns
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


def normalize_kernels(table: pa.Table, head: nsys.ExportHead, out: ReaderOutput, unresolved: dict | None):
    """Canonical kernels of fetched rows, as the in-memory path makes them, launch ids from 0; (table, rows after
    the reader's own drops: the launch ids they took)."""
    keep = bool(head.raw.info.get("keep_vendor_columns", True))
    frame = nsys._kernels(table.drop_columns([ROWID]), head.raw.tables.get(nsys.RAW_STRINGS), out, keep, unresolved)
    kernels = drop_negative_durations(finalize_kernels(frame), out, "kernels")
    require_int64_times(nsys.FORMAT, kernels=kernels)
    return kernels, len(frame)


def prepare(source, head: nsys.ExportHead, span: tuple, ahead: tuple | None, rowids: bool) -> Prepared:
    """Fetch and normalize the kernel rows of rowids span = (lo, hi), and the kernels of ahead = (lo, hi, last end)
    that start by that end."""
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
    dropped = {table: dict(reasons) for table, reasons in part.dropped.items()}
    return Prepared(kernels, taken, dropped, unresolved, kept, later)


_WORKER: dict = {}  # a worker process's source, export head and scratch folder (set once, by _start)


def _start(source, head, folder: Path) -> None:
    _WORKER.update(source=source, head=head, folder=Path(folder))


def _prepare_there(k: int, span: tuple, ahead: tuple | None, rowids: bool) -> Prepared:
    """prepare() in a worker; the kernels go back as an Arrow IPC file in the scratch folder, which the main process
    maps instead of unpickling 40 MB a piece from a pipe (2-3x the piece's preparation in its own time)."""
    ready = prepare(_WORKER["source"], _WORKER["head"], span, ahead, rowids)
    path = _WORKER["folder"] / f"piece-{k}.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, ready.kernels.schema) as writer:
        writer.write_table(ready.kernels)
    ready.kernels = str(path)
    return ready


def _mapped(path: str) -> pa.Table:
    """The table of an IPC file, mapped (no copy); the file is removed (the mapping keeps its pages)."""
    with pa.memory_map(path) as source:
        table = pa.ipc.open_file(source).read_all()
    os.unlink(path)
    return table


class PieceWork:
    """The pieces of a plan prepared ahead, handed out in order (module docstring). A context manager."""

    def __init__(self, source, head: nsys.ExportHead, plan, workers: int, rowids: bool, folder: Path):
        self.source, self.head, self.plan, self.rowids, self.folder = source, head, plan, rowids, Path(folder)
        self.workers = max(0, int(workers))
        self.depth = self.workers + 1
        self.pool: Executor | None = None
        self.futures: dict = {}
        self.next = 0  # the next piece to submit

    def __enter__(self) -> PieceWork:
        if self.workers:
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.source, self.head, self.folder),
            )
        else:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuvar-piece")
        return self

    def __exit__(self, *exc) -> None:
        for future in self.futures.values():
            future.cancel()
        self.futures.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _args(self, k: int) -> tuple:
        pieces = self.plan.pieces
        piece = pieces[k]
        later = [p for p in pieces[k + 1 :] if p.first <= piece.last_end]
        ahead = (piece.hi, later[-1].hi, piece.last_end) if later else None
        return (piece.lo, piece.hi), ahead, self.rowids

    def _submit(self, k: int) -> None:
        if self.workers:
            self.futures[k] = self.pool.submit(_prepare_there, k, *self._args(k))
        else:
            self.futures[k] = self.pool.submit(prepare, self.source, self.head, *self._args(k))

    def result(self, k: int) -> Prepared:
        """Piece k prepared (pieces are asked for in order); the next ones are set going."""
        with worker_death(f"{self.source.path}: a worker preparing its pieces (--workers 0 prepares them here)"):
            while self.next < len(self.plan.pieces) and self.next < k + self.depth + (self.workers == 0):
                self._submit(self.next)
                self.next += 1
            ready = self.futures.pop(k).result()
        if isinstance(ready.kernels, str):
            ready.kernels = _mapped(ready.kernels)
        return ready
