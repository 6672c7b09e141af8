"""The launch sweep of gpuvar.ingest.nsys_host_facts (pass 4): every kept kernel and copy of an export with CUDA
API calls placed and numbered in call order.

Why apart: the passes before it only read and sort (nsys_host_facts); this is the one stateful walk, over the
launches with their calls in (thread, call time, correlation id, rowid) order beside the NVTX push/pop ranges in
(thread, start, longest first, rowid) order, with a stack of open ranges per thread, the open op instances and the
per-step counters of gpuvar.ingest.step_store. What it finds goes to the scratch tables kfacts, mfacts and kshapes.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar.ingest import nsys
from gpuvar.ingest.host_timeline import MISSING, NVTX_PUSHPOP, NVTX_STEP, step_number
from gpuvar.ingest.nsys_host_facts import (
    FETCH_ROWS,
    _column,
    _f64,
    _has_nvtx,
    _launch_select,
    _nvtx_text,
    _rid,
    _rows,
)
from gpuvar.ingest.shapes import SIZE_COLUMNS
from gpuvar.ingest.step_store import StepCounters, StepTotals

KEEP_STEPS = 4096  # steps whose counters stay in memory (step_store.StepCounters)
TEXTS_KEPT = 1 << 16  # distinct range texts whose meaning _Ops.load keeps (then it starts again)

# --- the sweep --------------------------------------------------------------------------------------------


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
        self._by_text: dict = {}  # range text -> (op code, size features), () for a step range
        self.done = False  # every range read
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
        """The next rows into self.rows (from self.at = 0); False at the end. What a range's text makes of it
        (a step range, or its op code and size features) is worked out once per distinct text: emit_nvtx repeats
        a few hundred texts over millions of ranges."""
        from gpuvar.ingest.shapes import NVTX_SUFFIX

        codes, strip, by_text = self.codes, NVTX_SUFFIX.sub, self._by_text
        for rows in self._chunks:
            kept = []
            append = kept.append
            for thread, start, end, rowid, text, maybe_step, maybe_sizes in rows:
                known = by_text.get(text)
                if known is None:
                    if len(by_text) >= TEXTS_KEPT:
                        by_text.clear()
                    if maybe_step and step_number(NVTX_STEP, text) is not None:
                        known = by_text[text] = ()  # a step range: not an op
                    else:
                        if isinstance(text, str):
                            name = strip("", text)
                            code = codes.get(name)
                            if code is None:
                                code = codes[name] = len(codes) - 1
                        else:
                            code = -1
                        known = by_text[text] = (code, self._shape(text) if maybe_sizes else None)
                if known:
                    append((thread, start, end, rowid, *known))
            if kept:
                self.rows, self.at = kept, 0
                return True
        self.rows, self.at, self.done = [], 0, True
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
    walk = _Walk(sweep, ops, it)
    for rows in _rows(con, sql):
        cols = list(zip(*rows))
        kind = np.array(cols[0], np.int64)
        rid, gs = np.array(cols[1], np.int64), np.array(cols[2], np.int64)
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
        batch = walk.batch(th, hc, ot, step, is_kernel)
        op_row, op_code, thread_code = np.array(batch.op_row, np.int64), np.array(batch.op_code, np.int64), batch.thread
        occurrence, index = np.array(batch.occurrence, np.int64), np.array(batch.index, np.int64)
        if it:
            index = np.where((occurrence == MISSING) & is_kernel, np.where(it_pos >= 0, it_pos, MISSING), index)
        if len(rows) and len(walk.instances) >= FETCH_ROWS:
            _prune(walk.instances, walk.stack, int(ot[-1]))
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
        if ops.recorded:
            tops, rids = batch.tops, rid.tolist()
            with_shape = [(rids[i], *tops[i][5]) for i in k.tolist() if tops[i] is not None and tops[i][5] is not None]
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


@dataclass
class _Batch:
    """What the walk found for one batch of launches, per row (lists: filled one row at a time)."""

    tops: list  # the launching op's range row of _Ops.rows, None for none
    op_row: list  # its rowid, -1 for none
    op_code: list  # its op code, -1 for none
    thread: np.ndarray  # the launching thread's code, -1 without a call
    occurrence: list  # the op instance's number among its (step, thread, op)'s, MISSING for none
    index: list  # the launch's number in its op instance, or among its (step, thread)'s launches without op


class _Walk:
    """The stateful part of the sweep: per thread (the launches come thread after thread, in call order), the
    stack of open op ranges, the op instances and the per-step counters.

    Why in two loops per thread and batch: the innermost open range around a call needs the calls in order, but
    nothing else does; the numbering then runs over the kernels with a step only. Both keep what they touch in
    local variables: they are the only Python that runs per launch. The counters are keyed by the thread's code,
    so a thread's counters are never asked for again once the sweep has left it (step_store.StepCounters.reset)."""

    def __init__(self, sweep: _Sweep, ops: _Ops, iterations: bool):
        self.sweep, self.ops, self.iterations = sweep, ops, iterations
        self.instances = sweep.instances  # op rowid -> [launches numbered, occurrence, end]
        self.stack: list = []
        self.current = None

    def batch(self, th: np.ndarray, hc: np.ndarray, ot: np.ndarray, step: np.ndarray, is_kernel: np.ndarray):
        n = len(th)
        out = _Batch([None] * n, [-1] * n, [-1] * n, np.full(n, -1, np.int64), [MISSING] * n, [MISSING] * n)
        cuts = [0, *(np.flatnonzero(th[1:] != th[:-1]) + 1).tolist(), n]
        ot_l, step_l = ot.tolist(), step.tolist()
        numbered = is_kernel & (step != MISSING)
        for a, b in zip(cuts[:-1], cuts[1:]):
            thread = int(th[a])
            if thread != self.current:  # a thread's ranges, op instances and counters are its own
                self._switch(thread)
            calls = (np.flatnonzero(hc[a:b]) + a).tolist()
            code = -1
            if calls and thread != -1:
                code = self.sweep.threads.setdefault(thread, len(self.sweep.threads))
            if calls:
                out.thread[calls] = code
                self._innermost(thread, calls, ot_l, out)
            self._number(thread, code, (np.flatnonzero(numbered[a:b]) + a).tolist(), ot_l, step_l, out)
        return out

    def _switch(self, thread: int) -> None:
        sweep, ops = self.sweep, self.ops
        self.current, self.stack = thread, []
        self.instances.clear()
        sweep.occurrences.reset()
        sweep.positions.reset()
        while (ops.at < len(ops.rows) or ops.load()) and ops.rows[ops.at][0] < thread:
            ops.at += 1

    def _innermost(self, thread: int, calls: list, ot_l: list, out: _Batch) -> None:
        """Each call's innermost open op range on its thread: the ranges that started by the call's time join
        the stack (those that ended already cannot be this or any later call's op), the ended ones leave it."""
        ops, stack = self.ops, self.stack
        push, pop = stack.append, stack.pop
        rows, at = ops.rows, ops.at
        end = len(rows)
        tops, op_row, op_code = out.tops, out.op_row, out.op_code
        for i in calls:
            t = ot_l[i]
            while stack and stack[-1][2] < t:
                pop()
            while True:
                if at >= end:
                    ops.at = at
                    if ops.done or not ops.load():
                        rows, at, end = ops.rows, 0, 0
                        break
                    rows, at, end = ops.rows, 0, len(ops.rows)
                op = rows[at]
                if op[0] != thread or op[1] > t:
                    break
                at += 1
                if op[2] >= t:
                    push(op)
            if stack:
                top = tops[i] = stack[-1]
                op_row[i], op_code[i] = top[3], top[4]
        ops.at = at

    def _number(self, thread: int, code: int, rows: list, ot_l: list, step_l: list, out: _Batch) -> None:
        """The kernels with a step (in call order): by op, the instance's launches and the op's instances in the
        step; without op, the position among the step's launches without op on this thread."""
        sweep, instances, iterations = self.sweep, self.instances, self.iterations
        occurrences, positions = sweep.occurrences, sweep.positions
        tops, occurrence, index = out.tops, out.occurrence, out.index
        last, counts = None, None
        for i in rows:
            top = tops[i]
            if top is not None:
                instance = instances.get(top[3])
                if instance is None:
                    s = step_l[i]
                    per_op, key = occurrences.of(s), (code, top[4])
                    number = per_op.get(key, 0)
                    per_op[key] = number + 1
                    instance = instances[top[3]] = [0, number, top[2]]
                    sweep.op_threads.setdefault(top[4], set()).add(code)
                    sweep.first_launch.setdefault(code, (ot_l[i], thread))
                index[i], occurrence[i] = instance[0], instance[1]
                instance[0] += 1
            elif not iterations:
                s = step_l[i]
                if s != last:  # (the same step's counters as the launch before: no look-up)
                    last, counts = s, positions.of(s)
                number = counts.get(code, 0)
                index[i] = number
                counts[code] = number + 1


def _prune(instances: dict, stack: list, now: int) -> None:
    """Forget the op instances that ended before `now` and are not open: no later launch can be theirs."""
    open_ = {op[3] for op in stack}
    for key in [k for k, v in instances.items() if v[2] < now and k not in open_]:
        del instances[key]
