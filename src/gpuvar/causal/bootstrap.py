"""Bootstrap edge confidence: refit on resamples of whole bins, report how often each edge appears.

The unit resampled is the bin, because bins are what the analysis selects: rows of one bin share their
time window (contention, clocks), so resampling rows would treat them as independent and overstate the
confidence. Resample k draws as many bins as there are, with replacement, and takes all rows of each
drawn bin. A group whose rows come from one bin has no between-bin information (reported by the caller).
"Probability" is the share of refits with the edge (and `sign_agreement` the share with the fitted sign):
the stability of the fit under resampling, not a p-value.

Resample k draws its bins from numpy's generator seeded with (seed, k), so the set of resamples — and
every output byte — is the same whether they run in-process or over any number of worker processes.
`workers` counts the processes that fit resamples, this one included: workers - 1 helpers are spawned (not
forked, so BLAS/OpenMP thread pools in the parent cannot deadlock them), and this process fits the chunks no
helper has started, from the last one back, while they take them from the first. Why this process works too:
it had only waited for the helpers, and each helper costs ~1 CPU-s to start (the scientific stack imported
again), which on two cores beside `gpuvar explain`'s findings was a quarter of the stage. Every process fits
with one BLAS thread (`one_blas_thread`): the processes already fill the cores.
"""

from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("gpuvar.causal")
_LIMITS = None  # keeps a worker's BLAS thread limit alive


def resample_bins(bins: np.ndarray, seed: int, index: int) -> np.ndarray:
    """Row indices of resample `index`: len(unique bins) bins drawn with replacement, all rows of each."""
    ids, inverse = np.unique(bins, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(ids) + 1))
    drawn = np.random.default_rng([int(seed), int(index)]).integers(0, len(ids), size=len(ids))
    return np.concatenate([order[bounds[b] : bounds[b + 1]] for b in drawn]) if len(ids) else order


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


def one_blas_thread():
    """One thread in every BLAS and OpenMP pool a fit uses (gpuvar.blas_kernels.one_blas_thread, OpenMP
    included: sklearn's lasso fits run in the bootstrap workers, where 2 workers x 2 OpenBLAS threads on 2 cores
    made the demo's rank0 memory_stall causal job take 22 s against 13 s with one worker; now 8 s)."""
    from gpuvar.blas_kernels import one_blas_thread as limit

    return limit(openmp=True)


def _init_worker() -> None:
    """One BLAS thread per worker: the pool already fills the cores."""
    global _LIMITS
    _LIMITS = one_blas_thread()


def _fit_resamples(
    X, prior_knowledge, engine: str, seed: int, indices: list[int], threads: int | None, bins: np.ndarray
):
    """Adjacency matrices of the given resamples of bins, stacked in order."""
    out = np.empty((len(indices), X.shape[1], X.shape[1]))
    for k, index in enumerate(indices):
        rows = resample_bins(bins, seed, index)
        sample = X[rows]
        if (sample.std(axis=0) == 0).any():  # a column constant in this resample: no fit (counted as failed)
            out[k] = np.nan
            continue
        out[k] = fit_adjacency(sample, prior_knowledge, engine, threads=threads)[1]
    return out


def make_pool(workers: int) -> ProcessPoolExecutor:
    """The helpers of `workers` processes fitting resamples (this one fits too): workers - 1 spawned processes,
    reusable across groups (spawning costs ~1 s per helper)."""
    helpers = max(1, workers - 1)
    return ProcessPoolExecutor(helpers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker)


class Bootstrap:
    """The resamples of one fit, under way from when it is made: with workers > 1 every chunk is handed to the
    helpers (`pool`, or a pool made here), and result() fits in this process the chunks none has started
    (Bootstrap._fit_here), then gathers the rest in order. Why started apart from result(): gpuvar.causal.discover starts the
    next group's fits and checks while the helpers work through this group's chunks.

    bins: the bin of each row (None: every row its own bin, i.e. a plain row bootstrap). workers=1 runs
    in-process, in result()."""

    def __init__(
        self,
        X: np.ndarray,
        prior_knowledge: np.ndarray | None,
        n_samples: int,
        seed: int,
        workers: int = 1,
        engine: str = "fast",
        pool: ProcessPoolExecutor | None = None,
        bins: np.ndarray | None = None,
    ):
        X = np.ascontiguousarray(X, dtype=np.float64)
        self.bins = np.arange(len(X)) if bins is None else np.asarray(bins)
        self.fit = (X, prior_knowledge, engine, seed)
        self.n_samples = n_samples
        self.out = np.empty((n_samples, X.shape[1], X.shape[1]))
        n_chunks = 10 if workers <= 1 else max(10, 4 * workers)
        split = np.array_split(np.arange(n_samples), min(n_chunks, n_samples)) if n_samples else []
        self.chunks = [c.tolist() for c in split]
        self.futures: list = []
        self.own = None
        self._done, self._decile = 0, 0
        if n_samples and workers > 1:
            self.own = make_pool(workers) if pool is None else None
            run = self.own or pool
            self.futures = [run.submit(_fit_resamples, *self.fit, chunk, 1, self.bins) for chunk in self.chunks]

    def _progress(self, count: int) -> None:
        self._done += count
        decile = 10 * self._done // self.n_samples
        if decile > self._decile:
            self._decile = decile
            log.info("bootstrap %d/%d resamples (%d%%)", self._done, self.n_samples, 100 * self._done // self.n_samples)

    def result(self) -> np.ndarray:
        """The stacked adjacency matrices, every chunk fitted."""
        try:
            if not self.futures:
                with one_blas_thread():
                    for k in range(len(self.chunks)):
                        self._fit_chunk(k)
                return self.out
            here = self._fit_here()
            for k, (chunk, future) in enumerate(zip(self.chunks, self.futures)):
                if k not in here:
                    self.out[chunk] = future.result()
                    self._progress(len(chunk))
        finally:
            self.close()
        return self.out

    def _fit_here(self) -> set[int]:
        """Fit in this process the chunks no helper has started, from the last one back (the helpers take them from
        the first, so the first chunk found started means every chunk before it is); returns their indices. A
        chunk's numbers do not depend on the process that fits it (one BLAS thread in each)."""
        here: set[int] = set()
        with one_blas_thread():
            for k in reversed(range(len(self.chunks))):
                if not self.futures[k].cancel():
                    break
                self._fit_chunk(k)
                here.add(k)
        return here

    def _fit_chunk(self, k: int) -> None:
        """Chunk k fitted in this process."""
        self.out[self.chunks[k]] = _fit_resamples(*self.fit, self.chunks[k], threads=1, bins=self.bins)
        self._progress(len(self.chunks[k]))

    def close(self) -> None:
        """Chunks not started are dropped (an error elsewhere: no fit is left running for nothing)."""
        for future in self.futures:
            future.cancel()
        if self.own is not None:
            self.own.shutdown(cancel_futures=True)
            self.own = None


def summarise_edges(stack: np.ndarray, names: list[str], fitted: np.ndarray | None = None) -> pd.DataFrame:
    """One row per edge seen in any resample: probability (share of resamples with a non-zero coefficient),
    sign_agreement (share with the sign of the `fitted` coefficient; NaN for an edge the fit lacks) and the
    coefficient's mean, std, q05, q50, q95 over the resamples where it is present."""
    import pandas as pd

    stack = stack[~np.isnan(stack).any(axis=(1, 2))]  # resamples that could not be fitted
    n_samples = stack.shape[0]
    present = stack != 0
    rows = []
    if n_samples == 0:
        stack = np.zeros((0, len(names), len(names)))
    p = len(names)
    for j in range(p):  # from
        for i in range(p):  # to
            mask = present[:, i, j]
            count = int(mask.sum())
            if count == 0:
                continue
            vals = stack[mask, i, j]
            q05, q50, q95 = np.quantile(vals, [0.05, 0.5, 0.95])
            sign = 0.0 if fitted is None else float(np.sign(fitted[i, j]))
            agree = float((np.sign(stack[:, i, j]) == sign).mean()) if sign else float("nan")
            rows.append(
                {
                    "from": names[j],
                    "to": names[i],
                    "probability": count / n_samples,
                    "n_present": count,
                    "sign_agreement": agree,
                    "coef_mean": float(vals.mean()),
                    "coef_std": float(vals.std()),
                    "coef_q05": float(q05),
                    "coef_q50": float(q50),
                    "coef_q95": float(q95),
                }
            )
    cols = [
        "from",
        "to",
        "probability",
        "n_present",
        "sign_agreement",
        "coef_mean",
        "coef_std",
        "coef_q05",
        "coef_q50",
        "coef_q95",
    ]
    return pd.DataFrame(rows, columns=cols)
