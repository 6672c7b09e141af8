"""Reading a binning rank's share of the kernels file in bounded batches, and phase 1 of the job (the scan).

The share is a contiguous, row-balanced run of Parquet row groups (gpuvar.binning.partition). Every pass over it
decodes BATCH_ROWS rows at a time (pyarrow iter_batches, only the columns that pass needs, no decode threads: one
core per rank), so what a rank holds is bounded by a batch and per-bin or per-group summaries, never by its share
(issue 38: 20 M rows held whole were ~150 bytes each, 3 GB in one process). `decode` turns one batch into numpy
columns the same way in every pass (which rows have an axis value, a duration and a kernel name, the group codes),
so the passes agree row for row.

The scan (phase 1) reads only the axis, duration, kernel name and group columns: exact integer duration sums per
group (for the means), the axis span and whether the share is ordered (the sorted path of the later phases), each
row group's axis span (which row groups hold a window: the top-k rows pass), the start-time span (the copy link),
and which rows cannot have a target (counted by reason).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpuvar import targets as T
from gpuvar.binning.columns import floats, group_codes, ints, open_parquet
from gpuvar.binning.partition import row_groups_for_rank
from gpuvar.binning.plan import DICTIONARY_COLUMNS, LINKED, Plan
from gpuvar.errors import InputError

BATCH_ROWS = 1 << 18  # rows decoded at once (a canonical row group): a rank holds about this many rows per pass
NULL = np.iinfo(np.int64).min  # kernel start of a row without one (link phase)
CHUNK = 1 << 22  # rows per vectorised step where a full-size temporary would raise the memory peak
LO, HI = np.iinfo(np.int64).max, np.iinfo(np.int64).min  # the span of no values


@dataclass(frozen=True)
class Batch:
    """One batch of a share's rows, decoded (every array one value per row)."""

    group: int  # the row group it comes from (numbered over every file)
    table: pa.Table  # the columns as read (the rows pass takes its output columns from here)
    axis: np.ndarray  # int64 start or launch_id (0 where null)
    axis_valid: np.ndarray | None  # None: no null
    dur: np.ndarray  # int64 duration (0 where null)
    duration: np.ndarray  # the same as float64 (the target's input)
    codes: np.ndarray  # int32 group code (the rank's index)
    ok: np.ndarray  # the row has an axis value, a duration and a kernel name
    reasons: Counter  # rows without ok in this batch, by reason
    kstart: np.ndarray | None  # link keys (with a memcpy file): kernel start, NULL where none
    kkey: np.ndarray | None  # device(+stream) key, targets.NO_KEY where no start
    features: dict[str, np.ndarray]  # float64 feature columns read from the file (NaN for nulls)

    def take(self, rows: np.ndarray) -> Batch:
        """These rows only (without the table)."""

        def pick(a):
            return None if a is None else a[rows]

        return Batch(
            self.group,
            None,
            self.axis[rows],
            pick(self.axis_valid),
            self.dur[rows],
            self.duration[rows],
            self.codes[rows],
            self.ok[rows],
            Counter(),
            pick(self.kstart),
            pick(self.kkey),
            {f: v[rows] for f, v in self.features.items()},
        )


def open_kernels(plan: Plan):
    """The kernels file(s), the dictionary columns read as Arrow dictionaries (one string decode per value)."""
    return open_parquet(plan.opts.kernels, read_dictionary=[c for c in DICTIONARY_COLUMNS if c in plan.schema.names])


def share_groups(pf, rank: int, size: int) -> list[int]:
    """Rank `rank` of `size`'s row groups."""
    md = pf.metadata
    return row_groups_for_rank([md.row_group(g).num_rows for g in range(md.num_row_groups)], rank, size)


def scan_columns(plan: Plan) -> list[str]:
    """What the scan decodes: the target's inputs and the axis (and the kernel start, to link copies)."""
    need = [plan.axis, "duration", "kernel_name"]
    if plan.opts.group != "kernel":
        need.append(T.GROUP_COLUMN[plan.opts.group])
    if plan.link:
        need.append("start")
    return list(dict.fromkeys(need))


def link_columns(plan: Plan) -> list[str]:
    """The kernel columns of the copy link."""
    if not plan.link:
        return []
    return ["start", "device_id"] + (["stream_id"] if plan.opts.link == "stream" else [])


def batches(
    plan: Plan,
    pf,
    groups,
    index: dict[str, int],
    columns: list[str],
    *,
    features: bool = False,
    rows: int | None = None,
) -> Iterator[Batch]:
    """The given row groups decoded `rows` (default BATCH_ROWS) at a time, in file order; `index` (group key ->
    code) grows with the keys met. features: also decode plan.features (those the file holds)."""
    step = max(1, int(rows or BATCH_ROWS))
    for g in groups:
        try:
            parts = pf.iter_batches(batch_size=step, row_groups=[g], columns=list(columns), use_threads=False)
            for rb in parts:
                yield decode(plan, g, pa.Table.from_batches([rb]), index, features)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(plan.opts.kernels, f"row group {g} unreadable ({exc})") from None


def decode(plan: Plan, group: int, t: pa.Table, index: dict[str, int], features: bool = False) -> Batch:
    """One batch as numpy columns; rows without an axis value, a duration or a kernel name are not ok (counted
    in that order, each row under its first reason)."""
    n = t.num_rows
    ok = np.ones(n, bool)
    reasons: Counter = Counter()
    axis, valid = ints(t.column(plan.axis))
    if valid is not None:
        drop(reasons, ok, ~valid, "no start timestamp" if plan.axis == "start" else "no launch_id")
    dur, dvalid = ints(t.column("duration"))
    if dvalid is not None:
        drop(reasons, ok, ~dvalid, "no duration")
    codes, nvalid = group_codes(t, plan.opts.group, index)
    if nvalid is not None:
        drop(reasons, ok, ~nvalid, "no kernel_name")
    kstart = kkey = None
    names = t.column_names
    if plan.link and "start" in names:
        start, svalid = ints(t.column("start"))
        kstart = start if svalid is None else np.where(svalid, start, NULL)
        if "device_id" in names:
            dev = floats(t.column("device_id"))
            stream = floats(t.column("stream_id")) if plan.opts.link == "stream" else None
            key = T.link_key(dev, stream, plan.opts.link)
            kkey = key if svalid is None else np.where(svalid, key, T.NO_KEY)
    duration = dur.astype(np.float64)
    feats = {}
    if features:
        # the duration feature is the duration read (a row with a null duration has no target, so its feature
        # value never enters a statistic)
        integer = pa.types.is_integer(plan.schema.field("duration").type)
        for f in plan.features:
            if f not in LINKED:
                feats[f] = duration if f == "duration" and integer else floats(t.column(f))
    return Batch(group, t, axis, valid, dur, duration, codes, ok, reasons, kstart, kkey, feats)


@dataclass(frozen=True)
class Scan:
    """What phase 1 learnt of this rank's share; the later passes read the share again, batch by batch."""

    row_groups: tuple[int, ...]  # the share's row groups, in file order
    group_rows: tuple[int, ...]  # rows of each
    rows: int  # rows in the share
    reasons: dict[str, int]  # rows without an axis value, duration or kernel name, by reason
    axis_lo: int  # min / max of the axis over every row with one (LO, HI when none)
    axis_hi: int
    ordered: bool  # axis non-decreasing over the share and never null: the sorted path
    spans: tuple[tuple[int, int], ...]  # per row group: (min, max) of its axis values (LO, HI when none)
    group_ordered: tuple[bool, ...]  # per row group: its axis is non-decreasing and never null
    index: dict[str, int]  # group key -> code (rank-local)
    totals: dict[str, tuple[int, int]]  # group key -> exact (duration sum, count) over the ok rows
    start_lo: int | None  # with a memcpy file: min / max kernel start of the share (None: no start)
    start_hi: int | None
    starts_ordered: bool  # the kernel starts (where present) are non-decreasing over the share
    start_spans: tuple[tuple[int, int], ...]  # per row group: (min, max) kernel start (LO, HI when none)
    largest_batch: int  # the most rows decoded at once

    @property
    def ok_rows(self) -> int:
        return self.rows - sum(self.reasons.values())


def scan_share(plan: Plan, rank: int, size: int, keep=None) -> Scan:
    """Phase 1: read rank `rank` of `size`'s row groups once (no collective). `keep(batch, ordered, groups)`, if
    given, is handed every batch, whether the share is still in axis order and the group codes so far
    (gpuvar.binning.kept.Kept.add: what the bins pass needs of it)."""
    pf = open_kernels(plan)
    groups = share_groups(pf, rank, size)
    md = pf.metadata
    group_rows = tuple(md.row_group(g).num_rows for g in groups)
    index: dict[str, int] = {}
    reasons: Counter = Counter()
    sums, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi, ordered, prev = LO, HI, True, None
    slo, shi, sordered, sprev = LO, HI, True, None
    spans: dict[int, tuple[int, int]] = {g: (LO, HI) for g in groups}
    group_ordered: dict[int, bool] = {}
    largest = 0
    start_spans: dict[int, tuple[int, int]] = {g: (LO, HI) for g in groups}
    for b in batches(plan, pf, groups, index, scan_columns(plan)):
        largest = max(largest, len(b.axis))
        after = prev if b.group in group_ordered else None  # the group's previous value
        blo, bhi, in_order = _span(b.axis, b.axis_valid, after, group_ordered.get(b.group, True))
        group_ordered[b.group] = in_order
        ordered = ordered and in_order and (prev is None or not len(b.axis) or int(b.axis[0]) >= prev)
        if len(b.axis):
            prev = int(b.axis[-1])
        if keep is not None:
            keep(b, ordered, len(index))
        lo, hi = min(lo, blo), max(hi, bhi)  # the timeline spans every kernel, with a target or not
        g0, g1 = spans[b.group]
        spans[b.group] = (min(g0, blo), max(g1, bhi))
        reasons.update(b.reasons)
        ok = b.ok
        if ok.all():
            sums, counts = _add_group_sums(sums, counts, b.codes, b.dur, b.duration, len(index))
        else:
            sums, counts = _add_group_sums(sums, counts, b.codes[ok], b.dur[ok], b.duration[ok], len(index))
        if b.kstart is not None:
            has = b.kstart != NULL
            starts = b.kstart if has.all() else b.kstart[has]
            if len(starts):
                sordered = (
                    sordered and bool((starts[1:] >= starts[:-1]).all()) and (sprev is None or starts[0] >= sprev)
                )
                sprev = int(starts[-1])
                s0, s1 = int(starts.min()), int(starts.max())
                slo, shi = min(slo, s0), max(shi, s1)
                a, z = start_spans[b.group]
                start_spans[b.group] = (min(a, s0), max(z, s1))
    totals = {key: (int(sums[code]), int(counts[code])) for key, code in index.items()}
    has_start = plan.link and slo <= shi
    return Scan(
        tuple(groups),
        group_rows,
        int(sum(group_rows)),
        dict(reasons),
        lo,
        hi,
        ordered,
        tuple(spans[g] for g in groups),
        tuple(group_ordered.get(g, True) for g in groups),
        index,
        totals,
        slo if has_start else None,
        shi if has_start else None,
        sordered,
        tuple(start_spans[g] for g in groups),
        largest,
    )


def _span(v: np.ndarray, valid: np.ndarray | None, prev: int | None, ordered: bool) -> tuple[int, int, bool]:
    """(min, max) of one batch's axis values (LO, HI when none) and whether the share is still ordered
    (non-decreasing, no null) with it; prev: the share's previous axis value (None before the first)."""
    if valid is None and len(v):
        if ordered and bool((v[1:] >= v[:-1]).all()) and (prev is None or v[0] >= prev):
            return int(v[0]), int(v[-1]), True
        return int(v.min()), int(v.max()), False
    lo, hi = _masked_min_max(v, valid if valid is not None else np.ones(len(v), bool))
    return lo, hi, ordered and not len(v)


def drop(reasons: Counter, ok: np.ndarray, bad: np.ndarray, reason: str) -> None:
    """Clear `ok` (the caller's own array, being built) where `bad`, counting the newly dropped rows."""
    newly = bad & ok
    k = int(newly.sum())
    if k:
        reasons[reason] += k
        ok &= ~newly


def _add_group_sums(
    sums: np.ndarray, counts: np.ndarray, codes: np.ndarray, dur: np.ndarray, fdur: np.ndarray, n_codes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact integer sum and count of one batch's durations per group code added to the int64 accumulators.

    float64 bincount is exact while every partial sum stays below 2**53 (durations are whole ns, and a
    batch is 256 Ki rows); otherwise the batch's int64 durations are summed per code after a sort.
    fdur: the same durations as float64 (the weights bincount wants)."""
    if len(sums) < n_codes:
        sums = np.concatenate([sums, np.zeros(n_codes - len(sums), np.int64)])
        counts = np.concatenate([counts, np.zeros(n_codes - len(counts), np.int64)])
    if not len(dur):
        return sums, counts
    codes = codes.astype(np.intp, copy=False)  # what bincount works on: convert once, not per call
    counts[:n_codes] += np.bincount(codes, minlength=n_codes)
    if max(-int(dur.min()), int(dur.max())) * len(dur) < 2**53:
        sums[:n_codes] += np.bincount(codes, weights=fdur, minlength=n_codes).astype(np.int64)
        return sums, counts
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    firsts = np.flatnonzero(np.diff(sorted_codes, prepend=-1))
    sums[sorted_codes[firsts]] += np.add.reduceat(dur[order], firsts)
    return sums, counts


def _masked_min_max(a: np.ndarray, ok: np.ndarray) -> tuple[int, int]:
    """min and max of a[ok], chunk by chunk (LO, HI when nothing is ok)."""
    lo, hi = LO, HI
    for i in range(0, len(a), CHUNK):
        c, m = a[i : i + CHUNK], ok[i : i + CHUNK]
        if not m.all():
            c = c[m]
        if len(c):
            lo, hi = min(lo, int(c.min())), max(hi, int(c.max()))
    return lo, hi
