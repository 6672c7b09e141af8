"""Call site, launching op and step of every launch (docs/causal.md, "Call sites and steps").

One kernel name often runs at several places of a step on different shapes (cuBLAS GEMMs, elementwise
kernels), so its duration spread is mostly call-site differences. This module places every launch on the
host timeline, once for every format, after the reader's normalize (gpuvar.ingest.normalize_trace):

  * launch_op: the program-level op that launched it. Kineto: the cpu_op (or user_annotation) whose
    `External id` is the kernel's, when that op encloses the launching runtime call (cuda_runtime / cuda_driver
    event with the kernel's correlation id) on its thread; else (older traces, whose kernel External id repeats
    the correlation id) the innermost op enclosing the call. nsys: the innermost NVTX push/pop range enclosing
    the CUDA runtime call (CUPTI_ACTIVITY_KIND_RUNTIME, same correlationId and process) on its thread, emit_nvtx's
    ", seq = N, op_id = M, sizes = ..." suffix removed (it numbers every call). Null otherwise.
  * step: the iteration. Step ranges when the trace has them (Kineto `ProfilerStep#N`; nsys NVTX ranges named
    like a step, 'step 3', 'iteration_12', ...: N), judged by the CPU time of the launching call; else the
    segments between cudaDeviceSynchronize calls, numbered from 0 at the first segment with a launch (syncs
    before the first launch end no step). A launch without its runtime call is placed by its GPU start
    against the syncs' ends (exact: the sync waits for it), and gets no step from ranges.
  * call_index: position among the launches of the same (kernel name, launch_op) within the step, in launch
    order (runtime call time, then correlation id); null without a step.
  * call_site: '{launch_op or ?}#{call_index} b{block} r{registers}' where the step is known (the grid is the
    problem size and may vary at one call site), else the launch_config string, else '?'. Unique only together
    with kernel_name.
Copies get launch_op and step the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
NVTX_STEP = re.compile(r"(?i)(?:^|[^a-z])(?:profiler_?step|step|iteration|iter)\s*[#:=_ -]?\s*(\d+)\s*$")
EMIT_NVTX_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$", re.S)
SYNC_NAME = re.compile(r"^cudaDeviceSynchronize(?:_v\d+)?$")
NVTX_PUSHPOP, NVTX_STARTEND = 59, 60
_MISSING = np.iinfo(np.int64).min
DERIVED = ("call_index", "call_site")  # computed from the launch's neighbours in its step, not recorded


@dataclass
class HostTimeline:
    """The host-side facts of one trace, times in ns.

    calls: launching API calls (pid: -1 where the launches carry no process id; corr; ts; thread; ext: the
    call's External id or -1). ops: candidate launching ops (start, end, thread, name, ext or -1). steps: step
    ranges (start, end, number) or None. syncs: device synchronisations (start, end) or None."""

    calls: pd.DataFrame
    ops: pd.DataFrame
    steps: pd.DataFrame | None
    syncs: pd.DataFrame | None
    step_source: str  # how steps are marked: 'ProfilerStep#N ranges', 'NVTX step ranges'
    op_source: str


def _ints(column, fill: int = -1) -> np.ndarray:
    """An Arrow (or pandas) number column as int64 numpy, `fill` where null or not finite."""
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        column = column.to_pandas()
    values = pd.to_numeric(pd.Series(column), errors="coerce").astype("float64").to_numpy()
    ok = np.isfinite(values) & (np.abs(values) < 2.0**63)
    return np.where(ok, np.where(ok, values, 0), fill).astype(np.int64)


def _texts(column) -> np.ndarray:
    return np.asarray(column.to_pandas(), dtype=object) if column is not None else np.zeros(0, object)


def _kineto_host(raw) -> HostTimeline | None:
    from gpuvar.ingest.kineto import us_to_ns

    runtime, cpu = raw.tables.get("runtime"), raw.tables.get("cpu_ops")
    if runtime is None:
        return None

    def timed(table):
        start, null = us_to_ns(table.column("ts"))
        dur = np.nan_to_num(table.column("dur").to_numpy(zero_copy_only=False), nan=0.0)
        thread = (_ints(table.column("pid"), 0) << 32) | (_ints(table.column("tid"), 0) & 0xFFFFFFFF)
        return start, start + np.round(dur * 1000).astype(np.int64), null, thread

    start, end, null, thread = timed(runtime)
    codes, values = _codes_of(runtime.column("name"))
    sync_codes = [i for i, v in enumerate(values) if isinstance(v, str) and SYNC_NAME.match(v)]
    is_sync = np.isin(codes, sync_codes)  # (matched once per distinct name)
    ext = (
        _ints(runtime.column("args.External id"))
        if "args.External id" in runtime.column_names
        else np.full(len(start), -1, np.int64)
    )
    corr = _ints(runtime.column("args.correlation"))
    kept = ~null & (corr >= 0)  # (filtered as numpy: a DataFrame's boolean selection copies block by block)
    calls = pd.DataFrame(
        {
            "pid": np.full(int(kept.sum()), -1, np.int64),
            "corr": corr[kept],
            "ts": start[kept],
            "thread": thread[kept],
            "ext": ext[kept],
        }
    )
    syncs = pd.DataFrame({"start": start[is_sync & ~null], "end": end[is_sync & ~null]})
    ops = pd.DataFrame({"start": [], "end": [], "thread": [], "name": [], "ext": []})
    steps = None
    if cpu is not None and cpu.num_rows:
        o_start, o_end, o_null, o_thread = timed(cpu)
        name_codes, distinct = _codes_of(cpu.column("name"))  # names matched once per distinct name
        o_names = np.array(distinct + [None], dtype=object)[name_codes]
        numbers = [_step_number(PROFILER_STEP, n) for n in distinct] + [None]
        step_no = np.array(numbers, dtype=object)[name_codes]
        marker = np.array([n is not None for n in numbers], dtype=bool)[name_codes]
        keep = ~o_null & ~marker
        ops = pd.DataFrame(
            {
                "start": o_start[keep],
                "end": o_end[keep],
                "thread": o_thread[keep],
                "name": o_names[keep],
                "ext": _ints(cpu.column("args.External id"))[keep],
            }
        )
        if (marker & ~o_null).any():
            sel = marker & ~o_null
            steps = pd.DataFrame({"start": o_start[sel], "end": o_end[sel], "number": step_no[sel].astype(np.int64)})
    return HostTimeline(calls, ops, steps, syncs if len(syncs) else None, "ProfilerStep#N ranges", "cpu_op")


def _step_number(pattern: re.Pattern, name) -> int | None:
    m = pattern.search(name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


def _nsys_host(raw) -> HostTimeline | None:
    from gpuvar.ingest.nsys import RAW_NVTX, RAW_RUNTIME, RAW_STRINGS

    runtime = raw.tables.get(RAW_RUNTIME)
    if runtime is None:
        return None
    strings = raw.tables.get(RAW_STRINGS)
    lookup = (
        dict(zip(_ints(strings.column("id")).tolist(), _texts(strings.column("value")).tolist()))
        if strings is not None
        else {}
    )
    tid = _ints(runtime.column("globalTid"))
    start = _ints(runtime.column("start"), _MISSING)
    end = _ints(runtime.column("end"), _MISSING) if "end" in runtime.column_names else start
    calls = pd.DataFrame({"pid": (tid >> 24) & 0xFFFFFF, "corr": _ints(runtime.column("correlationId")), "ts": start})
    calls["thread"], calls["ext"] = tid, -1
    calls = calls[(start != _MISSING) & (calls["corr"] >= 0)]
    syncs = None
    if "nameId" in runtime.column_names:
        name_ids = _ints(runtime.column("nameId"))
        sync_ids = [i for i, v in lookup.items() if isinstance(v, str) and SYNC_NAME.match(v)]
        is_sync = np.isin(name_ids, sync_ids) & (start != _MISSING)
        if is_sync.any():
            syncs = pd.DataFrame({"start": start[is_sync], "end": end[is_sync]})
    ops = pd.DataFrame({"start": [], "end": [], "thread": [], "name": [], "ext": []})
    steps = None
    nvtx = raw.tables.get(RAW_NVTX)
    if nvtx is not None and nvtx.num_rows:
        kind = _ints(nvtx.column("eventType"))
        n_start, n_end = _ints(nvtx.column("start"), _MISSING), _ints(nvtx.column("end"), _MISSING)
        text = _texts(nvtx.column("text")) if "text" in nvtx.column_names else np.full(len(kind), None, object)
        if "textId" in nvtx.column_names:
            ids = _ints(nvtx.column("textId"))
            text = np.array([t if t is not None else lookup.get(i) for t, i in zip(text, ids)], dtype=object)
        timed = (n_start != _MISSING) & (n_end != _MISSING)
        ranges = timed & np.isin(kind, (NVTX_PUSHPOP, NVTX_STARTEND))
        step_no = np.array([_step_number(NVTX_STEP, t) if r else None for t, r in zip(text, ranges)], dtype=object)
        marker = np.array([s is not None for s in step_no], dtype=bool)
        pushpop = timed & (kind == NVTX_PUSHPOP) & ~marker
        names = [EMIT_NVTX_SUFFIX.sub("", t) if isinstance(t, str) else None for t in text[pushpop]]
        ops = pd.DataFrame(
            {
                "start": n_start[pushpop],
                "end": n_end[pushpop],
                "thread": _ints(nvtx.column("globalTid"))[pushpop],
                "name": np.array(names, dtype=object),
                "ext": -1,
            }
        )
        if marker.any():
            steps = pd.DataFrame(
                {"start": n_start[marker], "end": n_end[marker], "number": step_no[marker].astype(np.int64)}
            )
    return HostTimeline(calls, ops, steps, syncs, "NVTX step ranges", "NVTX range")


HOSTS = {"pytorch-kineto": _kineto_host, "nsys-sqlite": _nsys_host}


def host_timeline(raw) -> HostTimeline | None:
    """The host facts of a raw trace (None for a format without a host timeline). It reads only the raw
    tables, so normalize_trace builds it in a thread while the reader's normalize runs."""
    builder = HOSTS.get(raw.format)
    return builder(raw) if builder is not None else None


def _innermost(ops: pd.DataFrame, times: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Index (into ops) of the innermost op enclosing each (time, thread) query on that thread, -1 where none.

    A sweep per thread: ops by (start, longest first) pushed on a stack, ended ones popped; the top of the stack
    at a query is the innermost open op (for properly nested ranges, as profilers record them)."""
    out = np.full(len(times), -1, dtype=np.int64)
    if not len(ops) or not len(times):
        return out
    o_thread = ops["thread"].to_numpy(np.int64)
    o_start, o_end = ops["start"].to_numpy(np.int64), ops["end"].to_numpy(np.int64)
    wanted = np.isin(o_thread, np.unique(threads))
    o_idx = np.flatnonzero(wanted)
    o_idx = o_idx[np.lexsort((-o_end[o_idx], o_start[o_idx], o_thread[o_idx]))]
    q_idx = np.lexsort((times, threads))
    o_list, q_list = o_idx.tolist(), q_idx.tolist()
    starts, ends, othr = o_start.tolist(), o_end.tolist(), o_thread.tolist()
    tlist, thlist = times.tolist(), threads.tolist()
    j, stack, current = 0, [], None
    for q in q_list:
        t, th = tlist[q], thlist[q]
        if th != current:
            current, stack = th, []
            while j < len(o_list) and othr[o_list[j]] < th:
                j += 1
        while j < len(o_list) and othr[o_list[j]] == th and starts[o_list[j]] <= t:
            stack.append(o_list[j])
            j += 1
        while stack and ends[stack[-1]] < t:
            stack.pop()
        if stack:
            out[q] = stack[-1]
    return out


@dataclass
class Placed:
    """Host facts of the rows of one canonical table (kernels or memcpy)."""

    op_code: np.ndarray  # index into op_names, -1 for none
    op_names: list
    step: np.ndarray  # int64, _MISSING for none
    order_time: np.ndarray  # launch call time (ns), else GPU start
    has_call: np.ndarray  # bool: the launching API call is in the trace
    with_op: int


def _unplaced(n: int) -> Placed:
    none = np.full(n, _MISSING, np.int64)
    return Placed(np.full(n, -1, np.int64), [], none, none, np.zeros(n, bool), 0)


def _first_match(wanted: list[np.ndarray], keys: list[np.ndarray]) -> np.ndarray:
    """For each row of `wanted` (key columns), the index of the first row of `keys` with the same values, -1
    where none: a left join on unique right keys (the first of repeated ones) in numpy, exact on int64."""
    if len(wanted) == 1:
        want, have = wanted[0], keys[0]
    else:  # each column ranked over both sides, then combined in mixed radix (exact while the product of the
        # columns' distinct counts stays below 2**63: two columns of any length in memory)
        want = np.zeros(len(wanted[0]), np.int64)
        have = np.zeros(len(keys[0]), np.int64)
        for w, k in zip(wanted, keys):
            distinct, inverse = np.unique(np.concatenate([w, k]), return_inverse=True)
            want = want * len(distinct) + inverse[: len(w)]
            have = have * len(distinct) + inverse[len(w) :]
    out = np.full(len(want), -1, dtype=np.int64)
    if not len(have) or not len(want):
        return out
    order = np.argsort(have, kind="stable")
    sorted_keys = have[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    distinct, first_row = sorted_keys[first], order[first]
    at = np.minimum(np.searchsorted(distinct, want), len(distinct) - 1)
    found = distinct[at] == want
    out[found] = first_row[at[found]]
    return out


def _place(host: HostTimeline, table: pa.Table) -> Placed:
    n = table.num_rows
    corr = _ints(table.column("correlation_id"))
    pid = _ints(table.column("process_id")) if "process_id" in table.column_names else np.full(n, -1, np.int64)
    gpu_start = _ints(table.column("start"), _MISSING)
    c_pid, c_corr = host.calls["pid"].to_numpy(np.int64), host.calls["corr"].to_numpy(np.int64)
    if (c_pid == -1).all():  # the calls carry no process id (Kineto): matched by correlation id alone
        call = _first_match([corr], [c_corr])
    else:
        call = _first_match([pid, corr], [c_pid, c_corr])
    has_call = (call >= 0) & (corr >= 0)
    c_ts, c_thread = (np.append(host.calls[c].to_numpy(np.int64), 0) for c in ("ts", "thread"))  # [-1]: no call
    ts = np.where(has_call, c_ts[call], 0)  # (exact ns: a float64 holds epoch ns only to 256 ns)
    thread = np.where(call >= 0, c_thread[call], -1)
    # launching op: External id (verified by time on the call's thread), else the innermost enclosing op
    op_index = np.full(n, -1, dtype=np.int64)
    ops = host.ops.reset_index(drop=True)
    if len(ops) and has_call.any():
        ext = _ints(table.column("external_id")) if "external_id" in table.column_names else np.full(n, -1)
        o_ext = ops["ext"].to_numpy(np.int64)
        if (o_ext >= 0).any():
            cand = _first_match([ext], [o_ext])
            ok = has_call & (cand >= 0)
            c = np.where(ok, cand, 0)
            ok &= (
                (ops["thread"].to_numpy(np.int64)[c] == thread)
                & (ops["start"].to_numpy(np.int64)[c] <= ts)
                & (ops["end"].to_numpy(np.int64)[c] >= ts)
            )
            op_index[ok] = cand[ok]
        rest = np.flatnonzero(has_call & (op_index < 0))
        if len(rest):
            op_index[rest] = _innermost(ops, ts[rest], thread[rest])
    op_names = np.append(ops["name"].to_numpy(dtype=object), None)  # (index -1 picks the None appended)
    codes, uniques = pd.factorize(pd.Series(op_names[op_index], dtype=object))
    # step
    step = np.full(n, _MISSING, dtype=np.int64)
    if host.steps is not None:
        s = host.steps.sort_values(["start", "end"], kind="stable")
        starts, ends, numbers = (s[c].to_numpy(np.int64) for c in ("start", "end", "number"))
        at = np.searchsorted(starts, ts, side="right") - 1
        ok = has_call & (at >= 0)
        ok &= ends[np.maximum(at, 0)] >= ts
        step[ok] = numbers[at[ok]]
    order_time = np.where(has_call, ts, gpu_start)
    return Placed(codes.astype(np.int64), list(uniques), step, order_time, has_call, int((op_index >= 0).sum()))


def _sync_steps(host: HostTimeline, placed: list[Placed], tables: list[pa.Table]) -> int:
    """Steps from cudaDeviceSynchronize: the segment of each launch, numbered from the first with a launch.
    Fills placed[i].step in place; returns the number of steps."""
    s_start = np.sort(host.syncs["start"].to_numpy(np.int64))
    s_end = np.sort(host.syncs["end"].to_numpy(np.int64))
    segments = []
    for p, table in zip(placed, tables):
        gpu_start = _ints(table.column("start"), _MISSING)
        has_call = p.has_call
        by_call = np.searchsorted(s_start, p.order_time, side="left")  # syncs started before the launch
        by_gpu = np.searchsorted(s_end, gpu_start, side="left")  # syncs ended before the kernel started
        seg = np.where(has_call, by_call, by_gpu)
        seg = np.where(gpu_start == _MISSING, _MISSING, seg)
        segments.append(seg)
    present = np.concatenate([s[s != _MISSING] for s in segments]) if segments else np.zeros(0, np.int64)
    if not len(present):
        return 0
    first = int(present.min())
    for p, seg in zip(placed, segments):
        p.step = np.where(seg == _MISSING, _MISSING, seg - first)
    return int(present.max()) - first + 1


def _call_index(names: np.ndarray, p: Placed, corr: np.ndarray) -> np.ndarray:
    """Rank of each launch among those of the same (kernel name, launch_op) in its step, in launch order."""
    out = np.full(len(names), _MISSING, dtype=np.int64)
    rows = np.flatnonzero(p.step != _MISSING)
    if not len(rows):
        return out
    keys = (corr[rows], p.order_time[rows], p.op_code[rows], names[rows], p.step[rows])
    order = rows[np.lexsort(keys)]
    st, nm, op = p.step[order], names[order], p.op_code[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (st[1:] != st[:-1]) | (nm[1:] != nm[:-1]) | (op[1:] != op[:-1])
    position = np.arange(len(order))
    out[order] = position - np.maximum.accumulate(np.where(new, position, 0))
    return out


def _call_site_labels(table: pa.Table, p: Placed, index: np.ndarray) -> pa.Array:
    """'{op}#{index} b{bx}x{by}x{bz} r{regs}' where the step is known, else launch_config, else '?'."""
    n = table.num_rows
    known = index != _MISSING
    if not known.any():  # every label is the launch configuration: taken in Arrow, no Python string per row
        fallback = table.column("launch_config")
        fallback = fallback.combine_chunks() if isinstance(fallback, pa.ChunkedArray) else fallback
        if pa.types.is_string(fallback.type):
            return pc.fill_null(fallback, "?")
    fallback = table.column("launch_config").to_pandas().to_numpy(dtype=object)
    parts = [p.op_code, index] + [
        _ints(table.column(c), _MISSING) for c in ("block_x", "block_y", "block_z", "registers_per_thread")
    ]
    key = np.zeros(n, dtype=np.int64)
    uniques = []
    for values in parts:
        codes, u = pd.factorize(values)
        key = key * len(u) + codes
        uniques.append(u)
    codes, combos = pd.factorize(np.where(known, key, -1))
    labels = []
    for combo in combos:
        if combo < 0:
            labels.append(None)
            continue
        digits = []
        for u in reversed(uniques):
            combo, d = divmod(int(combo), len(u))
            digits.append(u[d])
        op, idx, bx, by, bz, regs = (("?" if v == _MISSING else v) for v in reversed(digits))
        name = p.op_names[op] if op != "?" and op >= 0 else "?"
        labels.append(f"{name}#{idx} b{bx}x{by}x{bz} r{regs}")
    site = np.array(labels, dtype=object)[codes] if len(labels) else np.full(n, None, object)
    site = np.where(known, site, fallback)
    return pa.array(np.where(pd.isna(site), "?", site).tolist(), pa.string())


def _nullable(values: np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.int64(), mask=values == _MISSING)


def _op_array(p: Placed) -> pa.Array:
    mask = p.op_code < 0
    indices = pa.array(np.where(mask, 0, p.op_code).astype(np.int32), mask=mask if mask.any() else None)
    return pa.DictionaryArray.from_arrays(indices, pa.array(p.op_names, pa.string())).cast(pa.string())


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, name, values) if i >= 0 else table.append_column(name, values)


_BUILD = object()  # add_call_sites' `host` when the caller has not built it


def add_call_sites(
    raw, out, kernels: pa.Table, memcpy: pa.Table | None, host=_BUILD
) -> tuple[pa.Table, pa.Table | None]:
    """The tables with launch_op, step, call_index and call_site (kernels) and launch_op, step (memcpy) filled,
    and one note in `out.notes` saying how steps were found and how many call sites there are. host: the raw
    trace's host_timeline (None: it has none) when the caller built it already."""
    host = host_timeline(raw) if host is _BUILD else host
    tables = [kernels] + ([memcpy] if memcpy is not None else [])
    if host is not None and all("correlation_id" in t.column_names for t in tables):
        placed = [_place(host, t) for t in tables]
    else:
        placed = [_unplaced(t.num_rows) for t in tables]
    how = None
    if host is not None and any((p.step != _MISSING).any() for p in placed):
        numbers = np.unique(np.concatenate([p.step[p.step != _MISSING] for p in placed]))
        how = f"{len(numbers)} steps from {host.step_source}"
    elif host is not None and host.syncs is not None:
        count = _sync_steps(host, placed, tables)
        if count:
            how = f"{count} steps from cudaDeviceSynchronize ({len(host.syncs)} calls)"
    k = placed[0]
    if (k.step != _MISSING).any():
        names, _ = _codes_of(kernels.column("kernel_name"))
        corr = (
            _ints(kernels.column("correlation_id"))
            if "correlation_id" in kernels.column_names
            else np.full(kernels.num_rows, -1)
        )
        index = _call_index(names, k, corr)
    else:  # no launch has a step (an export without step markers): what _call_index gives, without its inputs
        index = np.full(kernels.num_rows, _MISSING, dtype=np.int64)
    sites = _call_site_labels(kernels, k, index)
    kernels = _set(kernels, "launch_op", _op_array(k))
    kernels = _set(kernels, "step", _nullable(k.step))
    kernels = _set(kernels, "call_index", _nullable(index))
    kernels = _set(kernels, "call_site", sites)
    if memcpy is not None:
        m = placed[1]
        memcpy = _set(memcpy, "launch_op", _op_array(m))
        memcpy = _set(memcpy, "step", _nullable(m.step))
    distinct = pa.table({"n": kernels.column("kernel_name"), "s": sites}).group_by(["n", "s"]).aggregate([]).num_rows
    if how is None:
        out.notes.append(
            f"no step markers: call sites are launch configurations ({distinct} (kernel, call site) pairs)"
        )
    else:
        op_note = f"launch_op from {host.op_source} for {k.with_op} of {kernels.num_rows} kernels"
        out.notes.append(f"{how}; {op_note}; {distinct} (kernel, call site) pairs")
    return kernels, memcpy


def _codes_of(column) -> tuple[np.ndarray, list]:
    """Codes of a string column (-1 for null)."""
    encoded = pc.dictionary_encode(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    codes = pc.fill_null(encoded.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
    return codes, encoded.dictionary.to_pylist()
