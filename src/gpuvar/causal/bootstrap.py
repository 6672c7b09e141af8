"""Bootstrap edge confidence: refit on row resamples, report how often each edge appears and its spread.

Resample k draws its rows from numpy's generator seeded with (seed, k), so the set of resamples — and
every output byte — is the same whether they run in-process or over any number of worker processes.
Workers are spawned (not forked) so BLAS/OpenMP thread pools in the parent cannot deadlock them; each
worker limits BLAS to one thread because the pool already fills the cores.
"""

from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor
import multiprocessing

import numpy as np
import pandas as pd

log = logging.getLogger("gpuvar.causal")

_STATE: dict = {}


def resample_indices(n: int, seed: int, index: int) -> np.ndarray:
    """Row indices of resample `index` (with replacement), a pure function of (seed, index)."""
    return np.random.default_rng([int(seed), int(index)]).integers(0, n, size=n)


def fit_adjacency(X: np.ndarray, prior_knowledge: np.ndarray | None, engine: str, threads: int | None = None):
    """(causal order, adjacency B) from the chosen engine: 'fast' (gpuvar.causal.pwling) or 'lingam'."""
    if engine == "fast":
        from gpuvar.causal import pwling

        return pwling.fit(X, prior_knowledge, threads=threads)
    if engine == "lingam":
        import lingam

        model = lingam.DirectLiNGAM(prior_knowledge=prior_knowledge, measure="pwling").fit(X)
        return list(map(int, model.causal_order_)), np.asarray(model.adjacency_matrix_, dtype=float)
    raise ValueError(f"unknown engine {engine!r} (allowed: fast, lingam)")


def _init_worker(X, prior_knowledge, engine, seed):
    from threadpoolctl import threadpool_limits

    _STATE.update(X=X, pk=prior_knowledge, engine=engine, seed=seed, limits=threadpool_limits(1))


def _one(index: int) -> np.ndarray:
    X = _STATE["X"]
    rows = resample_indices(len(X), _STATE["seed"], index)
    return fit_adjacency(X[rows], _STATE["pk"], _STATE["engine"], threads=_STATE.get("threads", 1))[1]


def bootstrap_adjacencies(
    X: np.ndarray, prior_knowledge: np.ndarray | None, n_samples: int, seed: int, workers: int, engine: str
) -> np.ndarray:
    """Adjacency matrices of resamples 0..n_samples-1, stacked (n_samples, p, p), in resample order."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    out = np.empty((n_samples, X.shape[1], X.shape[1]))
    step = max(1, n_samples // 10)

    def progress(k: int) -> None:
        if (k + 1) % step == 0 or k + 1 == n_samples:
            log.info("bootstrap %d/%d resamples (%d%%)", k + 1, n_samples, 100 * (k + 1) // n_samples)

    if workers <= 1:
        from threadpoolctl import threadpool_limits

        _STATE.update(X=X, pk=prior_knowledge, engine=engine, seed=seed, threads=None)
        try:
            with threadpool_limits(1):
                for k in range(n_samples):
                    out[k] = _one(k)
                    progress(k)
        finally:
            _STATE.clear()
        return out
    ctx = multiprocessing.get_context("spawn")
    chunk = max(1, n_samples // (workers * 4))
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(X, prior_knowledge, engine, seed)) as pool:  # fmt: skip
        for k, B in enumerate(pool.map(_one, range(n_samples), chunksize=chunk)):
            out[k] = B
            progress(k)
    return out


def summarise_edges(stack: np.ndarray, names: list[str]) -> pd.DataFrame:
    """One row per edge seen in any resample: probability (share of resamples with a non-zero coefficient)
    and the coefficient's mean, std, q05, q50, q95 over the resamples where it is present."""
    n_samples = stack.shape[0]
    present = stack != 0
    rows = []
    p = len(names)
    for j in range(p):  # from
        for i in range(p):  # to
            mask = present[:, i, j]
            count = int(mask.sum())
            if count == 0:
                continue
            vals = stack[mask, i, j]
            q05, q50, q95 = np.quantile(vals, [0.05, 0.5, 0.95])
            rows.append({
                "from": names[j], "to": names[i], "probability": count / n_samples, "n_present": count,
                "coef_mean": float(vals.mean()), "coef_std": float(vals.std()),
                "coef_q05": float(q05), "coef_q50": float(q50), "coef_q95": float(q95),
            })  # fmt: skip
    cols = ["from", "to", "probability", "n_present", "coef_mean", "coef_std", "coef_q05", "coef_q50", "coef_q95"]
    return pd.DataFrame(rows, columns=cols)
