"""Where each launch of a big Nsight Systems export with CUDA API calls came from, in bounded memory (issue 38).

Why: an export with CUDA API calls (every `nsys profile --trace=cuda` capture) places each kernel and copy by its
launching call (gpuvar.ingest.call_sites): the innermost NVTX push/pop range around the call on its thread is the
launching op, a step range or the cudaDeviceSynchronize calls around it are its step, and the op instances and
launches of a step are numbered in the order the program made the calls. In memory that costs the whole host
timeline and every launch at once. Here SQLite's own sorter (which spills to temporary files) streams the launches
in call order, and one sweep places and numbers them with the ranges still open per thread and counters per
(step, thread, op) of the steps in play (gpuvar.ingest.step_store), which is what memory then follows. The facts
of each launch go to files keyed by rowid (gpuvar.ingest.nsys_fact_files), which gpuvar.ingest.nsys_pieces reads
range by range when it
writes a piece (or, in the workflow, to Parquet beside the raw tables: gpuvar.ingest.nsys_host_parquet): the columns
are the bytes the in-memory path writes (tests/test_nsys_host_pieces.py compares them file by file).

The passes, each a query of the export, attached read-only to a scratch database in the pieces' temporary folder:
 1. the calls: one row per (process, correlation id), the first in table order where a call repeats (as
    call_sites._first_match keeps it), in a WITHOUT ROWID table keyed by them; the launches look their call up;
 2. the step ranges (NVTX ranges whose text names a step, filtered in SQL with LIKE, then by the reader's regex)
    and the cudaDeviceSynchronize calls: both small, held;
 3. without step ranges or syncs, the iterations of the repeating launch pattern, found from the kernel names in
    call order per (process, device) (call_sites._sequence_order), kept in fact files by rowid;
 4. the sweep (gpuvar.ingest.nsys_host_sweep): kernels and copies with their call, in (thread, call time,
    correlation id, rowid) order, beside the NVTX push/pop ranges in (thread, start, longest first, rowid) order.
Times, thread ids and correlation ids are taken through float64 as host_timeline.ints takes them
(CAST(CAST(x AS REAL) AS INTEGER)): epoch nanoseconds beyond 2**53 round there, and the order must be the same.
That read, the launches' select, the NVTX text and the rowid are spelled once for every pass in
gpuvar.ingest.nsys_host_sql.

Ranges that record input shapes (emit_nvtx(record_shapes=True)) give each launch its op's size features
(gpuvar.ingest.shapes) in the sweep, kept beside the other facts. Left to the in-memory path (NotInPieces):
step ranges none of whose launches fall in a step (then the syncs or the launch pattern decide, which the sweep
does not redo), and a sweep that places another number of kernels than the plan keeps.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar import progress
from gpuvar.ingest import nsys
from gpuvar.ingest.host_timeline import MISSING, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_STEP, SYNC_NAME, step_number
from gpuvar.ingest.nsys_host_sql import (
    PID_MASK_SQL,
    export_rowid,
    fetch_batches,
    has_nvtx_ranges,
    launches_with_calls_sql,
    nvtx_text_sql,
    through_float64,
)
from gpuvar.ingest.nsys_plan import NotInPieces, Plan, exact_ints, kept_kernels_sql
from gpuvar.ingest.nsys_sources import ROWID
from gpuvar.ingest.shapes import SIZE_COLUMNS
from gpuvar.ingest.step_store import StepTotals

COPY_FACTS = ("__gpuvar_launch_op", "__gpuvar_step")  # a copy chunk's facts, appended to it (attach)
# the records of the fact files (nsys_fact_files), a file per rowid bucket
KERNEL_FACTS = np.dtype(
    [(name, np.int64) for name in ("rowid", "op", "has_op", "step", "occurrence", "index", "thread")]
)
COPY_FACT_RECORD = np.dtype([("rowid", np.int64), ("op", np.int64), ("step", np.int64)])
ITERATION_FACTS = np.dtype([("rowid", np.int64), ("step", np.int64), ("position", np.int64)])
SHAPE_FACTS = np.dtype([("rowid", np.int64), *((name, np.float64) for name in SIZE_COLUMNS)])


@dataclass
class HostFacts:
    """What the sweep learnt, for pass 3 of the pieces."""

    op_names: list  # op code -> name
    ordinal: dict  # thread code -> its number among the threads that launch by op (first launch first)
    multi: set  # op codes launched by op on several threads ('@t{n}' in the call site)
    how: str  # how the steps were found (the note)
    prefix: str  # call-site prefix of a launch without op: 'step#' or 'iter#'
    step_base: int = 0  # subtracted from every step (cudaDeviceSynchronize segments are numbered from the first)
    step_threads: tuple = ()  # (steps, threads summed, launches with a value) of the steps with a value
    shape_columns: tuple = ()  # the launching op's size features written (shapes.SIZE_COLUMNS order)


def open_scratch(export: Path, folder: Path) -> sqlite3.Connection:
    """A scratch database in `folder` with the export attached read-only as `x`."""
    con = sqlite3.connect(folder / "host.sqlite")
    con.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA temp_store = FILE")
    con.execute("PRAGMA threads = 2")  # the ORDER BY sorts of the passes on both cores (2 M launches: -5 % wall)
    con.execute("PRAGMA cache_size = -32768")  # 32 MB of pages; SQLite's sorter spills beyond it
    con.execute("ATTACH DATABASE ? AS x", (Path(export).resolve().as_uri() + "?mode=ro",))
    return con


def _column(values, fill: int = MISSING) -> np.ndarray:
    return np.fromiter((fill if v is None else v for v in values), np.int64, len(values))


# --- 1. the calls ---------------------------------------------------------------------------------------------


def copy_calls(con: sqlite3.Connection, head: nsys.ExportHead) -> None:
    """The calls table: each (process, correlation id)'s first call, with its start and thread."""
    tid, corr = through_float64("globalTid"), through_float64("correlationId")
    con.execute(
        "CREATE TABLE calls (pid INTEGER NOT NULL, corr INTEGER NOT NULL, ts INTEGER NOT NULL, tid INTEGER NOT NULL,"
        " PRIMARY KEY (pid, corr)) WITHOUT ROWID"
    )
    con.execute(
        f"INSERT OR IGNORE INTO calls SELECT coalesce(({tid} >> 24) & {PID_MASK_SQL}, {PID_MASK_SQL}), {corr},"
        f' {through_float64("start")}, coalesce({tid}, -1) FROM x."{nsys.RUNTIME_TABLE}"'
        f" WHERE start IS NOT NULL AND {corr} >= 0 ORDER BY 1, 2, {export_rowid(con, nsys.RUNTIME_TABLE)}"
    )
    con.execute("CREATE INDEX calls_by_thread ON calls (tid, ts)")


# --- 2. step ranges and syncs --------------------------------------------------------------------------------


def step_ranges(con: sqlite3.Connection, head: nsys.ExportHead) -> pd.DataFrame | None:
    """The NVTX step ranges (start, end, number), sorted as call_sites._place sorts them, None without any."""
    if not has_nvtx_ranges(head):
        return None
    text, join = nvtx_text_sql(head)
    sql = (
        f'SELECT {through_float64("n.start")}, {through_float64("n.end")}, {text} FROM x."{nsys.NVTX_TABLE}" n {join}'
        f" WHERE n.start IS NOT NULL AND n.end IS NOT NULL AND n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND})"
        f" AND ({text} LIKE '%step%' OR {text} LIKE '%iter%') ORDER BY n.{export_rowid(con, nsys.NVTX_TABLE)}"
    )
    found = []
    for rows in fetch_batches(con, sql):
        for start, end, value in rows:
            number = step_number(NVTX_STEP, value)
            if number is not None:
                found.append((start, end, number))
    if not found:
        return None
    steps = pd.DataFrame(found, columns=["start", "end", "number"]).astype(np.int64)
    return steps.sort_values(["start", "end"], kind="stable")


def syncs(con: sqlite3.Connection, head: nsys.ExportHead) -> pd.DataFrame | None:
    """The cudaDeviceSynchronize calls (start, end; end MISSING where NULL), None without any."""
    if "nameId" not in head.tables.get(nsys.RUNTIME_TABLE, ()) or "StringIds" not in head.tables:
        return None
    ids = [
        i
        for i, value in con.execute("SELECT id, value FROM x.StringIds WHERE value LIKE 'cudaDeviceSynchronize%'")
        if isinstance(value, str) and SYNC_NAME.match(value)
    ]
    if not ids:
        return None
    end = through_float64("end") if "end" in head.tables[nsys.RUNTIME_TABLE] else through_float64("start")
    rows = con.execute(
        f'SELECT {through_float64("start")}, {end} FROM x."{nsys.RUNTIME_TABLE}" WHERE start IS NOT NULL'
        f" AND {through_float64('nameId')} IN ({', '.join(str(int(i)) for i in ids)})"
    ).fetchall()
    if not rows:
        return None
    return pd.DataFrame({"start": _column([r[0] for r in rows]), "end": _column([r[1] for r in rows])})


# --- 3. iterations of the launch pattern, in call order -----------------------------------------------------


def iterations_in_call_order(scratch: Scratch, head: nsys.ExportHead) -> str | None:
    """The iterations (call_sites._iteration_steps) of each (process, device) kernel sequence in call order, into
    the fact files scratch.iterations (rowid, step, position) for the launches inside one; the note, None without
    any."""
    from gpuvar.ingest.nsys_plan import Names

    con = scratch.con
    name_col = "demangledName" if "demangledName" in head.k_cols else "shortName"
    cols = head.k_cols
    pid = f"coalesce(({through_float64('t.globalPid')} >> 24) & {PID_MASK_SQL}, -1)" if "globalPid" in cols else "-1"
    device = "coalesce(t.deviceId, -1)" if "deviceId" in cols else "-1"
    select = launches_with_calls_sql(
        con, head, nsys.KERNEL_TABLE, 0, [f"{pid} AS pid", f"{device} AS dev", f"t.{name_col} AS nm"]
    )
    # launch_id is the rank by (GPU start, correlation id, row): call_sites._sequence_order's second key
    sql = f"SELECT rid, pid, dev, nm FROM ({select}) ORDER BY pid, dev, ot, gs, corr, rid"
    names = Names(head.raw.tables.get(nsys.RAW_STRINGS))
    # held per launch: its name's code (2 bytes, or 4 past 65,536 names), its iteration and position (4 + 4); its
    # rowid goes to a file in sequence order and comes back a block at a time with the iterations found (held, the
    # rowids were 0.16 GB at 20 M launches); the arrays are made at their size (no copy when the runs are joined)
    n = con.execute(f'SELECT count(*) FROM x."{nsys.KERNEL_TABLE}" t WHERE {kept_kernels_sql("t")}').fetchone()[0]
    path = scratch.folder / "sequence-rowids.bin"
    spill = open(path, "w+b")  # noqa: SIM115 - closed below, whatever happens
    try:
        return _iterations(scratch, sql, names, n, spill)
    finally:
        spill.close()
        path.unlink(missing_ok=True)


def _iterations(scratch: Scratch, sql: str, names, n: int, spill) -> str | None:
    """iterations_in_call_order over its query's n rows: each launch's rowid into `spill`, its name's code held,
    then the iterations of each (process, device) sequence into scratch.iterations."""
    from gpuvar.ingest.call_sites import iterations_note
    from gpuvar.ingest.iterations import find_iterations_coded

    code = np.empty(n, np.uint16)
    bounds, last, at = [], None, 0  # (first, end) of each (process, device) sequence: contiguous in this order
    for rows in fetch_batches(scratch.con, sql):
        rid, pids, devs, ids = zip(*rows)
        if at + len(rid) > n:
            raise NotInPieces("the kernel table changed while it was read")
        np.array(rid, np.int64).tofile(spill)
        values = names.code(pa.array(ids, pa.int64()))
        if len(names.names) > 1 << 16 and code.dtype == np.uint16:
            code = code.astype(np.uint32)
        code[at : at + len(rid)] = values
        pid, dev = np.array(pids), np.array(devs)  # (integers in any real export; objects compare alike)
        new = np.ones(len(rid), bool)  # where a (process, device) sequence starts
        new[1:] = (pid[1:] != pid[:-1]) | (dev[1:] != dev[:-1])
        new[0] = (pids[0], devs[0]) != last
        bounds.extend((np.flatnonzero(new) + at).tolist())
        last = (pids[-1], devs[-1])
        at += len(rid)
    if at != n:
        raise NotInPieces("the kernel table changed while it was read")
    if not n:
        return None
    bounds.append(n)
    dictionary = np.asarray(names.names, dtype=object)
    step = np.full(n, -1, np.int32)
    position = np.full(n, -1, np.int32)
    found = []
    for first, end in zip(bounds[:-1], bounds[1:]):
        it = find_iterations_coded(code[first:end], dictionary, dtype=np.int32)
        if it.anchor is None:
            continue
        step[first:end] = it.iteration
        position[first:end] = np.where(it.iteration >= 0, it.position, -1)
        found.append(it)
    del code
    if not found:
        return None
    spill.flush()
    spill.seek(0)
    for a in range(0, n, 1 << 18):  # in sequence order, the launches inside an iteration
        rowid = np.fromfile(spill, np.int64, count=min(1 << 18, n - a))
        inside = np.flatnonzero(step[a : a + len(rowid)] >= 0)
        records = np.empty(len(inside), ITERATION_FACTS)
        records["rowid"], records["step"], records["position"] = rowid[inside], step[a + inside], position[a + inside]
        scratch.iterations.add(records)
    return iterations_note(found, int((position < 0).sum()))


# --- the entry points -----------------------------------------------------------------------------------------


def has_launch_calls(head: nsys.ExportHead) -> bool:
    """Whether the in-memory path places this export's launches by their calls (host_timeline._nsys_host)."""
    return nsys.HOST_COLUMNS[nsys.RUNTIME_TABLE][1] <= set(head.tables.get(nsys.RUNTIME_TABLE, ()))


class Scratch:
    """The scratch database of one ingest and the launch facts the sweep found (pass 3 reads them piece by piece):
    the kernels', the copies' and the kernels' size features, in files bucketed by rowid (nsys_fact_files)."""

    def __init__(self, export: Path, folder: Path):
        from gpuvar.ingest.nsys_fact_files import FactFiles

        self.con = open_scratch(export, folder)
        self.export, self.folder = Path(export), Path(folder)
        self.facts: HostFacts | None = None
        self.kernels = FactFiles(Path(folder) / "facts", "kernels", KERNEL_FACTS)
        self.copies = FactFiles(Path(folder) / "facts", "copies", COPY_FACT_RECORD)
        self.shapes = FactFiles(Path(folder) / "facts", "shapes", SHAPE_FACTS)
        self.iterations = FactFiles(Path(folder) / "facts", "iterations", ITERATION_FACTS)

    def close(self) -> None:
        self.con.close()

    def piece_facts(self, piece, rowids: np.ndarray, starts: np.ndarray) -> tuple[dict, dict]:
        """(facts, size features) of a piece's kept kernels (their rowids and GPU starts, in order)."""
        facts = self.kernel_facts(piece.lo, piece.hi)
        if not np.array_equal(facts["rowid"], rowids):
            raise RuntimeError(f"the launch facts do not cover the {len(rowids)} kernels of rowids {piece.lo}..")
        return facts, self.kernel_shapes(rowids)

    def attach(self, chunk: pa.Table) -> pa.Table:
        """A copy chunk (rowid first) with the copies' op code and step appended (COPY_FACTS columns)."""
        op, step = self.copy_facts(exact_ints(chunk.column(ROWID)))
        return chunk.append_column(COPY_FACTS[0], pa.array(op)).append_column(COPY_FACTS[1], pa.array(step))

    def kernel_facts(self, lo: int, hi: int | None) -> dict[str, np.ndarray]:
        """The facts of the kernels with lo <= rowid < hi, in rowid order."""
        return self.kernels.columns_between(lo, hi)

    def kernel_shapes(self, rowids: np.ndarray) -> dict[str, np.ndarray]:
        """The launching op's size features of these kernels (rowids in order), NaN where none; {} where no range
        recorded shapes."""
        columns = self.facts.shape_columns
        if not columns:
            return {}
        records, found = self.shapes.lookup(rowids)
        return {c: np.where(found, records[c], np.nan) for c in columns}

    def copy_facts(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(op code, step) of the copies with these rowids (rowids of one range, in order)."""
        records, found = self.copies.lookup(rowids)
        return np.where(found, records["op"], -1), np.where(found, records["step"], MISSING)


def step_threads(scratch: Scratch, head: nsys.ExportHead) -> StepTotals:
    """Each step's threads (step_size.step_threads: grid_size x workgroup_size summed over its kernels) and how many
    kernels have a value, from the kernels' steps in the fact files and their launch configurations read again
    through connectorx, a bucket at a time, as sum_step_threads reads them for an export without calls. Why not in
    the sweep: six more columns through SQLite's sort and as Python objects, for every launch. The sums are of
    integers, exact in float64 in any order."""
    from gpuvar.ingest.nsys_plan import LAUNCH_COLUMNS, launch_threads_of
    from gpuvar.ingest.nsys_sources import SqliteSource

    totals = StepTotals()
    launch = [c for c in LAUNCH_COLUMNS if c in head.k_cols]
    if not launch:
        return totals
    source = SqliteSource(scratch.export)
    for records in scratch.kernels.buckets():
        records = records[records["step"] != MISSING]
        if not len(records):
            continue
        rowid = records["rowid"]
        chunk = source.fetch(nsys.KERNEL_TABLE, launch, int(rowid[0]), int(rowid[-1]) + 1)
        at = np.searchsorted(exact_ints(chunk.column(ROWID)), rowid)  # (each fact's kernel is a row there)
        frame = pd.DataFrame({c: chunk.column(c).to_pandas().iloc[at].reset_index(drop=True) for c in launch})
        threads = launch_threads_of(frame)
        ok = np.isfinite(threads)
        totals.add(records["step"][ok], threads[ok])
    return totals


def host_facts(scratch: Scratch, head: nsys.ExportHead, plan: Plan | None) -> HostFacts:
    """Passes 1-4 (module docstring) into the scratch database; NotInPieces where the export is left to memory.
    plan None: the kernels kept are counted by the one who reads the facts (ParquetFacts)."""
    con = scratch.con
    progress.start("indexing the CUDA API calls")
    copy_calls(con, head)
    steps = step_ranges(con, head)
    sync_frame = syncs(con, head)
    mode = "nvtx" if steps is not None else "sync" if sync_frame is not None else "iterations"
    if mode == "iterations":
        progress.start("finding the launch loop's iterations in call order")
    note = iterations_in_call_order(scratch, head) if mode == "iterations" else None
    from gpuvar.ingest.nsys_host_sweep import sweep_launches

    sweep, names = sweep_launches(con, head, mode, steps, sync_frame, scratch)
    con.commit()
    kept = sum(p.kept for p in plan.pieces) if plan is not None else sweep.kernels
    if sweep.kernels != kept:
        raise NotInPieces(f"the launch sweep placed {sweep.kernels} kernels where the plan keeps {kept}")
    base, prefix = 0, "step#"
    seen = sweep.steps_seen.seen_steps()
    if mode == "nvtx":
        if not len(seen):
            raise NotInPieces("no launch call falls in its NVTX step ranges")
        how = f"{len(seen)} steps from NVTX step ranges"
    elif mode == "sync":
        base = int(seen[0]) if len(seen) else 0
        count = int(seen[-1]) - base + 1 if len(seen) else 0
        how = f"{count} steps from cudaDeviceSynchronize ({len(sync_frame)} calls)"
    else:
        how, prefix = note, "iter#"
    first = sorted(sweep.first_launch.items(), key=lambda item: item[1])  # (call time, thread id)
    ordinal = {code: number for number, (code, _) in enumerate(first)}
    multi = {code for code, threads in sweep.op_threads.items() if len(threads) > 1}
    steps_with, sums, counts = step_threads(scratch, head).totals()
    totals = (steps_with - base, sums, counts)
    scratch.facts = HostFacts(
        op_names=names,
        ordinal=ordinal,
        multi=multi,
        how=how,
        prefix=prefix,
        step_base=base,
        step_threads=totals,
        shape_columns=tuple(c for c in SIZE_COLUMNS if c in sweep.shape_columns),
    )
    return scratch.facts
