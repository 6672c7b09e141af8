"""Context of every kernel launch: what ran beside it on the same GPU (issue 21 item 4).

Why: when a kernel is slow because something else used the GPU at the same time (a copy on another stream
taking memory bandwidth, kernels of other streams taking SMs, a host that launched late), its launch
configuration and counters explain nothing. These columns put that context on each kernel row, so binning
and causal discovery can name it.

`context_columns(kernels, memcpy)` returns float64 arrays aligned with the kernels' rows. The timeline is
that of the same device and, when the tables have a `rank` column, the same rank (a null rank is a value
of its own: one single-file trace). Intervals are half-open, [start, end): a kernel and a copy overlap iff
each starts before the other ends (copy.start < kernel.end and copy.end > kernel.start), so a copy that
ends exactly when the kernel starts does not count. A kernel row with a null start, end or device_id, or
end < start, gets NaN everywhere and counts for no other row (likewise such copies).

  ctx_copy_active        1.0 if a copy (copy_kind_name != 'Memset'; any kind, any stream, the kernel's own
                         included) overlaps the kernel, else 0.0. A copy competes for memory bandwidth
                         (and copy engines, PCIe/NVLink) with the kernel.
  ctx_copy_bytes         bytes of those overlapping copies, whole (not prorated to the overlap); 0 if none.
                         A null byte count adds 0.
  ctx_memset_active      the same flag for memsets (copy_kind_name == 'Memset').
  ctx_kernels_concurrent other kernels of other streams of the device overlapping the kernel (count): they
                         share SMs, caches and bandwidth. NaN for a kernel with a null stream_id, and such
                         kernels are not counted for others (their stream is unknown).
  ctx_gap_ns             ns from the end of the previous kernel (by start) of the same device and stream to
                         this start: how long the stream idled, i.e. the host launched late, waited on a
                         synchronisation or ran other stream work in between. NaN for the first kernel of
                         a stream; negative when the record says they overlap.
  ctx_step_offset_ns     ns from the start of the first kernel of the same `step` (device and rank) to this
                         start: where in the training/inference step the kernel ran. Only when the kernels
                         table has a `step` column; NaN for a null step.

Why a cause and not a consequence: all of them are decided outside the kernel (by the program's other
streams, its copies and the host), so they sit in the launch tier (role `context`, tier 0, in
data/feature_roles.csv): a counter or the duration cannot cause them. One caveat: an overlap is measured
over the kernel's own interval, so a longer kernel overlaps more: the copy and memset flags and
`ctx_kernels_concurrent` grow somewhat with the kernel's own duration (reverse causation by construction).
Measured on the real H100 contention trace (5700 kernels; copies of 370 us, kernels of 22-360 us): setting
every kernel's end to start + its name's median duration changes ctx_copy_active in 0 kernels and
ctx_kernels_concurrent in 0; lengthening every kernel by 10 % or 50 % changes neither. The copy flag's R² with
the duration of the slowed kernel (curand's normal_) is 0.94. ctx_memset_active is the sensitive one there:
memsets start a median 1.3 us after the end of the kernel before them, so the median end flips it in 83
kernels and +10 % in 1630. Where contexts start or end within a kernel's own jitter of it, read an edge from
these columns with that in mind.

No Python loop over rows: overlaps are counted with searchsorted over the sorted interval starts and ends
of each (rank, device) timeline, flattened into one sorted key space (group x span + time).
Nsight Compute tables have no timeline (null start/end): the result is {}. memcpy None means the source
records no copies (not that none ran): the copy and memset columns are left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = (
    "ctx_copy_active",
    "ctx_copy_bytes",
    "ctx_memset_active",
    "ctx_kernels_concurrent",
    "ctx_gap_ns",
    "ctx_step_offset_ns",
)
_INT63 = 2**62  # keys stay below this: room for the +1 of searchsorted bounds without overflow


def _ints(frame: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with nulls as 0, valid mask) of a column (numpy, nullable or Arrow-backed). Integer
    columns keep their precision: epoch ns exceed 2**53, so no detour through float64."""
    col = frame[name]
    return col.to_numpy(dtype=np.int64, na_value=0), col.notna().to_numpy()


def _timed(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, device_id, valid) of a table's rows: valid where all three are known and end >= start."""
    start, ok_s = _ints(frame, "start")
    end, ok_e = _ints(frame, "end")
    device, ok_d = _ints(frame, "device_id")
    return start, end, device, ok_s & ok_e & ok_d & (end >= start)


def group_codes(*columns: pd.Series | np.ndarray) -> np.ndarray:
    """Distinct int64 codes of the combined values of equal-length columns (a null is a value of its own);
    dense again only when the mixed-radix product grows past 2**31 (keys multiply codes by a time span)."""
    code = np.zeros(len(columns[0]), np.int64)
    radix = 1
    for col in columns:
        c, uniques = pd.factorize(col, use_na_sentinel=False)
        code = code * (len(uniques) + 1) + c
        radix *= len(uniques) + 1
        if radix > 2**31:
            code = pd.factorize(code)[0].astype(np.int64)
            radix = int(code.max()) + 1 if len(code) else 1
    return code


class TimelineKeys:
    """Times of both tables mapped into one order-preserving int64 space `span` wide, so that a (group, time)
    pair is the single sortable key group * span + time. Relative ns when that fits, else the dense rank of
    every time (same order, so the same overlaps)."""

    def __init__(self, times: list[np.ndarray], n_groups: int):
        allt = np.concatenate(times) if times else np.zeros(0, np.int64)
        if len(allt) == 0:
            self.t0, self.span, self._map = 0, 1, None
            return
        self.t0 = int(allt.min())
        span = int(allt.max()) - self.t0 + 1
        if span * max(n_groups, 1) < _INT63:
            self.span = span
            self._map = None
        else:  # a huge time range (or many groups): compress times to their ranks
            self._map = np.unique(allt)
            self.span = len(self._map) + 1

    def time(self, t: np.ndarray) -> np.ndarray:
        if self._map is None:
            return t - self.t0
        return np.searchsorted(self._map, t)

    def key(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        if (int(group.max()) + 1 if len(group) else 1) * self.span >= _INT63:
            raise OverflowError("too many timeline groups for one int64 key space")
        return group * self.span + self.time(t)


def overlaps(keys: TimelineKeys, qg, qs, qe, ig, ia, ib, weight=None):
    """For each query interval [qs, qe) of group qg: how many intervals [ia, ib) of the same group overlap it
    (ia < qe and ib > qs), and the sum of their weights. #{a < e} - #{b <= s} counts exactly those when s < e
    (an interval ending by s started before e); a zero-length query (s == e) also subtracted the zero-length
    intervals sitting at s, which are added back."""
    ka = keys.key(ig, ia)
    kb = keys.key(ig, ib)
    qks, qke = keys.key(qg, qs), keys.key(qg, qe)
    if weight is None:
        ka, kb = np.sort(ka, kind="stable"), np.sort(kb, kind="stable")
    else:
        oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
        ka, kb = ka[oa], kb[ob]
    n_started = np.searchsorted(ka, qke, side="left")
    n_ended = np.searchsorted(kb, qks, side="right")
    count = n_started - n_ended
    wsum = None
    if weight is not None:
        wa = np.concatenate(([0.0], np.cumsum(weight[oa])))
        wb = np.concatenate(([0.0], np.cumsum(weight[ob])))
        wsum = wa[n_started] - wb[n_ended]
    point = qs == qe
    if point.any():
        zero = ia == ib
        kz = keys.key(ig[zero], ia[zero])
        oz = np.argsort(kz, kind="stable")
        kz = kz[oz]
        lo = np.searchsorted(kz, qks[point], side="left")
        hi = np.searchsorted(kz, qks[point], side="right")
        count[point] += hi - lo
        if weight is not None:
            wz = np.concatenate(([0.0], np.cumsum(weight[zero][oz])))
            wsum[point] += wz[hi] - wz[lo]
    return count, wsum


def _rank_columns(kernels: pd.DataFrame, memcpy: pd.DataFrame | None):
    """The rank column of each table (all null where absent). Refuses ranked rows in one table when the other
    has no rank column: matching them by device alone would mix the ranks' timelines."""
    if memcpy is not None and len(memcpy) and len(kernels):
        k_col, m_col = "rank" in kernels.columns, "rank" in memcpy.columns
        ranked = (k_col and kernels["rank"].notna().any()) or (m_col and memcpy["rank"].notna().any())
        if k_col != m_col and ranked:
            raise ValueError("kernels and memcpy must both have a `rank` column, or neither, to match timelines")
    rk = kernels["rank"] if "rank" in kernels.columns else pd.Series(np.full(len(kernels), np.nan))
    rm = None
    if memcpy is not None:
        rm = memcpy["rank"] if "rank" in memcpy.columns else pd.Series(np.full(len(memcpy), np.nan))
    return rk, rm


def context_columns(kernels: pd.DataFrame, memcpy: pd.DataFrame | None) -> dict[str, np.ndarray]:
    """The context columns of the module docstring, one float64 array per column aligned with `kernels`' rows
    ({} for a table without timings; empty arrays for an empty one)."""
    if not _has_timeline(kernels):
        return {}
    n = len(kernels)
    start, end, device, valid = _timed(kernels)
    rk, rm = _rank_columns(kernels, memcpy)

    if memcpy is not None:
        m_start, m_end, m_device, m_valid = _timed(memcpy)
        is_memset = (
            memcpy["copy_kind_name"].eq("Memset").to_numpy(dtype=bool, na_value=False)
            if "copy_kind_name" in memcpy.columns
            else np.zeros(len(memcpy), bool)
        )
        m_bytes = (
            memcpy["bytes"].to_numpy(dtype=np.float64, na_value=0.0)
            if "bytes" in memcpy.columns
            else np.zeros(len(memcpy))
        )
        mv = np.flatnonzero(m_valid)
    else:
        mv = np.zeros(0, np.int64)

    kv = np.flatnonzero(valid)
    # one group code per (rank, device), shared by both tables
    dev_all = np.concatenate([device[kv], m_device[mv]]) if memcpy is not None else device[kv]
    parts = [rk.iloc[kv]] + ([rm.iloc[mv]] if memcpy is not None else [])
    # (empty parts left out, as pandas did before deprecating it: they do not decide the dtype)
    parts = [p for p in parts if len(p)] or parts[:1]
    rank_all = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    group_all = group_codes(pd.Series(rank_all).reset_index(drop=True), dev_all)
    kg, mg = group_all[: len(kv)], group_all[len(kv) :]

    stream = kernels["stream_id"] if "stream_id" in kernels.columns else pd.Series(np.full(n, np.nan))
    s_ok = stream.notna().to_numpy()[kv]
    ks = group_codes(pd.Series(kg), stream.iloc[kv].reset_index(drop=True))  # (rank, device, stream)

    times = [start[kv], end[kv]] + ([m_start[mv], m_end[mv]] if memcpy is not None else [])
    keys = TimelineKeys(times, int(max(group_all.max(initial=0), ks.max(initial=0))) + 1)
    # kernels in timeline order from here on: sorted queries make searchsorted walk its arrays in order
    # (several times faster at 1 M rows than random probes); `place` scatters back to table order
    p = np.argsort(keys.key(kg, start[kv]), kind="stable")
    kv, kg, ks, s_ok = kv[p], kg[p], ks[p], s_ok[p]
    s, e = start[kv], end[kv]
    out: dict[str, np.ndarray] = {}

    def place(values) -> np.ndarray:
        col = np.full(n, np.nan)
        col[kv] = values
        return col

    if memcpy is not None:
        ms, me, mk = m_start[mv], m_end[mv], is_memset[mv]
        copy = ~mk
        count, nbytes = overlaps(keys, kg, s, e, mg[copy], ms[copy], me[copy], m_bytes[mv][copy])
        out["ctx_copy_active"] = place((count > 0).astype(np.float64))
        out["ctx_copy_bytes"] = place(nbytes)
        count, _ = overlaps(keys, kg, s, e, mg[mk], ms[mk], me[mk])
        out["ctx_memset_active"] = place((count > 0).astype(np.float64))

    # other streams = every kernel of the device minus those of the kernel's own stream (itself included in
    # both, or in neither for a zero-length kernel); kernels with an unknown stream are left out of both.
    # `order` (stream, then start) sorts the same-stream queries and finds each kernel's predecessor.
    order = np.argsort(keys.key(ks, s), kind="stable")
    known = np.flatnonzero(s_ok)
    all_streams, _ = overlaps(keys, kg, s, e, kg[known], s[known], e[known])
    same_stream = np.empty_like(all_streams)
    same_stream[order], _ = overlaps(keys, ks[order], s[order], e[order], ks[known], s[known], e[known])
    concurrent = (all_streams - same_stream).astype(np.float64)
    concurrent[~s_ok] = np.nan
    out["ctx_kernels_concurrent"] = place(concurrent)

    # previous kernel of the same stream by start (ties: table order)
    gap = np.full(len(kv), np.nan)
    same = ks[order][1:] == ks[order][:-1]
    gap[order[1:][same]] = (s[order][1:] - e[order][:-1])[same].astype(np.float64)
    gap[~s_ok] = np.nan
    out["ctx_gap_ns"] = place(gap)

    out.update(step_offsets(kernels))
    return out


def _has_timeline(kernels: pd.DataFrame) -> bool:
    """The columns of a timeline, and (unless the table is empty) some start and end times in them."""
    if not {"start", "end", "device_id"} <= set(kernels.columns):
        return False
    return not len(kernels) or bool(kernels["start"].notna().any() and kernels["end"].notna().any())


def step_offsets(kernels: pd.DataFrame) -> dict[str, np.ndarray]:
    """{"ctx_step_offset_ns": ...} (see the module docstring); {} without a `step` column or a timeline. Needs
    no copy: computed apart so that the other columns can be, before call sites give the steps."""
    if "step" not in kernels.columns or not _has_timeline(kernels):
        return {}
    start, _, device, valid = _timed(kernels)
    kv = np.flatnonzero(valid)
    rank = kernels["rank"] if "rank" in kernels.columns else pd.Series(np.full(len(kernels), np.nan))
    group = group_codes(rank.iloc[kv].reset_index(drop=True), device[kv])  # (rank, device)
    step = kernels["step"].iloc[kv].reset_index(drop=True)
    s = start[kv]
    first = pd.Series(s).groupby(group_codes(pd.Series(group), step)).transform("min").to_numpy()
    offset = (s - first).astype(np.float64)
    offset[~step.notna().to_numpy()] = np.nan
    col = np.full(len(kernels), np.nan)
    col[kv] = offset
    return {"ctx_step_offset_ns": col}


KERNEL_INPUTS = ("start", "end", "device_id", "stream_id", "rank", "step")
COPY_INPUTS = ("start", "end", "device_id", "stream_id", "rank", "bytes", "copy_kind_name")


def context_arrays(kernels, memcpy) -> dict:
    """The context columns of the canonical Arrow tables but ctx_step_offset_ns (step_offset_arrays: it needs the
    steps, which call sites add), as Arrow float64 arrays (NaN written as null)."""
    copies = input_frame(memcpy, COPY_INPUTS) if memcpy is not None else None
    return arrow_floats(context_columns(input_frame(kernels, [c for c in KERNEL_INPUTS if c != "step"]), copies))


def step_offset_arrays(kernels) -> dict:
    """ctx_step_offset_ns of the canonical Arrow kernels table, as context_arrays gives it."""
    return arrow_floats(step_offsets(input_frame(kernels, ("start", "end", "device_id", "rank", "step"))))


def input_frame(table, names) -> pd.DataFrame:
    """The columns of a canonical Arrow table the sweeps read (those it has), as pandas."""
    return table.select([c for c in names if c in table.column_names]).to_pandas()


def arrow_floats(columns: dict) -> dict:
    """Computed columns as Arrow float64 arrays, NaN written as null."""
    import pyarrow as pa

    return {name: pa.array(values, type=pa.float64(), from_pandas=True) for name, values in columns.items()}


def append_context(kernels, arrays: dict):
    """The kernels Arrow table with the context columns set, in COLUMNS order (appended where new)."""
    for name in (c for c in COLUMNS if c in arrays):
        if name in kernels.column_names:
            kernels = kernels.set_column(kernels.column_names.index(name), name, arrays[name])
        else:
            kernels = kernels.append_column(name, arrays[name])
    return kernels
