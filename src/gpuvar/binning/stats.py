"""Per-bin statistics on rows already ordered by bin id (the canonical file is sorted by start).

count, min, max, mean, var, std, q25, median, q75. var is the SAMPLE variance (ddof=1, pandas' default; NaN
for a one-row bin), computed in two passes (mean first, then the sum of squared deviations) so it matches a
pandas reference to ~1e-15 relative even when the mean is large. Quantiles use linear interpolation (numpy's
and pandas' default, DuckDB's quantile_cont): bins are gathered into 2-D blocks of equal row count and
sorted row-wise, so the cost is a few vectorised calls per distinct bin size, not a Python loop per bin.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

STATS = ("count", "min", "max", "mean", "var", "std", "q25", "median", "q75")
QUANTILES = (("q25", 0.25), ("median", 0.5), ("q75", 0.75))
CHUNK_ROWS = 1 << 19  # rows per statistics task: its temporaries (4 MiB) stay below glibc's mmap threshold, so
# the heap reuses them (a fresh 32 MiB mmap per task was faulted in again each time; on the shared VM, slowly)
_BLOCK_ELEMENTS = 1 << 19  # rows x columns gathered at once for the quantiles (4 MiB: reused, as above)


def bin_starts(bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct bin ids, index of each one's first row) for a non-decreasing bin id array."""
    if len(bins) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    starts = np.concatenate(([0], np.flatnonzero(np.diff(bins)) + 1))
    return bins[starts], starts


def _quantiles(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    out = {name: np.empty(len(counts)) for name, _ in QUANTILES}
    for c in np.unique(counts).tolist():
        which = np.flatnonzero(counts == c)
        pos = [(q * (c - 1)) for _, q in QUANTILES]
        lo = [int(np.floor(p)) for p in pos]
        step = max(1, _BLOCK_ELEMENTS // c)
        for a in range(0, len(which), step):
            sel = which[a : a + step]
            block = sliding_window_view(values, c)[starts[sel]]  # a copy, without an index array per element
            block.sort(axis=1)  # row-wise SIMD sort: ~3x faster than partition with 6 kth here
            for (name, _), p, low in zip(QUANTILES, pos, lo):
                x0 = block[:, low]
                x1 = block[:, min(low + 1, c - 1)]
                out[name][sel] = x0 + (p - low) * (x1 - x0)
    return out


def bin_stats(values: np.ndarray, bins: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics per distinct bin of float64 `values` grouped by non-decreasing `bins` (NaN rows excluded).

    Returns {'bin': ids, 'count': ..., 'min': ..., ...} for every bin holding at least one non-NaN value.
    """
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    if not keep.all():
        values, bins = values[keep], bins[keep]
    ids, starts = bin_starts(bins)
    return _stats_at(values, ids, starts)


def _stats_at(values: np.ndarray, ids: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of NaN-free `values` whose bin `ids[i]` holds rows starts[i] .. starts[i+1] (or the end)."""
    if len(ids) == 0:
        return {"bin": ids, **{s: np.empty(0, np.int64 if s == "count" else np.float64) for s in STATS}}
    counts = np.diff(np.append(starts, len(values)))
    mean = np.add.reduceat(values, starts) / counts
    dev = np.repeat(mean, counts)  # one temporary, reused for the deviations and their squares
    np.subtract(values, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    ss = np.add.reduceat(dev, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(counts > 1, ss / (counts - 1), np.nan)
    out = {
        "bin": ids,
        "count": counts.astype(np.int64),
        "min": np.minimum.reduceat(values, starts),
        "max": np.maximum.reduceat(values, starts),
        "mean": mean,
        "var": var,
        "std": np.sqrt(var),
    }
    out.update(_quantiles(values, starts, counts))
    return out


def split_at_bins(bins: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous row ranges, about equal in rows, that never cut a bin (for the per-rank worker pool)."""
    n = len(bins)
    cuts = [0]
    for i in range(1, parts):
        j = int(np.searchsorted(bins, bins[min(n * i // parts, n - 1)], side="left")) if n else 0
        cuts.append(max(j, cuts[-1]))
    cuts.append(n)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def bin_stats_parallel(values: np.ndarray, bins: np.ndarray, workers: int) -> dict[str, np.ndarray]:
    """bin_stats on bin-aligned row ranges (at most CHUNK_ROWS each, on `workers` threads); same result for any split."""
    parts_wanted = max(1, workers, -(-len(bins) // CHUNK_ROWS))
    ranges = split_at_bins(bins, parts_wanted)
    if len(ranges) <= 1:
        return bin_stats(values, bins)

    def one(r):
        return bin_stats(values[r[0] : r[1]], bins[r[0] : r[1]])

    if workers <= 1:
        parts = [one(r) for r in ranges]
    else:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(one, ranges))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def bin_stats_at(values: np.ndarray, ids: np.ndarray, starts: np.ndarray, workers: int = 1) -> dict[str, np.ndarray]:
    """bin_stats for rows already cut into bins: bin ids[i] is values[starts[i]:starts[i+1]] (the last runs to
    the end; starts[0] == 0), every bin non-empty. No per-row bin id array is needed; NaN rows are removed
    like bin_stats does (through it). Same result as bin_stats for any split (bins are never cut)."""
    values = np.asarray(values, dtype=np.float64)
    ids = np.asarray(ids, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    if np.isnan(values).any():
        counts = np.diff(np.append(starts, len(values)))
        return bin_stats_parallel(values, np.repeat(ids, counts), workers)
    ends = np.append(starts[1:], len(values))
    parts_wanted = max(1, workers, -(-len(values) // CHUNK_ROWS))
    cuts = [0]  # bin index where each part begins: about equal rows, never inside a bin
    for i in range(1, parts_wanted):
        j = int(np.searchsorted(starts, len(values) * i // parts_wanted, side="left"))
        if j > cuts[-1] and j < len(ids):
            cuts.append(j)
    cuts.append(len(ids))

    def one(k: int) -> dict[str, np.ndarray]:
        a, b = cuts[k], cuts[k + 1]
        lo, hi = int(starts[a]), int(ends[b - 1])
        return _stats_at(values[lo:hi], ids[a:b], starts[a:b] - lo)

    if len(cuts) <= 2:
        return _stats_at(values, ids, starts)
    if workers <= 1:
        parts = [one(k) for k in range(len(cuts) - 1)]
    else:
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(one, range(len(cuts) - 1)))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
