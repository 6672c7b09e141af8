"""Phase 4a of the binning job: the global timeline and each row's bin.

An allgather of each share's axis span gives the timeline; bin = (axis - global min) // width. Bins start at
the first kernel of the trace, not the first with a target, so the bins of kernel_variability and memory_stall
of one trace are the same windows. Sorted file (the canonical layout: every share ordered and the shares in rank
order): bins are kept as (id, first row) runs found by binary search, no per-row bin id. Otherwise (a file not
sorted by start, null start times) every row gets its bin id (-1: no target).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from gpuvar.binning.partition import MAX_BINS, check_bins
from gpuvar.binning.plan import Collective, Plan
from gpuvar.binning.read import CHUNK, Share
from gpuvar.binning.stats import bin_starts
from gpuvar.errors import GpuvarError


@dataclass(frozen=True)
class Bins:
    """This share's rows cut into bins of the global timeline."""

    gmin: int  # axis value where bin 0 starts
    n_bins: int  # bins over the whole timeline (0: no row has an axis value)
    fast: bool  # the sorted path: ids/starts are set; otherwise rows is
    ids: np.ndarray | None  # sorted path: each non-empty bin's id (rows with and without a target)
    starts: np.ndarray | None  # sorted path: index of each one's first row
    rows: np.ndarray | None  # general path: bin id per row, -1 for a row without a target


def assign_bins(plan: Plan, comm, share: Share, ok: np.ndarray) -> Bins:
    """The bins of this share's rows; `ok`: which rows have a target (collective)."""
    spans = comm.allgather((share.axis_lo, share.axis_hi, share.ordered, len(share.axis)))
    gmin = min(lo for lo, _, _, _ in spans)
    gmax = max(hi for _, hi, _, _ in spans)
    held = [(lo, hi) for lo, hi, _, n in spans if n]
    fast = all(o for _, _, o, _ in spans) and all(a[1] <= b[0] for a, b in pairwise(held))
    if gmin > gmax:
        n_bins = 0
    else:
        n_bins = (gmax - gmin) // plan.width + 1
        if n_bins > MAX_BINS:  # (every rank: the spans are agreed) a wider bin would not help two clocks
            _refuse_two_clocks(comm, share, spans, gmin, gmax, plan)
        try:
            check_bins(n_bins, plan.width, plan.unit)
        except GpuvarError as exc:
            raise Collective(str(exc)) from None
    if fast:  # bins as (id, first row) runs: no per-row bin array, no exchange beyond boundary bins
        ids, starts = _runs(share.axis, gmin, plan.width)
        return Bins(gmin, n_bins, True, ids, starts, None)
    axis = share.axis
    rows = np.full(len(axis), -1, dtype=np.int32 if n_bins < 2**31 else np.int64)
    for a in range(0, len(axis), CHUNK):  # chunked: no full-size temporaries
        sl = slice(a, a + CHUNK)
        b = (axis[sl] - gmin) // plan.width
        rows[sl] = np.where(ok[sl], b, -1)
    return Bins(gmin, n_bins, False, None, None, rows)


MIXED_CLOCKS_GAP = 0.9  # an empty stretch this share of the whole span: two clusters of times, not one run


def _largest_gap(axis: np.ndarray) -> tuple[int, int, int]:
    """(length, from, to) of the longest stretch between consecutive times of this share; (0, 0, 0) if none."""
    values = np.sort(axis)
    if len(values) < 2:
        return 0, 0, 0
    gaps = np.diff(values)
    i = int(np.argmax(gaps))
    return int(gaps[i]), int(values[i]), int(values[i + 1])


def _refuse_two_clocks(comm, share: Share, spans: list, gmin: int, gmax: int, plan: Plan) -> None:
    """Too many bins because the times form two clusters far apart (timestamps from two clock domains: ranks or
    devices recorded against different clocks, one trace in ns since boot and one in epoch ns): say so, where
    'use a wider bin' would mislead (a bin wide enough would put the whole run in a bin or two)."""
    axis = share.axis  # (0 where a row has no time: only values within the share's span count)
    gaps = comm.allgather(_largest_gap(axis[(axis >= share.axis_lo) & (axis <= share.axis_hi)]))
    held = sorted((lo, hi) for lo, hi, _, n in spans if n)
    gaps += [(b[0] - a[1], a[1], b[0]) for a, b in pairwise(held) if b[0] > a[1]]  # between shares
    length, start, end = max(gaps)
    if length < MIXED_CLOCKS_GAP * (gmax - gmin):
        return
    scale = 1e9 if plan.unit == "ns" else 1
    unit = "s" if plan.unit == "ns" else "launches"
    raise Collective(
        f"the start times form two clusters {length / scale:.4g} {unit} apart (nothing from {start} to {end}, "
        f"{100 * length / (gmax - gmin):.1f} % of the span): timestamps from two clock domains (ranks or devices "
        "recorded against different clocks?); bin the runs apart, or align their clocks"
    )


def _runs(axis: np.ndarray, gmin: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(id, index of the first row) of each non-empty bin of a non-decreasing axis: bin edges found by
    binary search (O(bins log rows)) instead of a division per row."""
    n = len(axis)
    if not n:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    b0, b1 = (int(axis[0]) - gmin) // width, (int(axis[-1]) - gmin) // width
    if b1 - b0 >= n:  # more bins than rows: a division per row is cheaper
        return bin_starts((axis - gmin) // width)
    edges = gmin + np.arange(b0 + 1, b1 + 1, dtype=np.int64) * width
    starts = np.concatenate(([0], np.searchsorted(axis, edges, side="left"))).astype(np.int64)
    nonempty = np.diff(np.append(starts, n)) > 0
    return np.arange(b0, b1 + 1, dtype=np.int64)[nonempty], starts[nonempty]
