"""Nsight Systems SQLite exports ingested in bounded memory, piece by piece (issue 38).

Why: the in-memory ingest holds the whole trace with its canonical, call-site and context columns, about 1.8 KB per
launch (3.6 GB at 2 M launches), so a 20 M-launch export needed ~37 GB. Here the export is read and written in
pieces of about PieceSettings.rows kernel rows: memory follows the piece and the per-step summaries, not the trace,
and the files are the bytes the in-memory path writes (tests/test_nsys_pieces.py compares them file by file).

Which exports (`plan_reason`): a rowid span above PieceSettings.above kernel rows (or below it, where the export held
whole would not fit in the memory available: PieceSettings.when_short), with kernel rows stored in start
order (nsys writes them so; checked while reading: otherwise the in-memory path). Copies may be stored in any order.
An export with CUDA API calls (CUPTI_ACTIVITY_KIND_RUNTIME) places each launch by its call, its NVTX range and its
step: gpuvar.ingest.nsys_host_facts does that over the whole trace in one sweep in call order, before pass 2, and
pass 3 reads each piece's facts (the raw Parquet of `gpuvar read` holds no such export in pieces: `gpuvar
normalize` takes it in memory).

Three passes over the export (gpuvar.ingest.nsys_sources: the SQLite file through connectorx for `gpuvar ingest`,
or the raw Parquet of `gpuvar read` for `gpuvar normalize`, the workflow's two steps), each in runs of rows:
 1. kernels, light columns (gpuvar.ingest.nsys_plan): the pieces (rowid ranges cut where the start time changes,
    so rows that share a start, exact duplicates among them, stay in one piece), each piece's first start and last
    end, the processes, and the kernel-name sequence per (process, device) in launch order (1-2 bytes per launch
    for each of the two codes), from which the
    iterations are found once for the whole trace (gpuvar.ingest.iterations), as the in-memory path does.
 2. copies: stored in start order (as nsys stores them), a scan of their starts finds each piece's rowid range
    (nsys_plan.copy_ranges); otherwise every column, each row appended to the Arrow IPC file of the piece its
    start falls in (a bucket sort on disk, in a temporary folder inside the output folder, removed at the end).
    With iterations, the kernels' launch configurations again: step_threads needs each step's total.
 3. per piece: its kernel rows normalized by the reader (gpuvar.ingest.nsys), launch ids offset by the rows
    before; the context and co-running columns over the piece plus the kernels and copies beside it in time
    (earlier kernels still running or last on their stream, later ones starting before the piece's last end, the
    copies of the buckets up to that end); call sites from the trace's iterations; step offsets from each step's
    first start (carried from piece to piece); sorted and written in write_canonical's row groups. The copy
    buckets are normalized and written as the kernel pieces reach them. What no piece carries to the next
    (fetching and normalizing, call sites, context columns) is prepared ahead, in PieceSettings.workers worker
    processes (gpuvar.ingest.nsys_piece_work); the main process adds the offsets and writes in order.
The notes and the books sum the pieces' counts into the in-memory path's words.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from gpuvar import progress
from gpuvar.canonical_io import CanonicalWriter, from_numpy, sort_canonical, write_canonical
from gpuvar.heap import give_back
from gpuvar.ingest import books, finish_report, nsys, recorded_duplicates, report_head
from gpuvar.ingest.base import ReaderOutput, in_wal_mode
from gpuvar.ingest.call_sites import (
    SiteSummary,
    add_sites_from_facts,
    copies_from_facts,
)
from gpuvar.ingest.context import (
    COPY_INPUTS,
    KERNEL_INPUTS,
    append_context,
    arrow_floats,
    input_frame,
)
from gpuvar.ingest.corun import corun_columns, corun_note, set_columns
from gpuvar.ingest.gpu_identity import Recorded, single_trace_gpus, single_trace_notes
from gpuvar.ingest.host_timeline import MISSING
from gpuvar.ingest.nsys_host_facts import Scratch, has_launch_calls, host_facts
from gpuvar.ingest.nsys_host_parquet import ParquetFacts
from gpuvar.ingest.nsys_piece_work import KERNEL_LIGHT, PieceWork, PreparedCopies, prepare_copies
from gpuvar.ingest.nsys_plan import (
    NotInPieces,
    PieceSettings,
    Plan,
    bucket_copies,
    copy_ranges,
    exact_ints,
    last_overlapped,
    make_plan,
    sum_step_threads,
)
from gpuvar.ingest.nsys_sources import ROWID, ParquetSource, SqliteSource
from gpuvar.ingest.nsys_sqlite import connect, rowid_name, rowid_span
from gpuvar.ingest.step_size import COLUMN as STEP_THREADS
from gpuvar.ingest.step_store import DENSE_STEPS, FirstStarts
from gpuvar.layout import KERNELS_TABLE, MEMCPY_TABLE
from gpuvar.schema import empty_memcpy

log = logging.getLogger("gpuvar.ingest.nsys_pieces")

# --- pass 3: the pieces --------------------------------------------------------------------------------------


@dataclass
class _Books:
    rows_written: int = 0
    duplicates: int = 0
    columns: int = 0


@dataclass
class _State:
    """What travels from piece to piece."""

    out: ReaderOutput  # the trace's drops and facts
    unresolved: dict = field(default_factory=dict)
    summary: object = None  # call_sites.SiteSummary
    launch_offset: int = 0
    copy_offset: int = 0
    carry: pd.DataFrame | None = None  # earlier kernels still running, or last on their stream
    copies: pd.DataFrame | None = None  # copies of the buckets read, not yet ended
    buckets_read: int = 0
    step_first: FirstStarts = field(default_factory=FirstStarts)  # (device, step) -> first start
    corun_overlapping: int = 0
    corun_lost: int = 0
    kernels: _Books = field(default_factory=_Books)
    memcpy: _Books = field(default_factory=_Books)
    held_kernels: int = 0  # most kernel rows held at once (a piece with the kernels beside it)
    held_copies: int = 0  # most copy rows held at once (the window and the bucket being written)
    host: Scratch | None = None  # an export with launch calls: the facts of its launches (nsys_host_facts)


def _merge_drops(into: ReaderOutput, dropped: dict) -> None:
    for table, reasons in dropped.items():
        for reason, count in reasons.items():
            into.drop(table, reason, count)


def _read_buckets(state: _State, plan: Plan, k: int, files: list, work: PieceWork, writer) -> None:
    """Take and write the copy buckets up to the last one piece k's kernels can overlap (normalized ahead:
    gpuvar.ingest.nsys_piece_work), keeping their light columns in the copy window; then drop the copies that
    ended before the piece's first start."""

    piece, last = plan.pieces[k], last_overlapped(plan, k)
    frames = [state.copies] if state.copies is not None else []
    while state.buckets_read <= last:
        j = state.buckets_read
        state.buckets_read += 1
        if files[j] is None:
            continue
        memcpy, light = _take_copies(state, work.take(("copies", j)))
        frames.append(light)
        state.held_copies = max(state.held_copies, sum(len(f) for f in frames))
        writer.add(memcpy)
    if not frames:
        return
    window = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    state.copies = window[window["end"].to_numpy() >= piece.first].reset_index(drop=True)


def _take_copies(state: _State, ready: PreparedCopies) -> tuple[pa.Table, pd.DataFrame]:
    """A bucket's copies, sorted, with launch ids from the copies before, and their context inputs; their drops,
    duplicates and rows go to the books. Where the export's launch calls place them, placed here."""

    memcpy = _offset_launches(ready.memcpy, state.copy_offset)
    state.copy_offset += ready.taken
    light, duplicates = ready.light, ready.duplicates
    if ready.facts is not None:
        op, step = ready.facts
        if len(op) != memcpy.num_rows:
            raise RuntimeError(f"{len(op)} copy facts for {memcpy.num_rows} copies")
        memcpy = copies_from_facts(memcpy, op, step, state.host.facts)
        light, duplicates = input_frame(memcpy, COPY_INPUTS), recorded_duplicates(memcpy)
        memcpy = sort_canonical(memcpy)
    _merge_drops(state.out, ready.dropped)
    state.memcpy.duplicates += duplicates
    state.memcpy.rows_written += memcpy.num_rows
    state.memcpy.columns = memcpy.num_columns
    return memcpy, light


def _step_offsets(state: _State, kernels: pa.Table) -> np.ndarray:
    """ctx_step_offset_ns (context.step_offsets) with each (device, step)'s first start carried across pieces."""
    start, end = exact_ints(kernels.column("start"), MISSING), exact_ints(kernels.column("end"), MISSING)
    device, step = exact_ints(kernels.column("device_id"), MISSING), exact_ints(kernels.column("step"), MISSING)
    rows = np.flatnonzero(
        (start != MISSING) & (end != MISSING) & (device != MISSING) & (end >= start) & (step != MISSING)
    )
    offset = np.full(kernels.num_rows, np.nan)
    if len(rows):
        base = state.step_first.first(device[rows], step[rows], start[rows])
        offset[rows] = (start[rows] - base).astype(np.float64)
    return offset


def _plan_step_threads(steps: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> dict:
    """Plan.step_threads from the steps with a value: arrays indexed by step where the numbers allow (as
    sum_step_threads makes them), else a dict."""
    if not len(steps):
        return {}
    if steps.min() >= 0 and steps.max() < DENSE_STEPS:
        size = int(steps.max()) + 1
        dense_sums, dense_counts = np.zeros(size), np.zeros(size, np.int64)
        dense_sums[steps], dense_counts[steps] = sums, counts
        return {"sums": dense_sums, "counts": dense_counts}
    return {"by_step": dict(zip(steps.tolist(), zip(sums.tolist(), counts.tolist())))}


def _step_threads_of(plan: Plan, kernels: pa.Table) -> np.ndarray:
    values = np.full(kernels.num_rows, np.nan)
    if not plan.step_threads:
        return values
    if "by_step" in plan.step_threads:  # step -> (threads summed, launches with a value): nsys_host_facts
        step = exact_ints(kernels.column("step"), MISSING)
        totals = {s: total for s, (total, count) in plan.step_threads["by_step"].items() if count > 0}
        return pd.Series(step).map(totals).to_numpy(np.float64, na_value=np.nan)
    sums, counts = plan.step_threads["sums"], plan.step_threads["counts"]
    step = exact_ints(kernels.column("step"), MISSING)
    ok = (step >= 0) & (step < len(counts))
    ok[ok] = counts[step[ok]] > 0
    values[ok] = sums[step[ok]]
    return values


def _corun(state: _State, ext: pd.DataFrame, rows: slice, recorded) -> dict:
    """The co-running columns of the piece's rows (corun.single_trace_arrays over the kernels beside them)."""

    frame = ext[["start", "end", "device_id", "process_id"]]
    process = frame["process_id"].to_numpy(dtype=np.int64, na_value=-1)
    process = np.where(process >= 0, pd.factorize(process)[0], -1).astype(np.int64)
    gpu, _ = single_trace_gpus(recorded, frame["device_id"], frame["process_id"])
    columns = {name: values[rows] for name, values in corun_columns(frame, gpu, process).items()}
    count = next(iter(columns.values()))
    state.corun_overlapping += int(np.nansum(count > 0))
    if recorded.renumbered:
        pid = frame["process_id"].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
        state.corun_lost += int(np.isin(pid, np.array(sorted(recorded.renumbered), dtype=np.float64)).sum())
    return arrow_floats(columns)


def _carry(state: _State, ext: pd.DataFrame, upto: int, next_first: int | None) -> None:
    """The kernels the next piece's context needs from this one and before: those still running at its first
    start, and the last of each stream (the previous kernel of its stream, for ctx_gap_ns)."""
    both = ext.iloc[:upto]
    if next_first is None:
        state.carry = None
        return
    open_ = both["end"].to_numpy() >= next_first
    keys = [both[c] for c in ("rank", "device_id", "stream_id") if c in both.columns]
    last = np.zeros(len(both), bool)
    last[both.groupby(keys, dropna=False, sort=False).tail(1).index.to_numpy()] = True
    state.carry = both[open_ | last].reset_index(drop=True)


def _offset_launches(table: pa.Table, offset: int) -> pa.Table:
    """A piece's launch ids (from 0) after the `offset` launches of the pieces before (kernels or copies)."""
    at = table.schema.get_field_index("launch_id")
    ids = from_numpy(exact_ints(table.column(at)) + offset)
    return table.set_column(at, table.schema.field(at), ids)


@dataclass
class _Front:
    """A piece between its two halves: its kernels (launch ids offset), the rowids of its kept rows (an export with
    launch calls), its context columns (a dict, or a Future of a worker's) and its co-running columns."""

    kernels: pa.Table
    rowids: np.ndarray | None
    context: object
    corun: dict
    sites: object  # the call-site note's counts of a piece whose call sites were set with it, else None


def _front(plan, k, state, files, work: PieceWork, writers, recorded, corun_on) -> _Front:
    """The first half of piece k: what carries from piece to piece (launch and copy offsets, drops, the copy window,
    the kernels carried for the next piece's context) and the piece's context columns, set going in a worker where
    there are workers. With workers, pass 3 runs piece k + 1's first half before piece k's second, so that the
    workers compute a context while the main process places the launches of the piece before."""

    piece = plan.pieces[k]
    ready = work.take(("piece", k))
    kernels, rowids = _offset_launches(ready.kernels, state.launch_offset), ready.rowids
    ready.kernels = None
    state.launch_offset += ready.taken
    _merge_drops(state.out, ready.dropped)
    for column, count in ready.unresolved.items():
        state.unresolved[column] = state.unresolved.get(column, 0) + count
    n = kernels.num_rows
    if n != piece.kept:
        raise RuntimeError(f"piece {k}: {n} kernels kept where the plan counted {piece.kept}")
    if writers.get("memcpy") is not None:
        _read_buckets(state, plan, k, files, work, writers["memcpy"])
    light = input_frame(kernels, KERNEL_LIGHT)
    frames = [f for f in (state.carry, light, ready.ahead) if f is not None and len(f)]
    ext = pd.concat(frames, ignore_index=True) if len(frames) > 1 else light
    state.held_kernels = max(state.held_kernels, len(ext))
    first = len(state.carry) if state.carry is not None and len(state.carry) else 0
    rows = slice(first, first + n)
    copies = None
    if writers.get("memcpy") is not None:
        copies = state.copies if state.copies is not None else pd.DataFrame(columns=list(COPY_INPUTS))
    inputs = ext[[c for c in KERNEL_INPUTS if c in ext.columns and c != "step"]]
    context = work.context(inputs, copies, rows)
    corun = _corun(state, ext, rows, recorded) if corun_on else {}
    _carry(state, ext, first + n, plan.pieces[k + 1].first if k + 1 < len(plan.pieces) else None)
    return _Front(kernels, rowids, context, corun, ready.sites)


def _back(plan, k, state, front: _Front, work: PieceWork, writers) -> None:
    """The second half of piece k: call sites, step offsets and sizes, the context columns, the books, the write."""

    piece, kernels, n = plan.pieces[k], front.kernels, front.kernels.num_rows
    front.kernels = None
    if state.host is not None:
        facts, shapes = state.host.piece_facts(piece, front.rowids, exact_ints(kernels.column("start")))
        kernels = add_sites_from_facts(kernels, facts, state.host.facts, state.summary)
        for name, values in shapes.items():
            kernels = set_columns(kernels, {name: pa.array(values, type=pa.float64(), from_pandas=True)})
    else:  # the call sites were set with the piece (nsys_piece_work.with_call_sites)
        state.summary.add(front.sites)
    offsets = pa.array(_step_offsets(state, kernels), type=pa.float64(), from_pandas=True)
    context = work.contexts(front.context)
    kernels = append_context(kernels, arrow_floats(context) | {"ctx_step_offset_ns": offsets})
    threads = pa.array(_step_threads_of(plan, kernels), type=pa.float64(), from_pandas=True)
    kernels = kernels.set_column(kernels.column_names.index(STEP_THREADS), STEP_THREADS, threads)
    kernels = set_columns(kernels, front.corun)
    state.kernels.duplicates += recorded_duplicates(kernels)
    state.kernels.rows_written += n
    state.kernels.columns = kernels.num_columns
    writers["kernels"].add(sort_canonical(kernels))


def _pass3(plan, state, files, work: PieceWork, writers, recorded, corun_on) -> None:
    """Every piece's two halves, in order; with workers, piece k + 1's first half before piece k's second."""
    count = len(plan.pieces)
    meter = progress.start("writing the canonical tables piece by piece", plan.rows, "kernel rows")
    ahead = _front(plan, 0, state, files, work, writers, recorded, corun_on)
    for k in range(count):
        progress.at(meter, plan.pieces[k].lo - plan.pieces[0].lo)
        front, ahead = ahead, None
        if work.workers and k + 1 < count:
            ahead = _front(plan, k + 1, state, files, work, writers, recorded, corun_on)
        _back(plan, k, state, front, work, writers)
        del front
        if ahead is None and k + 1 < count:
            ahead = _front(plan, k + 1, state, files, work, writers, recorded, corun_on)


# --- the entry point -----------------------------------------------------------------------------------------


def plan_reason(path: Path, settings: PieceSettings) -> str | None:
    """Why `path` (an Nsight Systems export) is ingested in memory, None when it is ingested in pieces."""
    try:
        return _plan_reason(path, settings)
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return "an unreadable database (the in-memory reader says why)"


def _plan_reason(path: Path, settings: PieceSettings) -> str | None:
    if settings.above is None:
        return "pieces are off"
    if in_wal_mode(path):
        return "a WAL-mode database"
    con = connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if nsys.KERNEL_TABLE not in tables:
            return "no kernel table"
        rowid = rowid_name(con, nsys.KERNEL_TABLE)
        if rowid is None or (nsys.MEMCPY_TABLE in tables and rowid_name(con, nsys.MEMCPY_TABLE) is None):
            return "a table without a rowid"
        if settings.above > 0:
            kernels, copies = export_rows(con)
            if kernels < settings.above:
                if settings.when_short and kernels and memory_short(kernels, copies):
                    return None  # held whole it would not fit: pieces, the same files
                return f"fewer than {settings.above} kernel rows"
    finally:
        con.close()
    return None


def export_rows(con: sqlite3.Connection) -> tuple[int, int]:
    """(kernel rows, copy rows) of an export, as their rowid spans (nsys_sqlite.rowid_span; count(*) scans the
    table's pages: 0.5 s at 2 M rows). An export with sparse rowids counts more rows than it has, which costs time
    (pieces below the threshold), never bytes."""
    rows = []
    for table in (nsys.KERNEL_TABLE, nsys.MEMCPY_TABLE):
        try:
            key = rowid_name(con, table)
            lo, hi = rowid_span(con, table, key) if key is not None else (None, None)
        except sqlite3.Error:  # (no such table)
            lo = hi = None
        rows.append(0 if lo is None else hi - lo + 1)
    return rows[0], rows[1]


def memory_short(kernels: int, copies: int) -> bool:
    """Whether an export of these rows, held whole, would take more memory than is available now."""
    from gpuvar.ingest.footprint import available_bytes, nsys_whole_bytes

    free = available_bytes()
    return free is not None and nsys_whole_bytes(kernels, copies) > free


def ingest_in_pieces(source: Path, output: Path, keep_vendor_columns: bool, settings: PieceSettings) -> dict | None:
    """`gpuvar ingest` of an Nsight Systems export in pieces (module docstring): the report, or None when the export
    is ingested in memory instead (plan_reason, or a NotInPieces found while planning: logged)."""
    t0 = time.perf_counter()
    reason = plan_reason(source, settings)
    if reason is not None:
        log.debug("%s: ingested in memory: %s", source, reason)
        return None
    return _in_pieces(SqliteSource(source), nsys.export_head(source, keep_vendor_columns), output, settings, t0)


def raw_plan_reason(manifest: dict, settings: PieceSettings) -> str | None:
    """plan_reason for the raw tables of `gpuvar read` (raw.json's facts)."""
    tables = manifest.get("tables", {})
    if manifest.get("format") != nsys.FORMAT or nsys.RAW_KERNELS not in tables:
        return "not an Nsight Systems read"
    if nsys.RAW_RUNTIME in tables and "host_facts" not in manifest:
        return "its CUDA API calls place each launch, and `gpuvar read` stored no launch facts for it"
    if settings.above is None:
        return "pieces are off"
    kernels = int(tables[nsys.RAW_KERNELS].get("rows", 0))
    if kernels < settings.above:
        copies = int(tables.get(nsys.RAW_MEMCPY, {}).get("rows", 0))
        if settings.when_short and kernels and memory_short(kernels, copies):
            return None  # held whole they would not fit: pieces, the same files
        return f"at most {settings.above} kernel rows"
    return None


def normalize_in_pieces(raw_folder: Path, output: Path, settings: PieceSettings) -> dict | None:
    """`gpuvar normalize` of the raw tables of a big Nsight Systems export in pieces: the report, or None when they
    are normalized in memory instead (raw_plan_reason, or a NotInPieces found while planning)."""
    import json

    from gpuvar.ingest.raw import RAW_MANIFEST, RawTrace, table_file

    t0 = time.perf_counter()
    try:
        manifest = json.loads((Path(raw_folder) / RAW_MANIFEST).read_text())
    except (OSError, ValueError):
        return None  # load_raw says what is wrong with the folder
    if raw_plan_reason(manifest, settings) is not None:
        return None
    tables = {}
    for name in (nsys.RAW_STRINGS, nsys.RAW_MEMCPY_ENUM):
        if name in manifest["tables"]:
            tables[name] = pq.read_table(Path(raw_folder) / table_file(name))
    raw = RawTrace(
        nsys.FORMAT,
        manifest["source"],
        tables,
        dropped=manifest.get("dropped", {}),
        notes=list(manifest.get("notes", [])),
        info=manifest.get("info", {}),
    )
    k_cols = pq.read_schema(Path(raw_folder) / table_file(nsys.RAW_KERNELS)).names
    m_cols = None
    if nsys.RAW_MEMCPY in manifest["tables"]:
        m_cols = pq.read_schema(Path(raw_folder) / table_file(nsys.RAW_MEMCPY)).names
    head = nsys.ExportHead(raw, k_cols, m_cols, {})
    host = ParquetFacts(raw_folder, manifest["host_facts"]) if "host_facts" in manifest else None
    return _in_pieces(ParquetSource(raw_folder, manifest["source"]), head, Path(output), settings, t0, host)


def _in_pieces(source, head: nsys.ExportHead, output: Path, settings: PieceSettings, t0: float, host=None):
    """Passes 1-3 (module docstring); None where the export turns out not to suit pieces (NotInPieces, while planning
    or writing: the files written so far are removed). host: the launches' facts `gpuvar read` stored
    (nsys_host_facts.ParquetFacts), else found here for an export with launch calls."""
    output.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".gpuvar-pieces-", dir=output))
    if host is None and isinstance(source, SqliteSource) and has_launch_calls(head):
        host = Scratch(source.path, folder)  # the launches' facts found here (nsys_host_facts)
    try:
        try:
            plan = make_plan(source, head, settings, sequence=host is None)
            if isinstance(host, Scratch):
                host_facts(host, head, plan)
                give_back()  # the sweep's freed memory, before the pieces' row groups (gpuvar.heap)
            elif host is not None:
                host.check(plan)
            files, copy_rows, work_schema = [], None, None
            if head.m_cols is not None:
                progress.start("sorting the copies into the pieces")
                attach = host.attach if host is not None else None
                ranges = copy_ranges(source, head, plan, settings.rows) if host is None else None
                if ranges is not None:  # copies stored in start order: fetched bucket by bucket in pass 3
                    files, copy_rows, work_schema = ranges
                else:
                    files, copy_rows, _ = bucket_copies(source, head, plan, folder, settings.rows, attach)
            if host is not None:
                plan.step_threads = _plan_step_threads(*host.facts.step_threads)
            else:
                sum_step_threads(source, head, plan)
            buckets = (files, work_schema)
            return _write(source, output, head, plan, buckets, copy_rows, t0, settings, folder, host)
        except NotInPieces as exc:  # (the files pass 3 was writing are removed: canonical_io writes them atomically)
            log.info("%s: ingested in memory: %s", source.path, exc)
            return None
    finally:
        if host is not None:
            host.close()
        shutil.rmtree(folder, ignore_errors=True)


def _write(source, output, head, plan, buckets, copy_rows, t0, settings: PieceSettings, folder, host=None) -> dict:
    """Pass 3 and the report (folder: the temporary one). buckets: (the copy buckets, IPC files of bucket_copies or
    rowid ranges of copy_ranges, None where empty; the schema they are cast to, None for IPC files). host: the
    Scratch of an export with launch calls (nsys_host_facts), else None."""

    files, schema = buckets
    label = head.raw.source
    out = nsys.start_output(head.raw)
    scratch = ReaderOutput(nsys.FORMAT, None)
    kind_names = nsys.memcpy_setup(head.raw, scratch, has_copies=head.m_cols is not None)
    state = _State(out=out, summary=SiteSummary(), host=host)
    recorded = Recorded.from_report(
        {"devices": out.devices, "host": out.host, "gpu_renumbered_processes": out.gpu_renumbered}
    )
    corun_on = len(plan.processes) >= 2
    meta = {"source": label, "format": nsys.FORMAT}
    with ExitStack() as stack:
        writers = {"kernels": stack.enter_context(CanonicalWriter(output / KERNELS_TABLE, meta, background=True))}
        if head.m_cols is not None:
            writers["memcpy"] = stack.enter_context(CanonicalWriter(output / MEMCPY_TABLE, meta, background=True))
        work = PieceWork(source, head, plan, settings.workers, host is not None, folder, files, kind_names, schema)
        stack.enter_context(work)
        _pass3(plan, state, files, work, writers, recorded, corun_on)
        if head.m_cols is not None and writers["memcpy"].schema is None:  # no copy row at all: the empty table
            empty = source.fetch(nsys.MEMCPY_TABLE, head.m_cols, 0, 0).drop_columns([ROWID])
            writers["memcpy"].add(_take_copies(state, prepare_copies(empty, head, kind_names))[0])
    if head.m_cols is None:
        write_canonical(empty_memcpy(), output / MEMCPY_TABLE, meta)
    out.rows_read = {"kernels": plan.rows} | ({"memcpy": copy_rows} if copy_rows is not None else {})
    out.notes.extend(nsys.unresolved_notes(state.unresolved))
    out.notes.extend(scratch.notes)
    if corun_on:
        out.notes.extend(single_trace_notes(recorded, state.corun_lost))
        out.notes.append(corun_note(state.corun_overlapping, state.kernels.rows_written, len(plan.processes)))
    out.notes.append(state.summary.note())
    report = report_head(label, out)
    report["tables"]["kernels"] = books(
        label, out, "kernels", state.kernels.rows_written, state.kernels.columns, state.kernels.duplicates
    )
    if head.m_cols is not None:
        report["tables"]["memcpy"] = books(
            label, out, "memcpy", state.memcpy.rows_written, state.memcpy.columns, state.memcpy.duplicates
        )
    report["pieces"] = {
        "count": len(plan.pieces),
        "kernel_rows_each": settings.rows,
        "most_kernel_rows_held": state.held_kernels,
        "most_copy_rows_held": state.held_copies,
        "workers": settings.workers,
    }
    kinds = {type(b) for b in files if b is not None}
    if kinds:  # how pass 3 found each piece's copies (copy_ranges, else bucket_copies)
        report["pieces"]["copies"] = "rowid ranges (stored in start order)" if tuple in kinds else "sorted into files"
    finish_report(report, output, time.perf_counter() - t0, t0, None)
    return report
