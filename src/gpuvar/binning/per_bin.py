"""The statistics of whole bins (gpuvar.binning.stats) for the target and each feature, optionally on a thread pool
(--workers-per-rank). A bin's statistics are a function of its values in file order only, whichever call computes
them (bins are never cut): the sorted path computes a batch's finished bins, the general path a round's bins,
and both give the same bytes for any rank count and batch size. Worker pool: numpy's sorts/partitions release the
GIL, so threads scale this on a many-core node where a few ranks per node each own many bins; on a 2-core machine
with 2 ranks there is no spare core, so keep --workers-per-rank 1 there.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from gpuvar.binning.stats import STATS, bin_stats_at, bin_stats_parallel

TARGET = "__target"  # key of the target among a bin's columns (the others are the features)


def runs_statistics(ids: np.ndarray, starts: np.ndarray, cols: dict[str, np.ndarray], workers: int) -> dict:
    """Statistics of whole bins cut into runs: bin ids[i] holds rows starts[i] .. starts[i+1] (or the end)."""
    return _with_features(partial(bin_stats_at, ids=ids, starts=starts, workers=workers), cols)


def rows_statistics(bins: np.ndarray, cols: dict[str, np.ndarray], workers: int) -> dict:
    """Statistics of whole bins of rows with non-decreasing bin ids."""
    return _with_features(partial(bin_stats_parallel, bins=bins, workers=workers), cols)


def empty_statistics(features: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The statistics of no bin, with every column."""
    empty = {TARGET: np.zeros(0), **{f: np.zeros(0) for f in features}}
    return rows_statistics(np.zeros(0, np.int64), empty, 1)


def concat_statistics(parts: list[dict], features: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Statistics computed apart, in bin order, as one."""
    parts = [p for p in parts if len(p["bin"])]
    if not parts:
        return empty_statistics(features)
    return parts[0] if len(parts) == 1 else {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


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
