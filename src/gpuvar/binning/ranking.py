"""Phase 6 of the binning job, on rank 0: every non-empty bin in one table, ranked by the target's variance;
the top-k bins (for the causal step) and a random sample of bins (its comparison for selection bias)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from gpuvar.binning.plan import Plan
from gpuvar.canonical_io import from_numpy


class Ranking(NamedTuple):
    table: pa.Table  # bins.parquet
    topk: np.ndarray  # sorted ids of the top-k bins
    sample: np.ndarray  # sorted ids of the random sample


def rank_bins(plan: Plan, parts: list[dict[str, np.ndarray]], gmin: int) -> Ranking:
    """bins.parquet from every rank's statistics (each in bin order, ranks in bin order); ties in variance go
    to the lower bin id, bins without a variance (one row) rank last."""
    merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    ids = merged.pop("bin").astype(np.int64)
    var = merged["var"]
    order = np.lexsort((ids, np.where(np.isnan(var), np.inf, -var)))
    rank = np.empty(len(ids), np.int64)
    rank[order] = np.arange(1, len(ids) + 1)
    start = gmin + ids * plan.width
    cols = {"bin": ids, "bin_start": start, "bin_end": start + plan.width}
    cols.update(merged)
    cols["variance_rank"] = rank
    top = rank <= plan.opts.top_k
    cols["in_top_k"] = top
    sample = random_bins(ids, var, plan.opts.sample_bins, plan.opts.top_k, plan.opts.sample_seed)
    cols["in_random_sample"] = np.isin(ids, sample)
    table = pa.Table.from_arrays([from_numpy(v) for v in cols.values()], names=list(cols))
    return Ranking(table, np.sort(ids[top]), sample)


def random_bins(ids: np.ndarray, var: np.ndarray, count: int | None, top_k: int, seed: int) -> np.ndarray:
    """Sorted ids of `count` (default top_k; -1: all) bins drawn uniformly, without replacement, among bins whose
    target variance is defined: the comparison sample for selection bias (rank 0 only: same for any rank count)."""
    count = top_k if count is None else count
    pool = np.sort(ids[~np.isnan(var)])
    if count < 0:  # every bin: the analysis on all bins
        return pool
    if count == 0 or not len(pool):
        return np.zeros(0, np.int64)
    pick = np.random.default_rng([int(seed), 0x5EED]).choice(len(pool), size=min(count, len(pool)), replace=False)
    return np.sort(pool[pick])
