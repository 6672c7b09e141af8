"""Where each launch of a big Nsight Systems export with CUDA API calls came from, in bounded memory (issue 38).

Why: an export with CUDA API calls (every `nsys profile --trace=cuda` capture) places each kernel and copy by its
launching call (gpuvar.ingest.call_sites): the innermost NVTX push/pop range around the call on its thread is the
launching op, a step range or the cudaDeviceSynchronize calls around it are its step, and the op instances and
launches of a step are numbered in the order the program made the calls. In memory that costs the whole host
timeline and every launch at once. Here SQLite's own sorter (which spills to temporary files) streams the launches
in call order, and one sweep places and numbers them with a stack of open ranges per thread and counters per
(step, thread, op) of the steps in play (gpuvar.ingest.step_store), which is what memory then follows. The facts
of each launch go to scratch tables keyed by rowid, which gpuvar.ingest.nsys_pieces reads range by range when it
writes a piece (or, in the workflow, to Parquet beside the raw tables: export_facts, ParquetFacts): the columns
are the bytes the in-memory path writes (tests/test_nsys_host_pieces.py compares them file by file).

The passes, each a query of the export, attached read-only to a scratch database in the pieces' temporary folder:
 1. the calls: one row per (process, correlation id), the first in table order where a call repeats (as
    call_sites._first_match keeps it), in a WITHOUT ROWID table keyed by them; the launches look their call up;
 2. the step ranges (NVTX ranges whose text names a step, filtered in SQL with LIKE, then by the reader's regex)
    and the cudaDeviceSynchronize calls: both small, held;
 3. without step ranges or syncs, the iterations of the repeating launch pattern, found from the kernel names in
    call order per (process, device) (call_sites._sequence_order), kept in the scratch database by rowid;
 4. the sweep: kernels and copies with their call, in (thread, call time, correlation id, rowid) order, beside the
    NVTX push/pop ranges in (thread, start, longest first, rowid) order.
Times, thread ids and correlation ids are taken through float64 as host_timeline.ints takes them
(CAST(CAST(x AS REAL) AS INTEGER)): epoch nanoseconds beyond 2**53 round there, and the order must be the same.

Ranges that record input shapes (emit_nvtx(record_shapes=True)) give each launch its op's size features
(gpuvar.ingest.shapes) in the sweep, kept in the scratch table kshapes. Left to the in-memory path (NotInPieces):
step ranges none of whose launches fall in a step (then the syncs or the launch pattern decide, which the sweep
does not redo), and a sweep that places another number of kernels than the plan keeps.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.ingest import nsys
from gpuvar.ingest.host_timeline import MISSING, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_STEP, SYNC_NAME, _step_number
from gpuvar.ingest.nsys_plan import NotInPieces, Plan, exact_ints, kept_kernels_sql, kept_rows
from gpuvar.ingest.nsys_sources import ROWID
from gpuvar.ingest.shapes import SIZE_COLUMNS
from gpuvar.ingest.step_store import StepCounters, StepTotals

FETCH_ROWS = 1 << 16
KEEP_STEPS = 4096  # steps whose counters stay in memory (step_store.StepCounters)
COPY_FACTS = ("__gpuvar_launch_op", "__gpuvar_step")  # a copy chunk's facts, appended to it (attach)
KERNEL_FACTS_FILE, COPY_FACTS_FILE = "host_kernel_facts.parquet", "host_copy_facts.parquet"  # gpuvar read's
STEP_THREADS_FILE = "host_step_threads.parquet"
_PID = "16777215"  # nsys.PID_MASK


def _f64(expr: str) -> str:
    """expr as host_timeline.ints reads it: through float64."""
    return f"CAST(CAST({expr} AS REAL) AS INTEGER)"


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
    con.execute("PRAGMA cache_size = -32768")  # 32 MB of pages; SQLite's sorter spills beyond it
    con.execute("ATTACH DATABASE ? AS x", (Path(export).resolve().as_uri() + "?mode=ro",))
    return con


def _rid(con: sqlite3.Connection, table: str) -> str:
    """The name that selects the export table's real rowid (nsys_sqlite.rowid_name, on the attached export)."""
    from gpuvar.ingest.nsys_sqlite import ROWID_ALIASES

    columns = {r[1].lower() for r in con.execute(f'PRAGMA x.table_info("{table}")')}
    alias = next((a for a in ROWID_ALIASES if a not in columns), None)
    if alias is None:
        raise NotInPieces(f"{table} has no rowid that a column does not shadow")
    return alias


def _rows(con: sqlite3.Connection, sql: str, params=()):
    """The rows of a query in lists of up to FETCH_ROWS tuples."""
    cursor = con.execute(sql, params)
    while True:
        rows = cursor.fetchmany(FETCH_ROWS)
        if not rows:
            return
        yield rows


def _column(values, fill: int = MISSING) -> np.ndarray:
    return np.fromiter((fill if v is None else v for v in values), np.int64, len(values))


# --- 1. the calls ---------------------------------------------------------------------------------------------


def copy_calls(con: sqlite3.Connection, head: nsys.ExportHead) -> None:
    """The calls table: each (process, correlation id)'s first call, with its start and thread."""
    tid = _f64("globalTid")
    con.execute(
        "CREATE TABLE calls (pid INTEGER NOT NULL, corr INTEGER NOT NULL, ts INTEGER NOT NULL, tid INTEGER NOT NULL,"
        " PRIMARY KEY (pid, corr)) WITHOUT ROWID"
    )
    con.execute(
        f"INSERT OR IGNORE INTO calls SELECT coalesce(({tid} >> 24) & {_PID}, {_PID}), {_f64('correlationId')},"
        f' {_f64("start")}, coalesce({tid}, -1) FROM x."{nsys.RUNTIME_TABLE}"'
        f" WHERE start IS NOT NULL AND {_f64('correlationId')} >= 0 ORDER BY 1, 2, {_rid(con, nsys.RUNTIME_TABLE)}"
    )
    con.execute("CREATE INDEX calls_by_thread ON calls (tid, ts)")


def _launch_select(con, head: nsys.ExportHead, table: str, kind: int, extra: list[str]) -> str:
    """One table's launches (those the reader keeps) with their call: kind, rowid, GPU start, correlation id (-1
    for none), whether a call was found, call time (else GPU start), thread (-1 for none), extra columns."""
    columns = head.k_cols if table == nsys.KERNEL_TABLE else head.m_cols
    pid = f"coalesce(({_f64('t.globalPid')} >> 24) & {_PID}, -1)" if "globalPid" in columns else "-1"
    corr = f"coalesce({_f64('t.correlationId')}, -1)" if "correlationId" in columns else "-1"
    join = f"LEFT JOIN calls c ON c.pid = {pid} AND c.corr = {corr} AND {corr} >= 0"
    gs = _f64("t.start")
    return (
        f"SELECT {kind} AS kind, t.{_rid(con, table)} AS rid, {gs} AS gs, {corr} AS corr, c.ts IS NOT NULL AS hc,"
        f" coalesce(c.ts, {gs}) AS ot, coalesce(c.tid, -1) AS th{''.join(', ' + e for e in extra)}"
        f' FROM x."{table}" t {join} WHERE {kept_kernels_sql("t")}'
    )


# --- 2. step ranges and syncs --------------------------------------------------------------------------------


def _nvtx_text(head: nsys.ExportHead) -> tuple[str, str]:
    """(the NVTX text expression, the join it needs): text, else StringIds' value for textId."""
    columns = head.tables.get(nsys.NVTX_TABLE, [])
    text = "n.text" if "text" in columns else "NULL"
    if "textId" in columns and "StringIds" in head.tables:
        return f"coalesce({text}, s.value)", "LEFT JOIN x.StringIds s ON s.id = n.textId"
    return text, ""


def _has_nvtx(head: nsys.ExportHead) -> bool:
    return nsys.HOST_COLUMNS[nsys.NVTX_TABLE][1] <= set(head.tables.get(nsys.NVTX_TABLE, ()))


def step_ranges(con: sqlite3.Connection, head: nsys.ExportHead) -> pd.DataFrame | None:
    """The NVTX step ranges (start, end, number), sorted as call_sites._place sorts them, None without any."""
    if not _has_nvtx(head):
        return None
    text, join = _nvtx_text(head)
    sql = (
        f'SELECT {_f64("n.start")}, {_f64("n.end")}, {text} FROM x."{nsys.NVTX_TABLE}" n {join}'
        f" WHERE n.start IS NOT NULL AND n.end IS NOT NULL AND n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND})"
        f" AND ({text} LIKE '%step%' OR {text} LIKE '%iter%') ORDER BY n.{_rid(con, nsys.NVTX_TABLE)}"
    )
    found = []
    for rows in _rows(con, sql):
        for start, end, value in rows:
            number = _step_number(NVTX_STEP, value)
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
    end = _f64("end") if "end" in head.tables[nsys.RUNTIME_TABLE] else _f64("start")
    rows = con.execute(
        f'SELECT {_f64("start")}, {end} FROM x."{nsys.RUNTIME_TABLE}" WHERE start IS NOT NULL'
        f" AND {_f64('nameId')} IN ({', '.join(str(int(i)) for i in ids)})"
    ).fetchall()
    if not rows:
        return None
    return pd.DataFrame({"start": _column([r[0] for r in rows]), "end": _column([r[1] for r in rows])})


# --- 3. iterations of the launch pattern, in call order -----------------------------------------------------


def iterations_in_call_order(con: sqlite3.Connection, head: nsys.ExportHead) -> str | None:
    """The iterations (call_sites._iteration_steps) of each (process, device) kernel sequence in call order, into
    the scratch table iters (rowid, step, position) for the launches inside one; the note, None without any."""
    from gpuvar.ingest.call_sites import iterations_note
    from gpuvar.ingest.iterations import find_iterations_coded
    from gpuvar.ingest.nsys_plan import Names

    con.execute("CREATE TABLE iters (rowid INTEGER PRIMARY KEY, step INTEGER NOT NULL, position INTEGER NOT NULL)")
    name_col = "demangledName" if "demangledName" in head.k_cols else "shortName"
    cols = head.k_cols
    pid = f"coalesce(({_f64('t.globalPid')} >> 24) & {_PID}, -1)" if "globalPid" in cols else "-1"
    device = "coalesce(t.deviceId, -1)" if "deviceId" in cols else "-1"
    select = _launch_select(
        con, head, nsys.KERNEL_TABLE, 0, [f"{pid} AS pid", f"{device} AS dev", f"t.{name_col} AS nm"]
    )
    # launch_id is the rank by (GPU start, correlation id, row): call_sites._sequence_order's second key
    sql = f"SELECT rid, pid, dev, nm FROM ({select}) ORDER BY pid, dev, ot, gs, corr, rid"
    names = Names(head.raw.tables.get(nsys.RAW_STRINGS))
    # held per launch: its rowid (8 bytes), its name's code (2, or 4 past 65,536 names), its iteration and
    # position (4 + 4); the arrays are made at their size (no copy made when the runs are joined)
    n = con.execute(f'SELECT count(*) FROM x."{nsys.KERNEL_TABLE}" t WHERE {kept_kernels_sql("t")}').fetchone()[0]
    rowid, code = np.empty(n, np.int64), np.empty(n, np.uint16)
    bounds, last, at = [], None, 0  # (first, end) of each (process, device) sequence: contiguous in this order
    for rows in _rows(con, sql):
        rid, pids, devs, ids = zip(*rows)
        if at + len(rid) > n:
            raise NotInPieces("the kernel table changed while it was read")
        rowid[at : at + len(rid)] = rid
        values = names.code(pa.array(ids, pa.int64()))
        if len(names.names) > 1 << 16 and code.dtype == np.uint16:
            code = code.astype(np.uint32)
        code[at : at + len(rid)] = values
        for j, key in enumerate(zip(pids, devs)):
            if key != last:
                bounds.append(at + j)
                last = key
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
    for a in range(0, n, 1 << 18):  # in sequence order, the launches inside an iteration
        inside = np.flatnonzero(step[a : a + (1 << 18)] >= 0) + a
        con.executemany(
            "INSERT INTO iters VALUES (?, ?, ?)",
            zip(rowid[inside].tolist(), step[inside].tolist(), position[inside].tolist()),
        )
    return iterations_note(found, int((position < 0).sum()))


# --- 4. the sweep --------------------------------------------------------------------------------------------


class _Ops:
    """The NVTX push/pop ranges that are not step ranges, in (thread, start, longest first, rowid) order, read as
    the sweep needs them: (thread, start, end, rowid, op code) with the op named as the reader names it
    (emit_nvtx's suffix removed, shapes.NVTX_SUFFIX)."""

    def __init__(self, con: sqlite3.Connection, head: nsys.ExportHead, codes: dict):
        self.codes = codes  # op name -> code (None -> -1)
        self.shapes: dict = {}  # (op name, dims text) -> size features
        self.recorded = False  # a range recorded input shapes
        self._chunks = iter(())
        if _has_nvtx(head):
            text, join = _nvtx_text(head)
            rid = _rid(con, nsys.NVTX_TABLE)
            maybe_step = f"({text} LIKE '%step%' OR {text} LIKE '%iter%')"  # (the step regex only on these)
            maybe_step += f", {text} LIKE '%sizes%'"  # (and the shapes parser)
            self._chunks = _rows(
                con,
                f"SELECT coalesce({_f64('n.globalTid')}, -1) AS th, {_f64('n.start')} AS s, {_f64('n.end')} AS e,"
                f' n.{rid}, {text}, {maybe_step} FROM x."{nsys.NVTX_TABLE}" n {join}'
                f" WHERE n.eventType = {NVTX_PUSHPOP} AND n.start IS NOT NULL AND n.end IS NOT NULL"
                # a range around no API call on its thread is no launch's op: most emit_nvtx ranges (views,
                # allocations) are left in SQLite, through the index on the calls' (thread, time)
                f" AND EXISTS (SELECT 1 FROM calls c WHERE c.tid = coalesce({_f64('n.globalTid')}, -1)"
                f" AND c.ts BETWEEN {_f64('n.start')} AND {_f64('n.end')})"
                f" ORDER BY th, s, e DESC, n.{rid}",
            )
        self.rows: list = []
        self.at = 0
        self.load()

    def _shape(self, text) -> tuple | None:
        """The size features (shapes.SIZE_COLUMNS) of a range that records its input shapes, None otherwise."""
        from gpuvar.ingest.shapes import nvtx_op_and_dims, op_shape_features

        names, dims = nvtx_op_and_dims(np.array([text], dtype=object))
        if dims[0] is None:
            return None
        self.recorded = True
        key = (names[0], dims[0])
        if key not in self.shapes:
            features = op_shape_features(names, dims)
            self.shapes[key] = tuple(float(v[0]) for v in features.values())
        return self.shapes[key]

    def load(self) -> bool:
        """The next rows into self.rows (from self.at = 0); False at the end."""
        from gpuvar.ingest.shapes import NVTX_SUFFIX

        codes, strip = self.codes, NVTX_SUFFIX.sub
        for rows in self._chunks:
            kept = []
            for thread, start, end, rowid, text, maybe_step, maybe_sizes in rows:
                if maybe_step and _step_number(NVTX_STEP, text) is not None:
                    continue  # a step range: not an op
                if isinstance(text, str):
                    name = strip("", text)
                    code = codes.get(name)
                    if code is None:
                        code = codes[name] = len(codes) - 1
                else:
                    code = -1
                kept.append((thread, start, end, rowid, code, self._shape(text) if maybe_sizes else None))
            if kept:
                self.rows, self.at = kept, 0
                return True
        self.rows, self.at = [], 0
        return False


@dataclass
class _Sweep:
    mode: str  # 'nvtx', 'sync' or 'iterations'
    steps: pd.DataFrame | None
    sync_starts: np.ndarray | None
    sync_ends: np.ndarray | None
    codes: dict = field(default_factory=lambda: {None: -1})
    threads: dict = field(default_factory=dict)  # tid -> code
    first_launch: dict = field(default_factory=dict)  # thread code -> (call time, tid) of its first launch by op
    op_threads: dict = field(default_factory=dict)  # op code -> thread codes launching by it
    instances: dict = field(default_factory=dict)  # op rowid -> [launches numbered, occurrence]
    occurrences: StepCounters | None = None  # step -> {(thread, op code): instances numbered}
    positions: StepCounters | None = None  # step -> {thread: launches without op numbered}
    step_threads: StepTotals = field(default_factory=StepTotals)
    shape_columns: set = field(default_factory=set)  # shapes.SIZE_COLUMNS with a value for some launch
    steps_seen: StepTotals = field(default_factory=StepTotals)  # (its `seen`)
    kernels: int = 0


def _steps_of(sweep: _Sweep, hc: np.ndarray, ot: np.ndarray, gs: np.ndarray, it_step: np.ndarray) -> np.ndarray:
    """The step of each launch (MISSING for none): call_sites._place (NVTX ranges), _sync_steps (segments between
    cudaDeviceSynchronize calls, numbered from 0 once the lowest is known) or the iterations found."""
    n = len(hc)
    if sweep.mode == "nvtx":
        steps = sweep.steps
        starts, ends, numbers = (steps[c].to_numpy(np.int64) for c in ("start", "end", "number"))
        ts = np.where(hc, ot, 0)
        at = np.searchsorted(starts, ts, side="right") - 1
        ok = hc & (at >= 0)
        ok &= ends[np.maximum(at, 0)] >= ts
        step = np.full(n, MISSING, np.int64)
        step[ok] = numbers[at[ok]]
        return step
    if sweep.mode == "sync":
        by_call = np.searchsorted(sweep.sync_starts, ot, side="left")
        by_gpu = np.searchsorted(sweep.sync_ends, gs, side="left")
        return np.where(hc, by_call, by_gpu).astype(np.int64)
    return it_step


def sweep_launches(con, head: nsys.ExportHead, mode: str, steps, sync_frame) -> tuple[_Sweep, list]:
    """Pass 4: every kept kernel's and copy's op, step and numbering into the scratch tables kfacts and mfacts;
    returns the sweep's state and the op names by code."""
    from gpuvar.ingest.nsys_plan import LAUNCH_COLUMNS, launch_threads_of

    sweep = _Sweep(mode, steps, None, None)
    sweep.occurrences = StepCounters(con, "occurrence_spill", KEEP_STEPS)
    sweep.positions = StepCounters(con, "position_spill", KEEP_STEPS)
    if mode == "sync":
        sweep.sync_starts = np.sort(sync_frame["start"].to_numpy(np.int64))
        sweep.sync_ends = np.sort(sync_frame["end"].to_numpy(np.int64))
    launch = [c for c in LAUNCH_COLUMNS if c in head.k_cols]
    it = mode == "iterations"
    k_extra = [f"t.{c} AS {c}" for c in launch] + (["i.step AS its", "i.position AS itp"] if it else [])
    kernels = _launch_select(con, head, nsys.KERNEL_TABLE, 0, k_extra)
    if it:
        kernels = kernels.replace(
            " WHERE ", f" LEFT JOIN iters i ON i.rowid = t.{_rid(con, nsys.KERNEL_TABLE)} WHERE ", 1
        )
    parts = [kernels]
    if head.m_cols is not None:
        parts.append(
            _launch_select(
                con, head, nsys.MEMCPY_TABLE, 1, [f"NULL AS {c}" for c in launch + (["its", "itp"] if it else [])]
            )
        )
    sql = " UNION ALL ".join(parts) + " ORDER BY th, ot, corr, kind, rid"
    con.execute(
        "CREATE TABLE kfacts (rowid INTEGER PRIMARY KEY, op INTEGER, has_op INTEGER, step INTEGER,"
        " occurrence INTEGER, idx INTEGER, thread INTEGER)"
    )
    con.execute("CREATE TABLE mfacts (rowid INTEGER PRIMARY KEY, op INTEGER, step INTEGER)")
    con.execute(f"CREATE TABLE kshapes (rowid INTEGER PRIMARY KEY, {', '.join(f'{c} REAL' for c in SIZE_COLUMNS)})")
    ops = _Ops(con, head, sweep.codes)
    stack: list = []
    current = None
    instances, occurrences, positions = sweep.instances, sweep.occurrences, sweep.positions
    for rows in _rows(con, sql):
        cols = list(zip(*rows))
        kind = np.array(cols[0], np.int64)
        rid, gs, corr = (np.array(c, np.int64) for c in cols[1:4])
        hc = np.array(cols[4], bool)
        ot, th = np.array(cols[5], np.int64), np.array(cols[6], np.int64)
        it_step = _column(cols[7 + len(launch)]) if it else None
        it_pos = _column(cols[8 + len(launch)]) if it else None
        step = _steps_of(sweep, hc, ot, gs, it_step)
        sweep.steps_seen.see(step[step != MISSING])
        is_kernel = kind == 0
        if launch and is_kernel.any():
            frame = pd.DataFrame({name: pd.array(cols[7 + j], dtype="Int64") for j, name in enumerate(launch)})
            threads = launch_threads_of(frame)
            ok = is_kernel & (step != MISSING) & np.isfinite(threads)
            sweep.step_threads.add(step[ok], threads[ok])
        n = len(rows)
        op_row, op_code, thread_code, shape = [-1] * n, [-1] * n, [-1] * n, [None] * n
        occurrence, index = [MISSING] * n, [MISSING] * n
        for i, (has_call, t, thread, s, copy) in enumerate(
            zip(cols[4], ot.tolist(), th.tolist(), step.tolist(), cols[0])
        ):
            if thread != current:  # a thread's ranges and op instances are its own
                current, stack = thread, []
                instances.clear()
                while (ops.at < len(ops.rows) or ops.load()) and ops.rows[ops.at][0] < thread:
                    ops.at += 1
            if not has_call:
                top = None
            else:
                code = sweep.threads.setdefault(thread, len(sweep.threads)) if thread != -1 else -1
                thread_code[i] = code
                while stack and stack[-1][2] < t:  # ended ranges leave first: the stack holds open ones only
                    stack.pop()
                while (ops.at < len(ops.rows) or ops.load()) and (op := ops.rows[ops.at])[0] == thread and op[1] <= t:
                    ops.at += 1
                    if op[2] >= t:  # (one that ended already can be no later launch's op)
                        stack.append(op)
                top = stack[-1] if stack else None
            if top is not None:
                op_row[i], op_code[i] = top[3], top[4]
                if not copy:
                    shape[i] = top[5]
            if copy or s == MISSING:
                continue
            if top is not None:  # numbered by op: the instance's launches, the op's instances in the step
                instance = instances.get(top[3])
                if instance is None:
                    counts, key = occurrences.of(s), (code, top[4])
                    number = counts.get(key, 0)
                    counts[key] = number + 1
                    instance = instances[top[3]] = [0, number, top[2]]
                    sweep.op_threads.setdefault(top[4], set()).add(code)
                    sweep.first_launch.setdefault(code, (t, thread))
                index[i], occurrence[i] = instance[0], instance[1]
                instance[0] += 1
            elif mode != "iterations":  # the position among the step's launches without op on this thread
                counts = positions.of(s)
                index[i] = counts.get(thread_code[i], 0)
                counts[thread_code[i]] = index[i] + 1
        op_row, op_code, thread_code = (np.array(v, np.int64) for v in (op_row, op_code, thread_code))
        occurrence, index = np.array(occurrence, np.int64), np.array(index, np.int64)
        if it:
            index = np.where((occurrence == MISSING) & is_kernel, np.where(it_pos >= 0, it_pos, MISSING), index)
        if n and len(instances) >= FETCH_ROWS:
            _prune(instances, stack, int(ot[-1]))
        k = np.flatnonzero(is_kernel)
        sweep.kernels += len(k)
        con.executemany(
            "INSERT INTO kfacts VALUES (?, ?, ?, ?, ?, ?, ?)",
            zip(
                rid[k].tolist(),
                op_code[k].tolist(),
                (op_row[k] >= 0).tolist(),
                step[k].tolist(),
                occurrence[k].tolist(),
                index[k].tolist(),
                thread_code[k].tolist(),
            ),
        )
        with_shape = [(r, *f) for r, f in zip(rid.tolist(), shape) if f is not None]
        if with_shape:
            con.executemany(f"INSERT INTO kshapes VALUES (?{', ?' * len(SIZE_COLUMNS)})", with_shape)
            for j, name in enumerate(SIZE_COLUMNS):
                if name not in sweep.shape_columns and any(math.isfinite(f[1 + j]) for f in with_shape):
                    sweep.shape_columns.add(name)
        m = np.flatnonzero(~is_kernel)
        if len(m):
            con.executemany(
                "INSERT INTO mfacts VALUES (?, ?, ?)", zip(rid[m].tolist(), op_code[m].tolist(), step[m].tolist())
            )
    names = [None] * (len(sweep.codes) - 1)
    for name, code in sweep.codes.items():
        if code >= 0:
            names[code] = name
    return sweep, names


def _prune(instances: dict, stack: list, now: int) -> None:
    """Forget the op instances that ended before `now` and are not open: no later launch can be theirs."""
    open_ = {op[3] for op in stack}
    for key in [k for k, v in instances.items() if v[2] < now and k not in open_]:
        del instances[key]


# --- the entry points -----------------------------------------------------------------------------------------


def has_launch_calls(head: nsys.ExportHead) -> bool:
    """Whether the in-memory path places this export's launches by their calls (host_timeline._nsys_host)."""
    return nsys.HOST_COLUMNS[nsys.RUNTIME_TABLE][1] <= set(head.tables.get(nsys.RUNTIME_TABLE, ()))


class Scratch:
    """The scratch database of one ingest and the facts in it (pass 3 reads them piece by piece)."""

    def __init__(self, export: Path, folder: Path):
        self.con = open_scratch(export, folder)
        self.facts: HostFacts | None = None

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
        where = "rowid >= ?" + (" AND rowid < ?" if hi is not None else "")
        rows = self.con.execute(
            f"SELECT rowid, op, has_op, step, occurrence, idx, thread FROM kfacts WHERE {where} ORDER BY rowid",
            (lo,) if hi is None else (lo, hi),
        ).fetchall()
        names = ("rowid", "op", "has_op", "step", "occurrence", "index", "thread")
        return {name: np.array([r[j] for r in rows], np.int64) for j, name in enumerate(names)}

    def kernel_shapes(self, rowids: np.ndarray) -> dict[str, np.ndarray]:
        """The launching op's size features of these kernels (rowids in order), NaN where none; {} where no range
        recorded shapes."""
        columns = self.facts.shape_columns
        if not columns:
            return {}
        values = {c: np.full(len(rowids), np.nan) for c in columns}
        if len(rowids):
            rows = self.con.execute(
                f"SELECT rowid, {', '.join(columns)} FROM kshapes WHERE rowid >= ? AND rowid <= ? ORDER BY rowid",
                (int(rowids[0]), int(rowids[-1])),
            ).fetchall()
            if rows:
                have = np.array([r[0] for r in rows], np.int64)
                at = np.searchsorted(rowids, have)
                for j, c in enumerate(columns):
                    values[c][at] = np.array([np.nan if r[1 + j] is None else r[1 + j] for r in rows], np.float64)
        return values

    def copy_facts(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(op code, step) of the copies with these rowids (rowids of one range, in order)."""
        if not len(rowids):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rows = self.con.execute(
            "SELECT rowid, op, step FROM mfacts WHERE rowid >= ? AND rowid <= ? ORDER BY rowid",
            (int(rowids.min()), int(rowids.max())),
        ).fetchall()
        have = np.array([r[0] for r in rows], np.int64)
        at = np.minimum(np.searchsorted(have, rowids), max(len(have) - 1, 0))
        op, step = np.full(len(rowids), -1, np.int64), np.full(len(rowids), MISSING, np.int64)
        if len(have):
            found = have[at] == rowids
            op[found] = np.array([r[1] for r in rows], np.int64)[at[found]]
            step[found] = np.array([r[2] for r in rows], np.int64)[at[found]]
        return op, step


def host_facts(scratch: Scratch, head: nsys.ExportHead, plan: Plan | None) -> HostFacts:
    """Passes 1-4 (module docstring) into the scratch database; NotInPieces where the export is left to memory.
    plan None: the kernels kept are counted by the one who reads the facts (ParquetFacts)."""
    con = scratch.con
    copy_calls(con, head)
    steps = step_ranges(con, head)
    sync_frame = syncs(con, head)
    mode = "nvtx" if steps is not None else "sync" if sync_frame is not None else "iterations"
    note = iterations_in_call_order(con, head) if mode == "iterations" else None
    sweep, names = sweep_launches(con, head, mode, steps, sync_frame)
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
    steps_with, sums, counts = sweep.step_threads.totals()
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


# --- the workflow's two steps: facts found by `gpuvar read`, read back by `gpuvar normalize` -------------------


def facts_to_json(facts: HostFacts) -> dict:
    return {
        "op_names": facts.op_names,
        "ordinal": [[code, number] for code, number in sorted(facts.ordinal.items())],
        "multi": sorted(facts.multi),
        "how": facts.how,
        "prefix": facts.prefix,
        "step_base": facts.step_base,
        "shape_columns": list(facts.shape_columns),
    }


def facts_from_json(entry: dict) -> HostFacts:
    return HostFacts(
        op_names=list(entry["op_names"]),
        ordinal={int(code): int(number) for code, number in entry["ordinal"]},
        multi={int(code) for code in entry["multi"]},
        how=entry["how"],
        prefix=entry["prefix"],
        step_base=int(entry["step_base"]),
        shape_columns=tuple(entry["shape_columns"]),
    )


def export_facts(scratch: Scratch, head: nsys.ExportHead, folder: Path) -> dict:
    """The kernels' and copies' facts into Parquet files of `folder` in rowid order (the order of the raw tables
    `gpuvar read` writes), each with the launch's GPU start (to check the alignment); raw.json's host_facts entry."""
    import pyarrow.parquet as pq

    shapes = scratch.facts.shape_columns
    kernel_cols = ["rowid", "start", "op", "has_op", "step", "occurrence", "idx", "thread", *shapes]
    queries = {
        KERNEL_FACTS_FILE: (
            kernel_cols,
            f"SELECT f.rowid, t.start, f.op, f.has_op, f.step, f.occurrence, f.idx, f.thread"
            f'{"".join(", s." + c for c in shapes)} FROM kfacts f JOIN x."{nsys.KERNEL_TABLE}" t ON t.rowid = f.rowid'
            f"{' LEFT JOIN kshapes s ON s.rowid = f.rowid' if shapes else ''} ORDER BY f.rowid",
        ),
        COPY_FACTS_FILE: (
            ["rowid", "start", "op", "step"],
            f'SELECT f.rowid, t.start, f.op, f.step FROM mfacts f JOIN x."{nsys.MEMCPY_TABLE}" t'
            f" ON t.{_rid(scratch.con, nsys.MEMCPY_TABLE)} = f.rowid"
            " ORDER BY f.rowid",
        ),
    }
    steps, sums, counts = scratch.facts.step_threads
    pq.write_table(
        pa.table({"step": pa.array(steps, pa.int64()), "threads": sums, "launches": counts}),
        folder / STEP_THREADS_FILE,
        compression="zstd",
    )
    for name, (columns, sql) in queries.items():
        if name == COPY_FACTS_FILE and head.m_cols is None:
            continue
        types = [pa.float64() if c in shapes else pa.int64() for c in columns]
        schema = pa.schema(list(zip(columns, types)))
        with pq.ParquetWriter(folder / name, schema, compression="zstd") as writer:
            for rows in _rows(scratch.con, sql):
                values = list(zip(*rows))
                writer.write_table(pa.table([pa.array(v, t) for v, t in zip(values, types)], schema=schema))
    files = {"kernels": KERNEL_FACTS_FILE, "copies": COPY_FACTS_FILE, "step_threads": STEP_THREADS_FILE}
    return files | {"summary": facts_to_json(scratch.facts)}


class ParquetFacts:
    """The facts `gpuvar read` stored beside the raw tables, read in order as `gpuvar normalize` takes the pieces
    (the facts cover the kept rows in rowid order, the raw tables' order)."""

    def __init__(self, folder: Path, entry: dict):
        import pyarrow.parquet as pq

        self.facts = facts_from_json(entry["summary"])
        totals = pq.read_table(Path(folder) / entry["step_threads"])
        threads = totals.column("threads").to_numpy().astype(np.float64)
        self.facts.step_threads = (exact_ints(totals.column("step")), threads, exact_ints(totals.column("launches")))
        kernels = pq.ParquetFile(Path(folder) / entry["kernels"])
        self.kernel_rows = kernels.metadata.num_rows
        self._kernels = _Sequential(kernels)
        copies = Path(folder) / entry["copies"]
        self._copies = _Sequential(pq.ParquetFile(copies)) if copies.exists() else None

    def close(self) -> None:
        pass

    def check(self, plan: Plan) -> None:
        """NotInPieces where the stored facts do not cover the kernels the plan keeps, one for one."""
        kept = sum(p.kept for p in plan.pieces)
        if self.kernel_rows != kept:
            raise NotInPieces(f"`gpuvar read` stored facts of {self.kernel_rows} kernels where the plan keeps {kept}")

    def piece_facts(self, piece, rowids: np.ndarray, starts: np.ndarray) -> tuple[dict, dict]:
        part = self._kernels.take(len(rowids))
        if not np.array_equal(part["start"], starts):
            raise RuntimeError(f"the stored launch facts do not line up with the {len(rowids)} kernels of a piece")
        names = {"op": "op", "has_op": "has_op", "step": "step", "occurrence": "occurrence", "idx": "index"}
        facts = {target: part[source] for source, target in names.items()} | {"thread": part["thread"]}
        return facts, {c: part[c] for c in self.facts.shape_columns}

    def attach(self, chunk: pa.Table) -> pa.Table:
        start, end = chunk.column("start"), chunk.column("end")
        valid = ~(np.asarray(start.is_null()) | np.asarray(end.is_null()))
        kept = kept_rows(exact_ints(start, 0), exact_ints(end, 0), valid)
        part = self._copies.take(int(kept.sum()))
        if not np.array_equal(part["start"], exact_ints(start, 0)[kept]):
            raise RuntimeError("the stored copy facts do not line up with the copies")
        op, step = np.full(len(kept), -1, np.int64), np.full(len(kept), MISSING, np.int64)
        op[kept], step[kept] = part["op"], part["step"]
        return chunk.append_column(COPY_FACTS[0], pa.array(op)).append_column(COPY_FACTS[1], pa.array(step))


class _Sequential:
    """A Parquet file's rows taken in order, n at a time, as numpy columns (nulls: MISSING for integers, NaN)."""

    def __init__(self, file):
        self._batches = file.iter_batches(batch_size=FETCH_ROWS)
        self._buffer: pa.Table = file.schema_arrow.empty_table()

    def take(self, n: int) -> dict[str, np.ndarray]:
        parts, have = [self._buffer.slice(0, 0)], 0
        while have < n:
            if not self._buffer.num_rows:
                batch = next(self._batches, None)
                if batch is None:
                    raise RuntimeError(f"the stored launch facts end {n - have} rows early")
                self._buffer = pa.Table.from_batches([batch])
            part = self._buffer.slice(0, n - have)
            self._buffer = self._buffer.slice(part.num_rows)
            parts.append(part)
            have += part.num_rows
        table = pa.concat_tables(parts)
        out = {}
        for name in table.column_names:
            column = table.column(name)
            if pa.types.is_floating(column.type):
                out[name] = column.to_numpy().astype(np.float64)
            else:
                out[name] = exact_ints(column, MISSING)
        return out
