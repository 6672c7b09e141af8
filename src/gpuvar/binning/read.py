"""Phase 1 of the binning job: read this rank's share of the kernels file.

The share is a contiguous, row-balanced run of Parquet row groups; only the needed columns are decoded, one
row group at a time into preallocated arrays (no decode threads: one core per rank). On the way: exact integer
duration sums per group (for the means), whether the axis is non-decreasing and never null (the sorted path of
the later phases), and which rows cannot have a target (counted by reason).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpuvar import targets as T
from gpuvar.binning.columns import floats, group_codes, ints, open_parquet
from gpuvar.binning.partition import row_groups_for_rank
from gpuvar.binning.plan import DICTIONARY_COLUMNS, LINKED, Plan
from gpuvar.errors import InputError

NULL = np.iinfo(np.int64).min  # kernel start of a row without one (link phase)
CHUNK = 1 << 22  # rows per vectorised step where a full-size temporary would raise the memory peak


@dataclass(frozen=True)
class Share:
    """This rank's rows as read (its row groups, in file order)."""

    row_groups: tuple[int, ...]
    offsets: np.ndarray  # local index of each row group's first row, plus the total
    ok: np.ndarray  # the row has an axis value, a duration and a kernel name
    reasons: dict[str, int]  # rows without ok, by reason
    axis: np.ndarray  # int64 start or launch_id (0 where null)
    axis_lo: int  # min / max of the axis over every row with one (extreme sentinels when none)
    axis_hi: int
    ordered: bool  # axis non-decreasing over the share and never null: the sorted fast path
    duration: np.ndarray  # float64
    codes: np.ndarray  # int32 group code per row (rank-local, see index)
    index: dict[str, int]  # group key -> code
    totals: dict[str, tuple[int, int]]  # group key -> exact (duration sum, count) over the ok rows
    kstart: np.ndarray | None  # link keys (only with a memcpy file): kernel start (NULL where none)
    kkey: np.ndarray | None  # device(+stream) key (targets.NO_KEY where no start)
    features: dict[str, np.ndarray]  # float64 feature columns read from the file (NaN for nulls; see `shared`)


def read_share(plan: Plan, rank: int, size: int) -> Share:
    """Read rank `rank` of `size`'s row groups (no collective)."""
    pf = open_parquet(plan.opts.kernels, read_dictionary=[c for c in DICTIONARY_COLUMNS if c in plan.schema.names])
    md = pf.metadata
    rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    groups = row_groups_for_rank(rows, rank, size)
    offsets = np.cumsum([0, *[rows[g] for g in groups]])
    n = int(offsets[-1])
    ok = np.ones(n, bool)
    axis = np.empty(n, np.int64)
    duration = np.empty(n, np.float64)
    codes = np.empty(n, np.int32)
    kstart = (axis if plan.axis == "start" else np.empty(n, np.int64)) if plan.link else None
    kkey = np.empty(n, np.int64) if plan.link else None
    # the duration feature (the default) is the duration array itself where the file stores whole ns: the same
    # values (a row with a null duration has no target, so its feature value never enters a statistic)
    shared = "duration" in plan.features and pa.types.is_integer(plan.schema.field("duration").type)
    features = {
        f: duration if f == "duration" and shared else np.empty(n, np.float64) for f in plan.features if f not in LINKED
    }
    index: dict[str, int] = {}
    reasons: Counter = Counter()
    sums, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    lo, hi, ordered = np.iinfo(np.int64).max, np.iinfo(np.int64).min, True
    for i, g in enumerate(groups):
        a, b = int(offsets[i]), int(offsets[i + 1])
        try:  # one core per rank: Arrow's decode threads would only contend with the other ranks
            t = pf.read_row_group(g, columns=list(plan.columns), use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(plan.opts.kernels, f"row group {g} unreadable ({exc})") from None
        part_ok = ok[a:b]
        v, valid = ints(t.column(plan.axis))
        axis[a:b] = v
        glo, ghi, ordered = _span(v, valid, int(axis[a - 1]) if a else None, ordered)
        lo, hi = min(lo, glo), max(hi, ghi)  # the timeline spans every kernel, with a target or not
        if valid is not None:
            drop(reasons, part_ok, ~valid, "no start timestamp" if plan.axis == "start" else "no launch_id")
        dur, dvalid = ints(t.column("duration"))
        duration[a:b] = dur
        if dvalid is not None:
            drop(reasons, part_ok, ~dvalid, "no duration")
        c, nvalid = group_codes(t, plan.opts.group, index)
        codes[a:b] = c
        if nvalid is not None:
            drop(reasons, part_ok, ~nvalid, "no kernel_name")
        if part_ok.all():
            sums, counts = _add_group_sums(sums, counts, c, dur, duration[a:b], len(index))
        else:
            sums, counts = _add_group_sums(sums, counts, c[part_ok], dur[part_ok], duration[a:b][part_ok], len(index))
        if plan.link:
            start, svalid = ints(t.column("start"))
            kstart[a:b] = start if svalid is None else np.where(svalid, start, NULL)
            dev = floats(t.column("device_id"))
            stream = floats(t.column("stream_id")) if plan.opts.link == "stream" else None
            key = T.link_key(dev, stream, plan.opts.link)
            kkey[a:b] = key if svalid is None else np.where(svalid, key, T.NO_KEY)
        for f, arr in features.items():
            if arr is not duration:
                arr[a:b] = floats(t.column(f))
    totals = {key: (int(sums[code]), int(counts[code])) for key, code in index.items()}
    return Share(
        tuple(groups),
        offsets,
        ok,
        dict(reasons),
        axis,
        lo,
        hi,
        ordered,
        duration,
        codes,
        index,
        totals,
        kstart,
        kkey,
        features,
    )


def _span(v: np.ndarray, valid: np.ndarray | None, prev: int | None, ordered: bool) -> tuple[int, int, bool]:
    """(min, max) of one row group's axis values (extreme sentinels when none) and whether the share is still
    ordered (non-decreasing, no null) with it; prev: the share's previous axis value (None before the first)."""
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
    """Exact integer sum and count of one row group's durations per group code added to the int64 accumulators.

    float64 bincount is exact while every partial sum stays below 2**53 (durations are whole ns, and a
    row group is 256 Ki rows); otherwise the group's int64 durations are summed per code after a sort.
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
    """min and max of a[ok], chunk by chunk (extreme sentinels when nothing is ok)."""
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for i in range(0, len(a), CHUNK):
        c, m = a[i : i + CHUNK], ok[i : i + CHUNK]
        if not m.all():
            c = c[m]
        if len(c):
            lo, hi = min(lo, int(c.min())), max(hi, int(c.max()))
    return lo, hi
