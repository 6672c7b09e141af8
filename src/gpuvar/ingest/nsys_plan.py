"""The plan of an Nsight Systems export ingested in pieces (gpuvar.ingest.nsys_pieces): passes 1 and 2.

Pass 1 (make_plan) reads six light kernel columns in rowid ranges: the pieces (rowid ranges cut where the start
time changes), each piece's first start and last end, the processes, and the kernel-name sequence per (process,
device) in launch order, from which the iterations are found once for the whole trace. Pass 2 puts every copy
row into the Arrow IPC file of the piece its start falls in (bucket_copies) and, with iterations, sums each
step's threads (sum_step_threads). Rows leave SQLite through connectorx, one rowid range per query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar import progress
from gpuvar.ingest import nsys
from gpuvar.ingest.host_timeline import MISSING, ints
from gpuvar.ingest.nsys_sources import ROWID

_INT32_NONE = -1


@dataclass(frozen=True)
class PieceSettings:
    """When and how an export is ingested in pieces: above `above` kernel rows, `rows` kernel rows per piece. On the
    20 M-launch demo export (docs/performance.md), 64 Ki rows held 0.85 GB in 120 s and 128 Ki rows 0.98 GB in
    104 s: the rest is the interpreter and the row group being written (write_canonical's 256 Ki rows).
    when_short: below `above` as well, when the export held whole would take more memory than is available
    (gpuvar.ingest.footprint): the same files, in bounded memory, where memory decides, not the row count."""

    above: int | None = 2_000_000  # None: never in pieces
    rows: int = 1 << 16
    when_short: bool = True
    workers: int = 0  # processes preparing the pieces ahead (gpuvar.ingest.nsys_piece_work); 0: a thread


class NotInPieces(Exception):
    """The export turned out not to suit pieces while they were planned (the reason is the message): it is ingested
    in memory instead."""


@dataclass
class Piece:
    lo: int  # first rowid
    hi: int | None  # the next piece's first rowid; None: to the end of the table
    first: int  # start of its first kept kernel
    last_end: int  # latest end of its kept kernels
    kept: int = 0  # kernels kept (after the reader's drops)


@dataclass
class Plan:
    """What pass 1 learnt: the pieces, the kernels' iterations (in launch order, None without any), the processes
    and every row count."""

    pieces: list[Piece]
    rows: int
    processes: set
    step: np.ndarray | None = None  # int32 iteration per kept launch in launch order, -1 outside any
    position: np.ndarray | None = None
    note: str | None = None
    step_threads: dict = field(default_factory=dict)  # step -> (sum of threads, launches with a value)


def exact_ints(column, fill: int = -1) -> np.ndarray:
    """A number column as int64 numpy, `fill` where null: exact for an integer column (host_timeline.ints goes
    through float64, which rounds epoch nanoseconds and big rowids, and the pieces cut and compare them)."""
    if isinstance(column, (pa.Array, pa.ChunkedArray)) and pa.types.is_integer(column.type):
        return nsys.int_values(column, fill).astype(np.int64, copy=False)
    return ints(column, fill)


# --- the plan: pass 1 ---------------------------------------------------------------------------------------


def kept_rows(start: np.ndarray, end: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The rows the reader keeps: start and end present, end >= start (nsys._drop_bad_times) and end - start not
    wrapped around int64 (sanity.drop_negative_durations)."""
    with np.errstate(over="ignore"):
        return valid & (end >= start) & ((end - start) >= 0)


def kept_kernels_sql(alias: str) -> str:
    """kept_rows as an SQL condition on a kernel or memcpy table row (the wrap of end - start aside: the row counts
    are compared after)."""
    return f'{alias}.start IS NOT NULL AND {alias}."end" IS NOT NULL AND {alias}."end" >= {alias}.start'


def light_columns(chunk: pa.Table) -> dict[str, np.ndarray]:
    """start, end, corr, device, pid (nulls: start/end 0 with valid False, others -1) and rowid of a chunk."""
    start, end = chunk.column("start"), chunk.column("end")
    valid = ~(np.asarray(start.is_null()) | np.asarray(end.is_null()))
    out = {
        "rowid": exact_ints(chunk.column(ROWID)),
        "start": exact_ints(start, 0),
        "end": exact_ints(end, 0),
        "valid": valid,
        "corr": exact_ints(chunk.column("correlationId"), MISSING)
        if "correlationId" in chunk.column_names
        else np.full(chunk.num_rows, MISSING),
        "device": exact_ints(chunk.column("deviceId"))
        if "deviceId" in chunk.column_names
        else np.full(chunk.num_rows, -1),
    }
    pid = exact_ints(chunk.column("globalPid")) if "globalPid" in chunk.column_names else np.full(chunk.num_rows, -1)
    out["pid"] = np.where(pid >= 0, nsys.pid_of(pid), -1)
    return out


class Names:
    """Kernel-name code per StringIds id, named as the reader names it (nsys.id_names)."""

    def __init__(self, strings: pa.Table | None):
        self.strings = strings
        self.by_id: dict[int, int] = {}
        self.codes: dict[str, int] = {}
        self.names: list[str] = []

    def code(self, ids: pa.ChunkedArray) -> np.ndarray:
        null = np.iinfo(np.int64).min
        values = exact_ints(ids, null)
        distinct, inverse = np.unique(values, return_inverse=True)
        new = [int(d) for d in distinct if int(d) not in self.by_id]
        if new:
            for sid, name in zip(new, nsys.id_names(new, self.strings, null, bool(ids.null_count))[0]):
                if name not in self.codes:
                    self.codes[name] = len(self.names)
                    self.names.append(name)
                self.by_id[sid] = self.codes[name]
        return np.array([self.by_id[int(d)] for d in distinct], dtype=np.int32)[inverse]


def make_plan(source, head: nsys.ExportHead, settings: PieceSettings, sequence: bool = True) -> Plan:
    """Pass 1 (module docstring) over a source of gpuvar.ingest.nsys_sources. sequence False: without the launch
    sequence and its iterations (an export with launch calls orders its launches by call: nsys_host_facts)."""
    name_col = "demangledName" if "demangledName" in head.k_cols else "shortName"
    columns = [c for c in ("start", "end", "correlationId", "deviceId", "globalPid", name_col) if c in head.k_cols]
    names = Names(head.raw.tables.get(nsys.RAW_STRINGS))
    groups: dict[int, int] = {}
    code_parts, group_parts, pieces, processes = [], [], [], set()
    pending: dict | None = None
    lo = source.first(nsys.KERNEL_TABLE)
    rows, chunks = source.spans(nsys.KERNEL_TABLE, columns, settings.rows)
    piece = Piece(lo, lo, 0, 0)
    last_start, seen = None, 0
    meter = progress.start("reading the kernels' times to cut the pieces", rows, "kernel rows")
    for chunk in chunks:
        seen += chunk.num_rows
        progress.at(meter, seen)
        nsys.check_times(source.path, chunk, nsys.KERNEL_TABLE)
        light = light_columns(chunk)
        keep = kept_rows(light["start"], light["end"], light["valid"])
        part = {k: v[keep] for k, v in light.items() if k != "valid"}
        part["name"] = names.code(chunk.column(name_col))[keep].astype(
            smallest(1 << 16 if len(names.names) <= 1 << 16 else 1 << 32)
        )
        key = part["pid"].astype(np.int64) * (1 << 32) + (part["device"] + 1)
        distinct, inverse = np.unique(key, return_inverse=True)
        part["group"] = np.array([groups.setdefault(int(k), len(groups)) for k in distinct], np.int32)[inverse]
        processes.update(np.unique(part["pid"][part["pid"] >= 0]).tolist())
        if pending is not None:
            part = {k: np.concatenate([pending[k], part[k]]) for k in part}
        if not len(part["start"]):
            pending = part
            continue
        s = part["start"]
        if (last_start is not None and s[0] < last_start) or (s[1:] < s[:-1]).any():
            raise NotInPieces("its kernel rows are not stored in start order")
        tail = s == s[-1]  # the run of the last start waits for the next chunk: ties are ordered together
        emit = {k: v[~tail] for k, v in part.items()}
        pending = {k: v[tail] for k, v in part.items()}
        _emit(emit, piece, code_parts, group_parts, sequence)
        last_start = int(s[-1])
        if piece.kept >= settings.rows:
            boundary = int(pending["rowid"][0])
            piece.hi = boundary
            pieces.append(piece)
            piece = Piece(boundary, boundary, 0, 0)
    if seen != rows:
        raise NotInPieces(f"rowid ranges read {seen} kernel rows where SQLite counts {rows}")
    if pending is not None:
        _emit(pending, piece, code_parts, group_parts, sequence)
    piece.hi = None  # (to the end)
    if piece.kept or not pieces:
        pieces.append(piece)
    else:  # trailing rowids with no kept kernel: the last piece's
        pieces[-1].hi = None
    if not sum(p.kept for p in pieces):
        raise NotInPieces("no kernel row is kept")
    plan = Plan(pieces, rows, processes)
    if sequence:
        _iterations(plan, code_parts, group_parts, np.asarray(names.names, dtype=object))
    return plan


def _emit(rows: dict, piece: Piece, code_parts: list, group_parts: list, sequence: bool = True) -> None:
    """Append kept rows (a run of whole start times) to the current piece and the launch sequence, in launch order:
    start, then correlation id, then rowid (call_sites._sequence_order for a trace without launch calls)."""
    if not len(rows["start"]):
        return
    order = np.lexsort((rows["rowid"], rows["corr"], rows["start"]))
    if sequence:
        code_parts.append(rows["name"][order])
        group_parts.append(rows["group"][order])
    if not piece.kept:
        piece.first = int(rows["start"][order[0]])
    piece.last_end = max(piece.last_end, int(rows["end"].max())) if piece.kept else int(rows["end"].max())
    piece.kept += len(order)


def smallest(count: int):
    """The narrowest unsigned type that numbers `count` things (2 bytes per launch for < 65,536 names)."""
    return np.uint8 if count <= 1 << 8 else np.uint16 if count <= 1 << 16 else np.uint32


def _iterations(plan: Plan, code_parts: list, group_parts: list, names: np.ndarray) -> None:
    """The iterations of each (process, device) launch sequence, as call_sites._iteration_steps finds them."""
    from gpuvar.ingest.call_sites import iterations_note
    from gpuvar.ingest.iterations import find_iterations_coded

    codes = np.concatenate(code_parts, dtype=smallest(len(names)), casting="unsafe")  # (all below the limit)
    code_parts.clear()
    group = np.concatenate(
        group_parts,
        dtype=smallest(max((int(g.max()) + 1 for g in group_parts if len(g)), default=1)),
        casting="unsafe",
    )
    group_parts.clear()
    n = len(codes)
    step = position = None  # (made with the first iterations found)
    found = []
    distinct = np.unique(group)
    for g in distinct:
        rows = np.flatnonzero(group == group.dtype.type(g)) if len(distinct) > 1 else slice(None)
        it = find_iterations_coded(codes[rows], names, dtype=np.int32)
        if it.anchor is None:
            continue
        if step is None:
            step = np.full(n, _INT32_NONE, np.int32)
            position = np.full(n, _INT32_NONE, np.int32)
        inside = it.iteration >= 0
        at = np.flatnonzero(inside) if isinstance(rows, slice) else rows[inside]
        step[at] = it.iteration[inside]
        position[at] = it.position[inside]
        found.append(it)
    if not found:
        return
    plan.step, plan.position = step, position
    plan.note = iterations_note(found, int((position < 0).sum()))


# --- pass 2: copies into buckets, step totals -----------------------------------------------------------------


def bucket_copies(source, head: nsys.ExportHead, plan: Plan, folder: Path, step: int, attach=None) -> tuple:
    """Every copy row into the IPC file of the piece its start falls in; (files, rows read). attach: a function
    adding columns to a chunk read (with its rowids), or None."""
    firsts = np.array([p.first for p in plan.pieces[1:]], dtype=np.int64)
    files = [folder / f"copies-{j}.arrows" for j in range(len(plan.pieces))]
    writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
    schema, seen = None, 0
    try:
        rows, chunks = source.ranges(nsys.MEMCPY_TABLE, head.m_cols, step)
        for chunk in chunks:
            seen += chunk.num_rows
            nsys.check_times(source.path, chunk, nsys.MEMCPY_TABLE)
            chunk = (attach(chunk) if attach is not None else chunk).drop_columns([ROWID])
            if schema is None:
                schema = chunk.schema
            elif chunk.schema != schema:
                chunk = chunk.cast(schema)
            start = chunk.column("start")
            bucket = np.searchsorted(firsts, exact_ints(start, np.iinfo(np.int64).min), side="right")
            order = np.argsort(bucket, kind="stable")
            cuts = np.flatnonzero(np.diff(bucket[order])) + 1
            for part in np.split(order, cuts):
                if not len(part):
                    continue
                j = int(bucket[part[0]])
                if j not in writers:
                    writers[j] = pa.ipc.new_stream(files[j], schema)
                writers[j].write_table(chunk.take(pa.array(part)))
    finally:
        for w in writers.values():
            w.close()
    if seen != rows:
        raise NotInPieces(f"rowid ranges read {seen} copy rows where SQLite counts {rows}")
    return [f if j in writers else None for j, f in enumerate(files)], seen, schema


def last_overlapped(plan: Plan, k: int) -> int:
    """The last piece whose kernels start by piece k's last end (k itself at least): the later pieces piece k's
    context sees, and the last copy bucket its kernels can overlap. The pieces' first starts rise (kernels are
    stored in start order), so those pieces are k + 1 to it."""
    pieces, last = plan.pieces, k
    while last + 1 < len(pieces) and pieces[last + 1].first <= pieces[k].last_end:
        last += 1
    return last


def copy_ranges(source, head: nsys.ExportHead, plan: Plan, step: int) -> tuple | None:
    """The buckets of bucket_copies as rowid ranges, where the copies are stored in start order without a null start
    (as nsys writes them): a scan of their start times instead of every column copied into IPC files. Then bucket j's
    rows, the copies starting from piece j's first start to piece j + 1's, are the rowids [lo, hi), in the order
    bucket_copies appends them; pass 3 fetches them (nsys_piece_work.prepare_copies). (buckets: (lo, hi) or None
    per piece, rows read, the first run's schema, which every bucket is cast to as bucket_copies casts its runs);
    None where the copies are not so stored."""
    firsts = np.array([p.first for p in plan.pieces[1:]], dtype=np.int64)
    rows, chunks = source.spans(nsys.MEMCPY_TABLE, ["start"], step)
    cuts: list[int] = []  # the rowid where each bucket after the first begins
    at: list[int] = []  # its position in the table
    seen, first_rowid, last_start = 0, None, None
    for chunk in chunks:
        start = chunk.column("start")
        if start.null_count or not pa.types.is_integer(start.type):  # (bucket_copies counts them, or says why not)
            return None
        s, rowid = exact_ints(start), exact_ints(chunk.column(ROWID))
        if (last_start is not None and len(s) and s[0] < last_start) or (s[1:] < s[:-1]).any():
            return None
        if len(s):
            first_rowid = int(rowid[0]) if first_rowid is None else first_rowid
            found = np.searchsorted(s, firsts[len(cuts) :], side="left")
            found = found[found < len(s)]
            cuts.extend(int(r) for r in rowid[found])
            at.extend(int(seen + f) for f in found)
            last_start = int(s[-1])
        seen += chunk.num_rows
    if seen != rows:
        raise NotInPieces(f"rowid ranges read {seen} copy rows where SQLite counts {rows}")
    lows = [first_rowid] + cuts + [None] * (len(plan.pieces) - 1 - len(cuts))
    highs = cuts + [None] * (len(plan.pieces) - len(cuts))
    starts = [0] + at + [seen] * (len(plan.pieces) - 1 - len(at))
    sizes = np.diff(starts + [seen])
    buckets = [(lo, hi) if size else None for lo, hi, size in zip(lows, highs, sizes)]
    schema = None
    if seen:
        schema = source.first_run(nsys.MEMCPY_TABLE, head.m_cols, step).drop_columns([ROWID]).schema
    return buckets, seen, schema


_LAUNCH = {c: nsys.KERNEL_RENAME[c] for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")}
LAUNCH_COLUMNS = tuple(_LAUNCH)  # the export's launch configuration columns


def launch_threads_of(frame: pd.DataFrame) -> np.ndarray:
    """grid_size x workgroup_size per row of the export's launch configuration columns (step_size.launch_threads)."""
    from gpuvar.ingest.step_size import launch_threads
    from gpuvar.schema import dimension_product

    canonical = frame.rename(columns=_LAUNCH)
    return launch_threads(dimension_product(canonical, "grid"), dimension_product(canonical, "block"))


def sum_step_threads(source, head: nsys.ExportHead, plan: Plan) -> None:
    """Each step's threads (grid_size x workgroup_size summed over its launches, step_size.step_threads) and how
    many launches have a value, from the launch configurations read again piece by piece."""
    if plan.step is None or not {"gridX", "blockX"} <= set(head.k_cols):
        return
    columns = [c for c in ("start", "end", "correlationId", *_LAUNCH) if c in head.k_cols]
    sums, counts = np.zeros(0), np.zeros(0, np.int64)
    at = 0
    for piece in plan.pieces:
        chunk = source.fetch(nsys.KERNEL_TABLE, columns, piece.lo, piece.hi)
        light = light_columns(chunk)
        keep = kept_rows(light["start"], light["end"], light["valid"])
        order = np.lexsort((light["rowid"][keep], light["corr"][keep], light["start"][keep]))
        frame = pd.DataFrame({raw: chunk.column(raw).to_pandas()[keep] for raw in _LAUNCH if raw in chunk.column_names})
        threads = launch_threads_of(frame)[order]
        step = plan.step[at : at + len(order)].astype(np.int64)
        at += len(order)
        ok = (step >= 0) & np.isfinite(threads)
        size = int(step.max()) + 1 if len(step) else 0
        if size > len(sums):
            sums, counts = np.pad(sums, (0, size - len(sums))), np.pad(counts, (0, size - len(counts)))
        sums += np.bincount(step[ok], weights=threads[ok], minlength=len(sums))
        counts += np.bincount(step[ok], minlength=len(counts))
    plan.step_threads = {"sums": sums, "counts": counts}
