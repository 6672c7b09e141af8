"""Phase 4a of the binning job: the global timeline, and the bin of each row of a batch.

An allgather of each share's axis span gives the timeline; bin = (axis - global min) // width. Bins start at
the first kernel of the trace, not the first with a target, so the bins of kernel_variability and memory_stall
of one trace are the same windows. Sorted file (the canonical layout: every share ordered and the shares in rank
order): a batch's bins are (id, first row) runs found by binary search of the bin edges, and a bin belongs to the
lowest rank holding rows of it. Otherwise (a file not sorted by start, several files, null start times) every row
of a batch gets its bin id (gpuvar.binning.spill).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from gpuvar.binning.columns import ints
from gpuvar.binning.partition import MAX_BINS, check_bins
from gpuvar.binning.plan import Collective, Plan
from gpuvar.binning.read import Scan, open_kernels
from gpuvar.binning.stats import bin_starts
from gpuvar.errors import GpuvarError


@dataclass(frozen=True)
class Timeline:
    """The bins of the whole trace, as every rank agreed on them."""

    gmin: int  # axis value where bin 0 starts
    n_bins: int  # bins over the whole timeline (0: no row has an axis value)
    fast: bool  # the sorted path
    runs: tuple[tuple[int, int] | None, ...]  # per rank: its first and last bin (None: no row), sorted path

    def owner_of_first(self, rank: int) -> int:
        """Sorted path: the rank that owns `rank`'s first bin (the lowest rank holding rows of it)."""
        runs = self.runs
        return min(q for q in range(rank + 1) if runs[q] is not None and runs[q][1] >= runs[rank][0])

    def given_bin(self, rank: int) -> int | None:
        """Sorted path: this rank's first bin when a lower rank owns it (its rows move there), else None."""
        if self.runs[rank] is None or self.owner_of_first(rank) == rank:
            return None
        return self.runs[rank][0]


def make_timeline(plan: Plan, comm, scan: Scan) -> Timeline:
    """The timeline from every share's axis span (collective)."""
    spans = comm.allgather((scan.axis_lo, scan.axis_hi, scan.ordered, scan.rows))
    gmin = min(lo for lo, _, _, _ in spans)
    gmax = max(hi for _, hi, _, _ in spans)
    held = [(lo, hi) for lo, hi, _, n in spans if n]
    fast = all(o for _, _, o, _ in spans) and all(a[1] <= b[0] for a, b in pairwise(held))
    if gmin > gmax:
        n_bins = 0
    else:
        n_bins = (gmax - gmin) // plan.width + 1
        if n_bins > MAX_BINS:  # (every rank: the spans are agreed) a wider bin would not help two clocks
            _refuse_two_clocks(comm, plan, scan, gmin, gmax)
        try:
            check_bins(n_bins, plan.width, plan.unit)
        except GpuvarError as exc:
            raise Collective(str(exc)) from None
    runs = tuple(
        ((lo - gmin) // plan.width, (hi - gmin) // plan.width) if n and lo <= hi else None for lo, hi, _, n in spans
    )
    return Timeline(gmin, n_bins, fast, runs)


def bin_runs(axis: np.ndarray, gmin: int, width: int) -> tuple[np.ndarray, np.ndarray]:
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


MIXED_CLOCKS_GAP = 0.9  # an empty stretch this share of the whole span: two clusters of times, not one run


def _batch_gaps(plan: Plan, scan: Scan) -> list[tuple[int, int, int, int, int]]:
    """Per batch of this share: (min, max, longest stretch between consecutive times, its from, its to) of the
    axis values; a batch at a time (a second read of the axis, on this error path only)."""
    from gpuvar.binning import read

    pf = open_kernels(plan)
    out = []
    for g in scan.row_groups:
        for rb in pf.iter_batches(batch_size=read.BATCH_ROWS, row_groups=[g], columns=[plan.axis], use_threads=False):
            v, valid = ints(rb.column(0))
            if valid is not None:
                v = v[valid]
            if not len(v):
                continue
            v = np.sort(v)
            gap, f, t = 0, int(v[0]), int(v[0])
            if len(v) > 1:
                gaps = np.diff(v)
                i = int(np.argmax(gaps))
                gap, f, t = int(gaps[i]), int(v[i]), int(v[i + 1])
            out.append((int(v[0]), int(v[-1]), gap, f, t))
    return out


def largest_gap(batches: list[tuple[int, int, int, int, int]]) -> tuple[int, int, int]:
    """(length, from, to) of the longest stretch without a time, from every batch's (min, max, gap, from, to):
    exact between batches whose spans do not overlap and inside a batch no other batch's span reaches into
    (the canonical, sorted layout: every gap); elsewhere a gap is not counted. (0, 0, 0) if none."""
    if not batches:
        return 0, 0, 0
    lo = np.array([b[0] for b in batches], dtype=np.int64)
    hi = np.array([b[1] for b in batches], dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    best = (0, 0, 0)
    reach = int(hi[order[0]])
    for i in order[1:].tolist():
        if lo[i] > reach:
            best = max(best, (int(lo[i]) - reach, reach, int(lo[i])))
        reach = max(reach, int(hi[i]))
    for gap, f, t in sorted(((b[2], b[3], b[4]) for b in batches), reverse=True):
        if gap <= best[0]:
            break
        if int(((lo < t) & (hi > f)).sum()) == 1:  # only its own batch spans the stretch
            best = (gap, f, t)
            break
    return best


def _refuse_two_clocks(comm, plan: Plan, scan: Scan, gmin: int, gmax: int) -> None:
    """Too many bins because the times form two clusters far apart (timestamps from two clock domains: ranks or
    devices recorded against different clocks, one trace in ns since boot and one in epoch ns): say so, where
    'use a wider bin' would mislead (a bin wide enough would put the whole run in a bin or two)."""
    every = [b for part in comm.allgather(_batch_gaps(plan, scan)) for b in part]
    length, start, end = largest_gap(every)
    if length < MIXED_CLOCKS_GAP * (gmax - gmin):
        return
    scale = 1e9 if plan.unit == "ns" else 1
    unit = "s" if plan.unit == "ns" else "launches"
    raise Collective(
        f"the start times form two clusters {length / scale:.4g} {unit} apart (nothing from {start} to {end}, "
        f"{100 * length / (gmax - gmin):.1f} % of the span): timestamps from two clock domains (ranks or devices "
        "recorded against different clocks?); bin the runs apart, or align their clocks"
    )
