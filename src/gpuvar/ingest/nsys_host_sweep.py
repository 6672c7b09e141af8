"""The launch sweep of gpuvar.ingest.nsys_host_facts (pass 4): every kept kernel and copy of an export with CUDA
API calls placed and numbered in call order.

Why apart: the passes before it only read and sort (nsys_host_facts); this is the one stateful walk, over the
launches with their calls in (thread, call time, correlation id, rowid) order beside the NVTX push/pop ranges in
(thread, start, longest first, rowid) order, with the ranges still open per thread, the open op instances and the
per-step counters of gpuvar.ingest.step_store. What it finds goes to the fact files of the scratch folder
(gpuvar.ingest.nsys_fact_files): the kernels', the copies' and the kernels' size features.
"""

from __future__ import annotations

import gc
import re
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuvar import progress
from gpuvar.ingest import nsys
from gpuvar.ingest import nsys_host_sql as host_sql
from gpuvar.ingest.host_timeline import MISSING, NVTX_PUSHPOP, NVTX_STEP, step_number
from gpuvar.ingest.shapes import NVTX_SUFFIX, SIZE_COLUMNS
from gpuvar.ingest.step_store import StepCounters, StepTotals

KEEP_STEPS = 4096  # steps whose counters stay in memory (step_store.StepCounters)
_SUFFIX_AT = re.compile(NVTX_SUFFIX.pattern.removesuffix(".*$"))  # where shapes.NVTX_SUFFIX matches, without its tail

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
        if host_sql.has_nvtx_ranges(head):
            text, join = host_sql.nvtx_text_sql(head)
            rid = host_sql.export_rowid(con, nsys.NVTX_TABLE)
            maybe_step = f"({text} LIKE '%step%' OR {text} LIKE '%iter%')"  # (the step regex only on these)
            maybe_step += f", {text} LIKE '%sizes%'"  # (and the shapes parser)
            tid, start, end = (host_sql.through_float64(f"n.{c}") for c in ("globalTid", "start", "end"))
            self._chunks = host_sql.fetch_batches(
                con,
                f"SELECT coalesce({tid}, -1) AS th, {start} AS s, {end} AS e,"
                f' n.{rid}, {text}, {maybe_step} FROM x."{nsys.NVTX_TABLE}" n {join}'
                f" WHERE n.eventType = {NVTX_PUSHPOP} AND n.start IS NOT NULL AND n.end IS NOT NULL"
                # a range around no API call on its thread is no launch's op: most emit_nvtx ranges (views,
                # allocations) are left in SQLite, through the index on the calls' (thread, time)
                f" AND EXISTS (SELECT 1 FROM calls c WHERE c.tid = coalesce({tid}, -1)"
                f" AND c.ts BETWEEN {start} AND {end})"
                f" ORDER BY th, s, e DESC, n.{rid}",
            )
        self.done = False  # every range read
        self._set([])
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
        """The next chunk of ranges into the arrays (from self.at = 0); False at the end."""
        codes, strip, suffix_at = self.codes, NVTX_SUFFIX.sub, _SUFFIX_AT.match
        for rows in self._chunks:
            kept = []
            append = kept.append
            for thread, start, end, rowid, text, maybe_step, maybe_sizes in rows:
                if maybe_step and step_number(NVTX_STEP, text) is not None:
                    continue  # a step range: not an op
                if isinstance(text, str):
                    # NVTX_SUFFIX's leftmost match starts at a comma: where the first one starts the suffix
                    # (emit_nvtx's ', seq = ...'), the name is what comes before it, without the regex's scan
                    comma = text.find(",")
                    name = text if comma < 0 else text[:comma] if suffix_at(text, comma) else strip("", text)
                    code = codes.get(name)
                    if code is None:
                        code = codes[name] = len(codes) - 1
                else:
                    code = -1
                append((thread, start, end, rowid, code, self._shape(text) if maybe_sizes else None))
            if kept:
                self._set(kept)
                return True
        self._set([])
        self.done = True
        return False

    def _set(self, kept: list) -> None:
        """The chunk's thread, start, end, rowid, op code and size features as arrays (the walk slices them)."""
        self.at = 0
        columns = list(zip(*kept)) if kept else [()] * 5
        self.thread, self.start, self.end, self.rowid, self.code = (np.array(columns[j], np.int64) for j in range(5))
        self.shape = np.fromiter(columns[5], object, len(kept)) if kept else np.zeros(0, object)

    def upto(self, thread: int, time: int) -> int:
        """The end of the rows from `at` on of this thread that start by `time` (the chunk is in (thread, start)
        order, and the rows before `at` are of earlier threads or already taken)."""
        hi = int(np.searchsorted(self.thread, thread, side="right"))
        if hi <= self.at:
            return self.at
        return self.at + int(np.searchsorted(self.start[self.at : hi], time, side="right"))


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
    shape_columns: set = field(default_factory=set)  # shapes.SIZE_COLUMNS with a value for some launch
    steps_seen: StepTotals = field(default_factory=StepTotals)  # (its `seen`)
    kernels: int = 0


@contextmanager
def _no_cycle_collection():
    """CPython's cycle collector off for the block. Why: the sweep makes tens of millions of short-lived rows and
    tuples, none in a reference cycle, and each full collection walks every live container (11 of them at 2 M
    launches, ~1 s of 25); the collector is put back as it was, even when the sweep fails."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


def sweep_launches(con, head: nsys.ExportHead, mode: str, steps, sync_frame, store) -> tuple[_Sweep, list]:
    """Pass 4: every kept kernel's and copy's op, step and numbering into the fact files of `store`
    (nsys_host_facts.Scratch: kernels, copies, shapes); returns the sweep's state and the op names by code."""
    sweep = _Sweep(mode, steps, None, None)
    sweep.occurrences = StepCounters(con, "occurrence_spill", KEEP_STEPS)
    sweep.positions = StepCounters(con, "position_spill", KEEP_STEPS)
    if mode == "sync":
        sweep.sync_starts = np.sort(sync_frame["start"].to_numpy(np.int64))
        sweep.sync_ends = np.sort(sync_frame["end"].to_numpy(np.int64))
    it = mode == "iterations"
    parts = [host_sql.launches_with_calls_sql(con, head, nsys.KERNEL_TABLE, 0, [])]
    if head.m_cols is not None:
        parts.append(host_sql.launches_with_calls_sql(con, head, nsys.MEMCPY_TABLE, 1, []))
    # only what the sweep reads leaves SQLite (every value is a Python object to build): the kind and whether a
    # call was found in one number, the GPU start only where cudaDeviceSynchronize segments need it
    sync = mode == "sync"
    extra = ["gs"] * sync
    sql = (
        f"SELECT kind + 2 * hc, rid, ot, th{''.join(', ' + c for c in extra)}"
        f" FROM ({' UNION ALL '.join(parts)}) ORDER BY th, ot, corr, kind, rid"
    )
    ops = _Ops(con, head, sweep.codes)
    walk = _Walk(sweep, ops, it)
    meter = progress.start("placing the launches by their API calls", None, "launches")
    with _no_cycle_collection():
        for rows in host_sql.fetch_batches(con, sql):
            progress.at(meter, meter.done + len(rows))
            cols = np.array(rows, np.int64).T  # (a column of a 2-d conversion: five times faster than one by one)
            kh = cols[0]
            is_kernel, hc = (kh & 1) == 0, kh >= 2
            rid, ot, th = (np.ascontiguousarray(c) for c in cols[1:4])
            gs = cols[4] if sync else None
            it_step, it_pos = _iteration_facts(store, rid, is_kernel) if it else (None, None)
            step = _steps_of(sweep, hc, ot, gs, it_step)
            sweep.steps_seen.see(step[step != MISSING])
            batch = walk.batch(th, hc, ot, step, is_kernel)
            op_row, op_code, occurrence, index = batch.op_row, batch.op_code, batch.occurrence, batch.index
            if it:
                index = np.where((occurrence == MISSING) & is_kernel, np.where(it_pos >= 0, it_pos, MISSING), index)
            k = np.flatnonzero(is_kernel)
            sweep.kernels += len(k)
            kernel_facts = np.empty(len(k), store.kernels.dtype)
            for name, values in (
                ("rowid", rid),
                ("op", op_code),
                ("has_op", op_row >= 0),
                ("step", step),
                ("occurrence", occurrence),
                ("index", index),
                ("thread", batch.thread),
            ):
                kernel_facts[name] = values[k]
            store.kernels.add(kernel_facts)
            if ops.recorded:
                shapes = batch.shapes
                with_shape = [i for i in k.tolist() if shapes[i] is not None]
                if with_shape:
                    shaped = np.empty(len(with_shape), store.shapes.dtype)
                    shaped["rowid"] = rid[with_shape]
                    values = np.array([shapes[i] for i in with_shape], np.float64).reshape(len(with_shape), -1)
                    for j, name in enumerate(SIZE_COLUMNS):
                        shaped[name] = values[:, j]
                        if name not in sweep.shape_columns and np.isfinite(values[:, j]).any():
                            sweep.shape_columns.add(name)
                    store.shapes.add(shaped)
            m = np.flatnonzero(~is_kernel)
            if len(m):
                copy_facts = np.empty(len(m), store.copies.dtype)
                copy_facts["rowid"], copy_facts["op"], copy_facts["step"] = rid[m], op_code[m], step[m]
                store.copies.add(copy_facts)
    names = [None] * (len(sweep.codes) - 1)
    for name, code in sweep.codes.items():
        if code >= 0:
            names[code] = name
    return sweep, names


def _iteration_facts(store, rid: np.ndarray, is_kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(iteration, position) of each launch of a batch (nsys_host_facts.iterations_in_call_order, read back by
    rowid): a kernel outside every iteration (MISSING, MISSING), a copy (MISSING, 0)."""
    step = np.full(len(rid), MISSING, np.int64)
    position = np.where(is_kernel, MISSING, 0).astype(np.int64)
    kernels = np.flatnonzero(is_kernel)
    if len(kernels):
        records, found = store.iterations.lookup(rid[kernels])
        step[kernels[found]] = records["step"][found]
        position[kernels[found]] = records["position"][found]
    return step, position


@dataclass
class _Batch:
    """What the walk found for one batch of launches, per row."""

    shapes: np.ndarray  # the launching op's size features (objects: tuples of shapes.SIZE_COLUMNS), else None
    op_row: np.ndarray  # its rowid, -1 for none
    op_code: np.ndarray  # its op code, -1 for none
    op_end: np.ndarray  # its end
    thread: np.ndarray  # the launching thread's code, -1 without a call
    occurrence: np.ndarray  # the op instance's number among its (step, thread, op)'s, MISSING for none
    index: np.ndarray  # the launch's number in its op instance, or among its (step, thread)'s launches without op


class _Walk:
    """The stateful part of the sweep: per thread (the launches come thread after thread, in call order), the
    op ranges still open, the op instances and the per-step counters.

    Why in two steps per thread and batch: the innermost open range around each call (innermost.last_open, over
    the ranges still open and those that start by the batch's last call) and the numbering, with numpy over the
    kernels with a step, on top of the counts carried from earlier batches (the
    instances still open, the per-step counters). The counters are keyed by the thread's code, so a thread's
    counters are never asked for again once the sweep has left it (step_store.StepCounters.reset)."""

    def __init__(self, sweep: _Sweep, ops: _Ops, iterations: bool):
        self.sweep, self.ops, self.iterations = sweep, ops, iterations
        self.instances = sweep.instances  # op rowid -> [launches numbered, occurrence, end]
        self.open: dict | None = None  # the thread's op ranges still open at its last call (_innermost)
        self.current = None
        self.ops_seen: set = set()  # op codes the current thread has numbered an instance of

    def batch(self, th: np.ndarray, hc: np.ndarray, ot: np.ndarray, step: np.ndarray, is_kernel: np.ndarray):
        n = len(th)
        missing = np.full(n, MISSING, np.int64)
        none = np.full(n, -1, np.int64)
        out = _Batch(
            np.full(n, None, object), none, none.copy(), np.zeros(n, np.int64), none.copy(), missing, missing.copy()
        )
        cuts = [0, *(np.flatnonzero(th[1:] != th[:-1]) + 1).tolist(), n]
        numbered = is_kernel & (step != MISSING)
        for a, b in zip(cuts[:-1], cuts[1:]):
            thread = int(th[a])
            if thread != self.current:  # a thread's ranges, op instances and counters are its own
                self._switch(thread)
            calls = np.flatnonzero(hc[a:b]) + a
            code = -1
            if len(calls) and thread != -1:
                code = self.sweep.threads.setdefault(thread, len(self.sweep.threads))
            if len(calls):
                out.thread[calls] = code
                self._innermost(thread, calls, ot, out)
            rows = np.flatnonzero(numbered[a:b])
            if len(rows):
                op = [v[a:b][rows] for v in (out.op_row, out.op_code, out.op_end)]
                self._number(thread, code, rows + a, op, ot, step, out, int(ot[b - 1]))
            self._forget(int(ot[b - 1]))
        return out

    def _switch(self, thread: int) -> None:
        sweep, ops = self.sweep, self.ops
        self.current, self.open, self.ops_seen = thread, None, set()
        self.instances.clear()
        sweep.occurrences.reset()
        sweep.positions.reset()
        while ops.at < len(ops.start) or (not ops.done and ops.load()):  # the earlier threads' ranges skipped
            ops.at = max(ops.at, int(np.searchsorted(ops.thread, thread, side="left")))
            if ops.at < len(ops.start):
                break

    def _innermost(self, thread: int, calls: np.ndarray, ot: np.ndarray, out: _Batch) -> None:
        """Each call's innermost open op range on its thread (innermost.last_open: the last range in push order,
        (start, longest first), that started by the call and has not ended), over the ranges still open at the
        thread's previous call and those of the stream that start by the last call here; the ranges ended by
        then are no later call's op and are let go. The stack swept call by call gives the same answers
        (innermost.innermost_op's docstring) but was a Python loop per launch."""
        from gpuvar.ingest.innermost import last_open

        ops, times = self.ops, ot[calls]
        parts = [self.open] if self.open is not None else []
        while True:
            if ops.at >= len(ops.start) and (ops.done or not ops.load()):
                break
            upto = ops.upto(thread, int(times[-1]))
            if upto > ops.at:
                at = slice(ops.at, upto)
                parts.append({k: getattr(ops, k)[at] for k in ("start", "end", "rowid", "code", "shape")})
                ops.at = upto
            if upto < len(ops.start):
                break
        if not parts:
            return
        window = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if len(parts) > 1 else parts[0]
        last = last_open(window["start"], window["end"], times)
        found = last >= 0
        rows, which = calls[found], last[found]
        out.shapes[rows] = window["shape"][which]
        out.op_row[rows], out.op_code[rows], out.op_end[rows] = (window[k][which] for k in ("rowid", "code", "end"))
        still = window["end"] >= times[-1]
        self.open = {k: v[still] for k, v in window.items()} if still.any() else None

    def _number(self, thread: int, code: int, rows: np.ndarray, op: list, ot, step, out: _Batch, now: int) -> None:
        """The kernels with a step of one thread in a batch (rows, in call order; op: their op's rowid, code and
        end): by op, the instance's launches and the op's instances in the step; without op, the position among
        the step's launches without op on this thread. Counted with numpy within the batch, on top of the counts
        carried from before it (the open instances; the per-step counters, one look-up per step and op)."""
        op_row, op_code, op_end = op
        by_op = op_row >= 0
        if by_op.any():
            args = (rows[by_op], op_row[by_op], op_code[by_op], op_end[by_op], ot, step, out, now)
            self._number_by_op(thread, code, *args)
        if not self.iterations and not by_op.all():
            rows = rows[~by_op]
            steps = step[rows]
            groups, first, inverse, within = _groups(steps)
            carried = np.empty(len(groups), np.int64)
            positions = self.sweep.positions
            for j, (s, n) in enumerate(zip(steps[first].tolist(), np.bincount(inverse).tolist())):
                counts = positions.of(s)
                carried[j] = counts.get(code, 0)
                counts[code] = int(carried[j]) + n  # (a Python int: a spilled step pickles 20x faster than numpy's)
            out.index[rows] = carried[inverse] + within

    def _number_by_op(self, thread, code, rows, op_row, op_code, op_end, ot, step, out: _Batch, now: int) -> None:
        sweep, instances = self.sweep, self.instances
        keys, first, inverse, within = _groups(op_row)  # the instances, in order of their first launch here
        count = np.bincount(inverse)
        before = np.zeros(len(keys), np.int64)  # launches numbered before this batch
        occurrence = np.full(len(keys), MISSING, np.int64)
        new = np.ones(len(keys), bool)
        if instances:
            for j in np.flatnonzero(np.isin(keys, np.fromiter(instances, np.int64, len(instances)))).tolist():
                before[j], occurrence[j], _ = instances[int(keys[j])]
                new[j] = False
        fresh = np.flatnonzero(new)
        if len(fresh):  # a new instance's number among its (step, thread, op)'s
            at = first[fresh]
            steps, ops = step[rows[at]], op_code[at]
            pairs, pair_first, pair_of, pair_within = _groups(steps, ops)
            carried = np.empty(len(pairs), np.int64)
            occurrences, at_step, per_op = sweep.occurrences, None, None
            for j, (s, o, n) in enumerate(
                zip(steps[pair_first].tolist(), ops[pair_first].tolist(), np.bincount(pair_of).tolist())
            ):
                if s != at_step:
                    at_step, per_op = s, occurrences.of(s)
                carried[j] = per_op.get((code, o), 0)
                per_op[(code, o)] = int(carried[j]) + n
            occurrence[fresh] = carried[pair_of] + pair_within
            for o in np.unique(ops).tolist():
                if o not in self.ops_seen:  # (this thread's first instance of the op)
                    self.ops_seen.add(o)
                    sweep.op_threads.setdefault(o, set()).add(code)
            sweep.first_launch.setdefault(code, (int(ot[rows[at[0]]]), thread))
        out.index[rows] = before[inverse] + within
        out.occurrence[rows] = occurrence[inverse]
        end = op_end[first]
        for j in np.flatnonzero(end >= now).tolist():  # kept: the instances a later launch can still be in
            instances[int(keys[j])] = (int(before[j] + count[j]), int(occurrence[j]), int(end[j]))

    def _forget(self, now: int) -> None:
        """Forget the op instances that ended before `now`: no later launch of this thread can be theirs."""
        instances = self.instances
        for key in [k for k, v in instances.items() if v[2] < now]:
            del instances[key]


def _groups(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by their keys, groups in order of their first row: (the groups' first rows' keys (first key),
    each group's first row, each row's group, each row's number within its group in row order)."""
    n = len(keys[0])
    order = np.lexsort(keys[::-1])  # stable: rows of a group stay in row order
    sorted_keys = [k[order] for k in keys]
    starts = np.ones(n, bool)
    starts[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
    group_sorted = np.cumsum(starts) - 1
    first_sorted = np.flatnonzero(starts)
    first = order[first_sorted]
    rank = np.argsort(first, kind="stable")  # groups renumbered by their first row
    renumber = np.empty(len(first), np.int64)
    renumber[rank] = np.arange(len(first))
    group = np.empty(n, np.int64)
    group[order] = renumber[group_sorted]
    within = np.empty(n, np.int64)
    within[order] = np.arange(n) - first_sorted[group_sorted]
    first = first[rank]
    return keys[0][first], first, group, within
