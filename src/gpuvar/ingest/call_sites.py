"""Launching op, step and physical call site of every launch (docs/causal.md, "Call sites and steps").

Why physical call sites: a performance engineer acts on a place in their program (the op in the step that
launched the work), not on a kernel name. Libraries pick another kernel variant when the size changes (cuBLAS,
cuDNN, templated kernels), so "the k-th launch of this *name* by aten::mm in the step" is a different GEMM from one
step to the next (label drift). A call site defined on the program side does not drift:

  * launch_op: the program-level op that launched it (gpuvar.ingest.host_timeline). Kineto: the cpu_op (or
    user_annotation) whose `External id` is the kernel's, when that op encloses the launching runtime call on its
    thread; else the innermost op enclosing the call. nsys: the innermost NVTX push/pop range enclosing the CUDA
    runtime call, emit_nvtx's ", seq = N, ..." suffix removed. Null otherwise.
  * step: the iteration. Step ranges when the trace has them (Kineto `ProfilerStep#N`; nsys NVTX ranges named
    like a step), judged by the CPU time of the launching call; else the segments between cudaDeviceSynchronize
    calls; else the iterations of the repeating launch pattern (gpuvar.ingest.iterations), said so in the notes.
  * op_occurrence: which instance of its launching op this is within the step and thread: the instances of one
    op name that launch work in a step are numbered from 0 in the order of their first launch.
  * call_index: the j-th launch of that op instance (from 0); without an op, the launch's position in its step.
  * call_site: '{launch_op}#{op_occurrence}.{call_index}' (plus '@t{n}' when the op name runs on several host
    threads, e.g. the autograd thread: n numbers the threads in order of their first launch); without an op but
    with a step '{step#|iter#}{position}'; without steps the launch's block, registers and shared memory
    ('b256x1x1 r32 s0'), never the grid: a grid that follows the problem size is size, not another place.
    A call site is unique on its own; the kernel name is a feature of it (the library's choice).
Copies get launch_op and step the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuvar.ingest.host_timeline import MISSING, HostTimeline, host_timeline, ints
from gpuvar.ingest.innermost import innermost_op
from gpuvar.ingest.iterations import find_iterations_coded

DERIVED = ("op_occurrence", "call_index", "call_site")  # computed from the launch's neighbours, not recorded
ITERATION_SOURCE = "the repeating launch pattern"


@dataclass
class Placed:
    """Host facts of the rows of one canonical table (kernels or memcpy)."""

    op_row: np.ndarray  # index into the host timeline's ops, -1 for none
    op_code: np.ndarray  # index into op_names, -1 for none
    op_names: list
    step: np.ndarray  # int64, MISSING for none
    order_time: np.ndarray  # launch call time (ns), else GPU start
    thread: np.ndarray  # the launching call's thread, -1 for none
    has_call: np.ndarray  # bool: the launching API call is in the trace
    with_op: int


def _unplaced(n: int) -> Placed:
    none = np.full(n, MISSING, np.int64)
    return Placed(
        np.full(n, -1, np.int64), np.full(n, -1, np.int64), [], none, none, np.full(n, -1), np.zeros(n, bool), 0
    )


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
    corr = ints(table.column("correlation_id"))
    pid = ints(table.column("process_id")) if "process_id" in table.column_names else np.full(n, -1, np.int64)
    gpu_start = ints(table.column("start"), MISSING)
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
        ext = ints(table.column("external_id")) if "external_id" in table.column_names else np.full(n, -1)
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
            op_index[rest] = innermost_op(ops, ts[rest], thread[rest])
    op_names = np.append(ops["name"].to_numpy(dtype=object), None)  # (index -1 picks the None appended)
    codes, uniques = pd.factorize(pd.Series(op_names[op_index], dtype=object))
    # step
    step = np.full(n, MISSING, dtype=np.int64)
    if host.steps is not None:
        s = host.steps.sort_values(["start", "end"], kind="stable")
        starts, ends, numbers = (s[c].to_numpy(np.int64) for c in ("start", "end", "number"))
        at = np.searchsorted(starts, ts, side="right") - 1
        ok = has_call & (at >= 0)
        ok &= ends[np.maximum(at, 0)] >= ts
        step[ok] = numbers[at[ok]]
    order_time = np.where(has_call, ts, gpu_start)
    return Placed(
        op_index, codes.astype(np.int64), list(uniques), step, order_time, thread, has_call, int((op_index >= 0).sum())
    )


def _sync_steps(host: HostTimeline, placed: list[Placed], tables: list[pa.Table]) -> int:
    """Steps from cudaDeviceSynchronize: the segment of each launch, numbered from the first with a launch.
    Fills placed[i].step in place; returns the number of steps."""
    s_start = np.sort(host.syncs["start"].to_numpy(np.int64))
    s_end = np.sort(host.syncs["end"].to_numpy(np.int64))
    segments = []
    for p, table in zip(placed, tables):
        gpu_start = ints(table.column("start"), MISSING)
        by_call = np.searchsorted(s_start, p.order_time, side="left")  # syncs started before the launch
        by_gpu = np.searchsorted(s_end, gpu_start, side="left")  # syncs ended before the kernel started
        seg = np.where(p.has_call, by_call, by_gpu)
        seg = np.where(gpu_start == MISSING, MISSING, seg)
        segments.append(seg)
    present = np.concatenate([s[s != MISSING] for s in segments]) if segments else np.zeros(0, np.int64)
    if not len(present):
        return 0
    first = int(present.min())
    for p, seg in zip(placed, segments):
        p.step = np.where(seg == MISSING, MISSING, seg - first)
    return int(present.max()) - first + 1


def _sequence_order(table: pa.Table, p: Placed) -> np.ndarray:
    """Row order of the launches as the program issued them: launch call time (else GPU start), then launch id,
    then correlation id, then the row itself (Nsight Compute has no timeline: its launch id is the order)."""
    keys = [np.arange(table.num_rows)]  # np.lexsort: the last key is the primary one
    for column in ("correlation_id", "launch_id"):
        if column in table.column_names:
            keys.append(ints(table.column(column), MISSING))
    keys.append(p.order_time)
    return np.lexsort(keys)


def _iteration_steps(kernels: pa.Table, p: Placed) -> tuple[np.ndarray, str | None]:
    """(position in the iteration per row, note) from the repeating launch pattern, filling p.step; per
    process and device, each its own sequence. Position -1 / note None where no pattern is found."""
    n = kernels.num_rows
    names = pc.fill_null(kernels.column("kernel_name"), "?").combine_chunks().dictionary_encode()
    name_codes, dictionary = ints(names.indices), np.asarray(names.dictionary.to_pylist(), dtype=object)
    position = np.full(n, -1, np.int64)
    group = np.zeros(n, np.int64)
    for column in ("rank", "process_id", "device_id"):
        if column in kernels.column_names:
            group = group * 1_000_003 + pd.factorize(kernels.column(column).to_pandas(), use_na_sentinel=False)[0]
    order = _sequence_order(kernels, p)
    found = []
    for g in np.sort(pd.unique(group)):  # (hashed, not sorted per row: one group per process and GPU)
        rows = order[group[order] == g]
        it = find_iterations_coded(name_codes[rows], dictionary)
        if it.anchor is None:
            continue
        inside = it.iteration >= 0
        p.step[rows[inside]] = it.iteration[inside]
        position[rows[inside]] = it.position[inside]
        found.append(it)
    if not found:
        return position, None
    return position, iterations_note(found, int((position < 0).sum()))


def iterations_note(found: list, outside: int) -> str:
    """How the steps were found: the iterations of each launch sequence with a pattern, and their anchors."""
    count = sum(it.count for it in found)
    anchors = sorted({_short(it.anchor) for it in found})
    return (
        f"{count} iterations from {ITERATION_SOURCE} (each starts at {', '.join(anchors)}; "
        f"{outside} launches outside any iteration)"
    )


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _rank_within(keys: list[np.ndarray], order_keys: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """0-based rank of each of `rows` among the rows with equal `keys`, ordered by `order_keys`; an array over
    all rows, MISSING outside `rows`."""
    order = rows[np.lexsort([k[rows] for k in order_keys[::-1]] + [k[rows] for k in keys[::-1]])]
    new = np.zeros(len(order), dtype=bool)
    new[:1] = True
    for k in keys:
        v = k[order]
        new[1:] |= v[1:] != v[:-1]
    position = np.arange(len(order))
    result = np.full(len(keys[0]), MISSING, np.int64)
    result[order] = position - np.maximum.accumulate(np.where(new, position, 0))
    return result


def _op_positions(p: Placed, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(op_occurrence, call_index, thread ordinal) of launches with an op and a step; MISSING elsewhere.

    An op instance's occurrence is its rank among the instances of the same op name on the same thread in the
    same step, by their first launch; call_index is the launch's rank among its op instance's launches."""
    n = len(p.op_row)
    with_op = np.flatnonzero((p.op_row >= 0) & (p.step != MISSING))
    occurrence = np.full(n, MISSING, np.int64)
    index = np.full(n, MISSING, np.int64)
    ordinal = np.full(n, MISSING, np.int64)
    if not len(with_op):
        return occurrence, index, ordinal
    # threads numbered in order of their first launch
    first_of_thread = pd.Series(p.order_time[with_op]).groupby(p.thread[with_op]).min().sort_values(kind="stable")
    thread_number = dict(zip(first_of_thread.index.tolist(), range(len(first_of_thread))))
    ordinal[with_op] = pd.Series(p.thread[with_op]).map(thread_number).to_numpy(np.int64)
    index = _rank_within([p.op_row], [p.order_time, corr], with_op)
    # one row per op instance: its first launch
    frame = pd.DataFrame(
        {"op_row": p.op_row[with_op], "t": p.order_time[with_op], "corr": corr[with_op], "i": with_op}
    ).sort_values(["op_row", "t", "corr"], kind="stable")
    first = frame.drop_duplicates("op_row")["i"].to_numpy()
    inst_occ = _rank_within([p.step, ordinal, p.op_code], [p.order_time, corr], first)
    by_instance = pd.Series(inst_occ[first], index=p.op_row[first])
    occurrence[with_op] = by_instance.reindex(p.op_row[with_op]).to_numpy(np.int64)
    return occurrence, index, ordinal


def _step_positions(p: Placed, corr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Position of each of `rows` among the launches of its step (and thread), in launch order."""
    return _rank_within([p.step, p.thread], [p.order_time, corr], rows)


def _config_labels(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """'b{block} r{registers} s{shared memory}' per row, the launch configuration without the grid: (code per row,
    the labels), not a Python string per row (1 M launches: 0.1 s to make them, as much to hand them to Arrow)."""
    n = table.num_rows
    if n == 0:
        return np.zeros(0, np.int64), []

    def column(name):
        if name not in table.column_names:
            return np.full(n, MISSING, np.int64)
        return ints(table.column(name), MISSING)

    parts = {
        name: column(name) for name in ("block_x", "block_y", "block_z", "registers_per_thread", "static_shared_memory")
    }
    dynamic = column("dynamic_shared_memory")
    shared = parts["static_shared_memory"]
    shared = np.where((shared != MISSING) & (dynamic != MISSING), shared + dynamic, np.maximum(shared, dynamic))
    columns = [parts["block_x"], parts["block_y"], parts["block_z"], parts["registers_per_thread"], shared]
    keys, combos = _distinct_rows(columns)
    labels = []
    for bx, by, bz, regs, smem in combos:
        text = lambda v: "?" if v == MISSING else str(v)  # noqa: E731
        if bx == MISSING and regs == MISSING and smem == MISSING:
            labels.append("?")
        else:
            labels.append(f"b{text(bx)}x{text(by)}x{text(bz)} r{text(regs)} s{text(smem)}")
    return (np.asarray(keys, np.int64), labels) if labels else (np.zeros(n, np.int64), ["?"])


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, list[tuple]]:
    """(code per row, the distinct rows as tuples), numbered in order of first appearance, as
    pd.factorize(pd.MultiIndex.from_frame(...)) numbers them, without a Python tuple per row: each column is
    factorized, the codes combined into one integer key (mixed radix) and that key factorized."""
    key = np.zeros(len(columns[0]), np.int64)
    radix = 1
    for values in columns:
        codes, uniques = pd.factorize(values)
        radix *= max(1, len(uniques))
        if radix >= 2**62:  # too many combinations for one int64 key: the tuples after all
            keys, combos = pd.factorize(pd.MultiIndex.from_arrays(columns))
            return keys, list(combos)
        key = key * max(1, len(uniques)) + codes
    keys, _ = pd.factorize(key)
    # each combination's first row, in code order: codes are numbered by first appearance, so a first row is one
    # whose code exceeds every code before it (linear; np.unique's sort took 0.06-0.19 s at 1 M rows)
    seen = np.maximum.accumulate(keys)
    rows = np.flatnonzero(np.concatenate([[True], keys[1:] > seen[:-1]])) if len(keys) else np.zeros(0, np.int64)
    return keys, [tuple(int(c[r]) for c in columns) for r in rows.tolist()]


@dataclass
class SiteTexts:
    """The call_site of every row as a code per row into `texts` (texts may repeat: the codes, not the texts, are
    distinct per source); as Arrow strings by `array`. A million rows share a few thousand texts, so no Python
    string is made per row."""

    codes: np.ndarray  # int64, one per row
    texts: list[str]

    def array(self) -> pa.Array:
        dictionary = pa.array(self.texts, pa.string())
        indices = pa.array(self.codes.astype(np.int32))
        return pa.DictionaryArray.from_arrays(indices, dictionary).cast(pa.string())

    def used(self) -> list[str]:
        return [self.texts[c] for c in np.flatnonzero(np.bincount(self.codes, minlength=len(self.texts))).tolist()]


def _labels(
    p: Placed,
    occurrence: np.ndarray,
    index: np.ndarray,
    ordinal: np.ndarray,
    position: np.ndarray,
    prefix: str,
    config: tuple[np.ndarray, list[str]],
    multi: set | None = None,
) -> SiteTexts:
    """The call_site text of every row (see the module docstring). config: _config_labels' codes and labels, the
    text where there is neither op nor position. multi: the op codes launched on several threads (None: found from
    these rows, the whole trace)."""
    codes, texts = config[0].copy(), list(config[1])
    with_op = occurrence != MISSING
    if with_op.any():
        op_codes = p.op_code[with_op]
        if multi is None:
            threads_per_op = pd.Series(ordinal[with_op]).groupby(op_codes).nunique()
            multi = set(threads_per_op.index[threads_per_op.to_numpy() > 1].tolist())
        key = pd.MultiIndex.from_arrays([op_codes, occurrence[with_op], index[with_op], ordinal[with_op]])
        inverse, combos = pd.factorize(key)
        codes[with_op] = len(texts) + inverse
        for code, occ, idx, th in combos:
            name = p.op_names[code] if code >= 0 else "?"
            texts.append(f"{name}#{occ}.{idx}" + (f"@t{th}" if code in multi else ""))
    by_position = ~with_op & (position != MISSING) & (position >= 0)
    if by_position.any():
        inverse, values = pd.factorize(position[by_position])
        codes[by_position] = len(texts) + inverse
        texts.extend(f"{prefix}{v}" for v in values)
    return SiteTexts(codes, texts)


def _shape_columns(host: HostTimeline | None, p: Placed) -> dict[str, pa.Array]:
    """The launching op's input-shape features (gpuvar.ingest.shapes) per launch, when the trace records shapes:
    computed once per op that launched something, then given to each of its launches; {} otherwise."""
    from gpuvar.ingest.shapes import SIZE_COLUMNS, op_shape_features

    if host is None or "dims" not in host.ops.columns or not (p.op_row >= 0).any():
        return {}
    ops = host.ops.reset_index(drop=True)
    used, inverse = np.unique(p.op_row[p.op_row >= 0], return_inverse=True)

    def column(name):
        return ops[name].to_numpy(dtype=object)[used] if name in ops.columns else None

    features = op_shape_features(
        ops["name"].to_numpy(dtype=object)[used], column("dims"), column("types"), column("concrete")
    )
    out = {}
    for name in SIZE_COLUMNS:
        values = np.full(len(p.op_row), np.nan)
        values[p.op_row >= 0] = features[name][inverse]
        if np.isfinite(values).any():
            out[name] = pa.array(values, type=pa.float64(), from_pandas=True)
    return out


def _nullable(values: np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.int64(), mask=values == MISSING)


def _op_array(p: Placed) -> pa.Array:
    mask = p.op_code < 0
    indices = pa.array(np.where(mask, 0, p.op_code).astype(np.int32), mask=mask if mask.any() else None)
    return pa.DictionaryArray.from_arrays(indices, pa.array(p.op_names, pa.string())).cast(pa.string())


def _set(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, name, values) if i >= 0 else table.append_column(name, values)


_BUILD = object()  # add_call_sites' `host` when the caller has not built it


@dataclass
class Iterations:
    """Steps found from the repeating launch pattern over a whole trace, for a part of its kernels
    (gpuvar.ingest.nsys_pieces finds them once, then places each piece's rows)."""

    step: np.ndarray  # int64 iteration per row, MISSING outside any
    position: np.ndarray  # int64 position in the iteration per row, -1 outside any
    note: str | None  # how they were found (None: no pattern)


@dataclass
class SiteSummary:
    """What the call-site note says, summed over the parts of a trace that add_call_sites saw."""

    sites: set = field(default_factory=set)
    launches: int = 0
    by_op: int = 0
    by_position: int = 0
    with_op: int = 0
    how: str | None = None
    op_source: str | None = None  # the host timeline's op source; None without one

    def add(self, other: SiteSummary) -> None:
        """Count another part's summary in (the parts of gpuvar.ingest.nsys_pieces, placed in worker processes)."""
        self.sites |= other.sites
        self.launches += other.launches
        self.by_op += other.by_op
        self.by_position += other.by_position
        self.with_op += other.with_op
        self.how, self.op_source = other.how, other.op_source

    def note(self) -> str:
        n, by_op, by_position = self.launches, self.by_op, self.by_position
        what = (
            f"call sites: {len(self.sites)} ({by_op} launches by op occurrence in the step, {by_position} by "
            f"position in the step, {n - by_op - by_position} by block, registers and shared memory)"
        )
        if self.how is None:
            return f"no step markers and no repeating launch pattern; {what}"
        op_note = f"launch_op from {self.op_source} for {self.with_op} of {n} kernels" if self.op_source else None
        return "; ".join(x for x in (self.how, op_note, what) if x)


def add_call_sites(
    raw, out, kernels: pa.Table, memcpy: pa.Table | None, host=_BUILD, iterations=None, summary=None
) -> tuple[pa.Table, pa.Table | None]:
    """The tables with launch_op, step, op_occurrence, call_index and call_site (kernels) and launch_op, step
    (memcpy) filled, and one note in `out.notes` saying how steps were found and what a call site is. host: the
    raw trace's host_timeline (None: it has none) when the caller built it already.

    For a trace taken in parts (gpuvar.ingest.nsys_pieces): iterations, the whole trace's Iterations for these
    rows, replaces the search for a repeating pattern in them; summary (a SiteSummary) collects what the note
    says instead of writing it, so that one note covers all the parts."""
    host = host_timeline(raw) if host is _BUILD else host
    tables = [kernels] + ([memcpy] if memcpy is not None else [])
    if host is not None and all("correlation_id" in t.column_names for t in tables):
        placed = [_place(host, t) for t in tables]
    else:
        placed = [_unplaced(t.num_rows) for t in tables]
    how = None
    if host is not None and any((p.step != MISSING).any() for p in placed):
        numbers = np.unique(np.concatenate([p.step[p.step != MISSING] for p in placed]))
        how = f"{len(numbers)} steps from {host.step_source}"
    elif host is not None and host.syncs is not None:
        count = _sync_steps(host, placed, tables)
        if count:
            how = f"{count} steps from cudaDeviceSynchronize ({len(host.syncs)} calls)"
    k = placed[0]
    n = kernels.num_rows
    position = np.full(n, MISSING, np.int64)
    prefix = "step#"
    if how is None:
        if iterations is None:
            iteration_position, how = _iteration_steps(kernels, k)
        else:
            k.step, iteration_position, how = iterations.step, iterations.position, iterations.note
        position = np.where(iteration_position >= 0, iteration_position, MISSING)
        prefix = "iter#"
    corr = ints(kernels.column("correlation_id")) if "correlation_id" in kernels.column_names else np.full(n, -1)
    occurrence, index, ordinal = _op_positions(k, corr)
    no_op = np.flatnonzero((occurrence == MISSING) & (k.step != MISSING))
    if prefix == "step#" and len(no_op):
        position[no_op] = _step_positions(k, corr, no_op)[no_op]
    index = np.where(occurrence != MISSING, index, position)
    kernels, memcpy, sites = _write_sites(kernels, memcpy, placed, (occurrence, index, ordinal, position), prefix, host)
    _summarize(summary, out, sites, k, occurrence, position, how, host.op_source if host is not None else None)
    return kernels, memcpy


def _write_sites(kernels, memcpy, placed, numbers, prefix, host, multi=None):
    """The tables with the call-site columns set from the placed rows and their numbers (occurrence, index,
    ordinal, position), the launching op's shape features added where the host timeline has them."""
    k = placed[0]
    occurrence, index, ordinal, position = numbers
    sites = _labels(k, occurrence, index, ordinal, position, prefix, _config_labels(kernels), multi)
    kernels = _set(kernels, "launch_op", _op_array(k))
    kernels = _set(kernels, "step", _nullable(k.step))
    kernels = _set(kernels, "op_occurrence", _nullable(occurrence))
    kernels = _set(kernels, "call_index", _nullable(index))
    kernels = _set(kernels, "call_site", sites.array())
    for name, values in _shape_columns(host, k).items():
        kernels = _set(kernels, name, values)
    if memcpy is not None:
        m = placed[1]
        memcpy = _set(memcpy, "launch_op", _op_array(m))
        memcpy = _set(memcpy, "step", _nullable(m.step))
    return kernels, memcpy, sites


def _summarize(summary, out, sites: SiteTexts, k: Placed, occurrence, position, how, op_source) -> None:
    """Count the rows' call sites into `summary`; without one (a whole trace), the note goes to out.notes."""
    n = len(sites.codes)
    whole = summary is None
    summary = SiteSummary() if whole else summary
    summary.sites.update(sites.used())
    summary.launches += n
    summary.by_op += int((occurrence != MISSING).sum())
    summary.by_position += int(((occurrence == MISSING) & (position != MISSING)).sum())
    summary.with_op += k.with_op
    summary.how, summary.op_source = how, op_source
    if whole:
        out.notes.append(summary.note())


def add_sites_from_facts(kernels: pa.Table, facts: dict, host, summary: SiteSummary) -> pa.Table:
    """The kernels of a part of a trace with the call-site columns from facts found elsewhere, over the whole
    trace (gpuvar.ingest.nsys_host_facts: facts holds op, has_op, step, occurrence, index and thread per row;
    host its HostFacts), counted into `summary`."""
    step = np.where(facts["step"] != MISSING, facts["step"] - host.step_base, MISSING)
    occurrence, index = facts["occurrence"], facts["index"]
    with_op = occurrence != MISSING
    ordinal = np.full(len(step), MISSING, np.int64)
    if with_op.any():
        ordinal[with_op] = pd.Series(facts["thread"][with_op]).map(host.ordinal).to_numpy(np.int64)
    position = np.where(with_op, MISSING, index)
    has_op = facts["has_op"] != 0
    k = Placed(np.where(has_op, 0, -1), facts["op"], host.op_names, step, step, step, has_op, int(has_op.sum()))
    numbers = (occurrence, index, ordinal, position)
    kernels, _, sites = _write_sites(kernels, None, [k], numbers, host.prefix, None, host.multi)
    _summarize(summary, None, sites, k, occurrence, position, host.how, "NVTX range")
    return kernels


def copies_from_facts(memcpy: pa.Table, op: np.ndarray, step: np.ndarray, host) -> pa.Table:
    """The memcpy table with launch_op and step from facts found over the whole trace (add_sites_from_facts)."""
    step = np.where(step != MISSING, step - host.step_base, MISSING)
    p = Placed(op, op, host.op_names, step, step, step, op >= 0, 0)
    return _set(_set(memcpy, "launch_op", _op_array(p)), "step", _nullable(step))


def copies_without_host(memcpy: pa.Table) -> pa.Table:
    """The memcpy table with launch_op and step as add_call_sites sets them for a trace without a host timeline:
    null (the pieces of gpuvar.ingest.nsys_pieces are such traces)."""
    p = _unplaced(memcpy.num_rows)
    return _set(_set(memcpy, "launch_op", _op_array(p)), "step", _nullable(p.step))
