"""Phase 5 of the binning job: the owner of each bin computes every statistic of it (gpuvar.binning.stats) for
the target and each feature, optionally on a thread pool (--workers-per-rank). Floating sums are done by the
owner only, on rows in file order, so the statistics are identical for any rank count. Worker pool: numpy's
sorts/partitions release the GIL, so threads scale this phase on a many-core node where a few ranks per node
each own many bins; on a 2-core machine with 2 ranks there is no spare core, so keep --workers-per-rank 1 there.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from gpuvar.binning.exchange import TARGET, Runs, Segment
from gpuvar.binning.stats import STATS, bin_stats_at, bin_stats_parallel


def bin_statistics(segments: list[Segment], features: tuple[str, ...], workers: int) -> dict[str, np.ndarray]:
    """Statistics of every bin of the bin-aligned segments, concatenated in bin order: 'bin', the target's
    statistics (count, min, ..., q75), then '<feature>_<statistic>' per feature."""
    parts = []
    for seg in segments:
        if isinstance(seg, Runs):
            if len(seg.ids):
                stats_of = partial(bin_stats_at, ids=seg.ids, starts=seg.starts, workers=workers)
                parts.append(_with_features(stats_of, seg.columns))
        elif len(seg.bins):
            parts.append(_with_features(partial(bin_stats_parallel, bins=seg.bins, workers=workers), seg.columns))
    if not parts:
        empty = {TARGET: np.zeros(0), **{f: np.zeros(0) for f in features}}
        return _with_features(partial(bin_stats_parallel, bins=np.zeros(0, np.int64), workers=workers), empty)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _with_features(stats_of: Callable[[np.ndarray], dict], cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The target's statistics per bin, then each feature's, aligned to the target's bins."""
    base = stats_of(cols[TARGET])
    for f, values in cols.items():
        if f == TARGET:
            continue
        fs = stats_of(values)
        pos = np.searchsorted(fs["bin"], base["bin"])
        if len(fs["bin"]):
            hit = (pos < len(fs["bin"])) & (fs["bin"][np.minimum(pos, len(fs["bin"]) - 1)] == base["bin"])
        else:
            hit = np.zeros(len(base["bin"]), bool)
        for s in STATS:
            col = np.zeros(len(base["bin"]), np.int64) if s == "count" else np.full(len(base["bin"]), np.nan)
            col[hit] = fs[s][pos[hit]]
            base[f"{f}_{s}"] = col
    return base
