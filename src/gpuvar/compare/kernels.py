"""Per-kernel comparison: is a kernel slower in the candidate beyond run-to-run noise, and what does it cost?

Per key (kernel name by default) in both runs: launches, total time, median, IQR and coefficient of
variation (CV = std / mean, ddof=1). Between runs:
  * ratio of medians (candidate / baseline) with a percentile bootstrap interval: each run is resampled
    independently, `bootstrap` times, with a generator seeded from (seed, kernel position), so the interval
    is reproducible and does not depend on which other kernels are present. Up to EXACT_FROM launches the
    resamples are drawn explicitly (vectorised, in blocks bounding memory); above it the resampled median is
    drawn from its exact bootstrap law (the lower median of a resample is <= the j-th smallest distinct value
    iff at least ceil(n/2) of n draws fall at or below it: a binomial tail), which costs O(n) instead of
    O(bootstrap * n) and differs only by using the lower median for even n.
  * Mann-Whitney U (two-sided) on the durations, then Benjamini-Hochberg across the kernels tested (those
    with at least `min_launches` in both runs): q-values control the false-discovery rate at `alpha`.
  * impact = (median_c - median_b) * launches_c: what the change costs the candidate run, the sort key
    (largest absolute first), so the list reads in order of what matters to the run, not of p-value.
  * verdict: 'slower' / 'faster' when q < alpha and the interval excludes 1, else 'unchanged'; kernels in
    one run only are 'added' / 'removed'; too few launches to test: 'untested'.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

EXACT_FROM = 5000
_BLOCK = 1 << 22  # resampled values held at once


def _seed(seed: int, key: str) -> np.random.Generator:
    """A generator per kernel from (seed, key): intervals do not depend on the other kernels present."""
    digest = int.from_bytes(hashlib.sha1(key.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([seed, digest]))


def bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """`n_boot` bootstrap replicates of the median of `values` (see the module docstring)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 1:
        return np.full(n_boot, x[0])
    if n < EXACT_FROM:
        out = np.empty(n_boot)
        step = max(1, _BLOCK // n)
        for a in range(0, n_boot, step):
            b = min(n_boot, a + step)
            out[a:b] = np.median(x[rng.integers(0, n, size=(b - a, n))], axis=1)
        return out
    from scipy.stats import binom

    distinct, counts = np.unique(x, return_counts=True)
    cum = np.cumsum(counts) / n  # fraction of values <= each distinct value
    cdf = binom.sf(-(-n // 2) - 1, n, cum)  # P(at least ceil(n/2) draws <= value)
    cdf[-1] = 1.0
    return distinct[np.minimum(np.searchsorted(cdf, rng.random(n_boot), side="left"), len(distinct) - 1)]


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """BH-adjusted p-values (q-values) of a 1-D array; NaN entries (untested) stay NaN and do not count."""
    p = np.asarray(p, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0:
        return q
    order = ok[np.argsort(p[ok], kind="mergesort")]
    ranked = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    return q


def describe(durations: np.ndarray) -> dict:
    """Launches, total, median, IQR, mean, std and CV of one kernel's durations in one run."""
    d = np.asarray(durations, dtype=np.float64)
    q25, med, q75 = np.percentile(d, [25, 50, 75])
    mean = float(d.mean())
    std = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
    return {
        "launches": int(len(d)),
        "total_ns": float(d.sum()),
        "median_ns": float(med),
        "iqr_ns": float(q75 - q25),
        "mean_ns": mean,
        "std_ns": std,
        "cv": std / mean if mean > 0 and np.isfinite(std) else float("nan"),
    }


SIDE_COLUMNS = ("launches", "total_ns", "median_ns", "iqr_ns", "mean_ns", "std_ns", "cv")


def compare_kernels(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    bootstrap: int = 2000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    min_launches: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per key of either run (columns: key, status, verdict, <stat>_b, <stat>_c, ratio, ci_low, ci_high,
    p_value, q_value, delta_cv, impact_ns, delta_total_ns), ordered by |impact| then key."""
    from scipy.stats import mannwhitneyu

    groups_b = {k: g.to_numpy() for k, g in baseline.groupby("key", sort=True)["duration"]}
    groups_c = {k: g.to_numpy() for k, g in candidate.groupby("key", sort=True)["duration"]}
    lo_q, hi_q = 100 * (1 - confidence) / 2, 100 * (1 + confidence) / 2
    rows = []
    for key in sorted(set(groups_b) | set(groups_c)):
        b, c = groups_b.get(key), groups_c.get(key)
        row = {"key": key}
        for suffix, d in (("b", b), ("c", c)):
            stats = describe(d) if d is not None else dict.fromkeys(SIDE_COLUMNS, float("nan"))
            if d is None:
                stats["launches"], stats["total_ns"] = 0, 0.0
            row.update({f"{k}_{suffix}": v for k, v in stats.items()})
        row.update(ratio=np.nan, ci_low=np.nan, ci_high=np.nan, p_value=np.nan, delta_cv=np.nan, impact_ns=np.nan)
        row["delta_total_ns"] = row["total_ns_c"] - row["total_ns_b"]
        if b is None or c is None:
            row["status"] = "added" if b is None else "removed"
            row["impact_ns"] = row["delta_total_ns"]
            rows.append(row)
            continue
        row["status"] = "both"
        row["ratio"] = row["median_ns_c"] / row["median_ns_b"]
        row["delta_cv"] = row["cv_c"] - row["cv_b"]
        row["impact_ns"] = (row["median_ns_c"] - row["median_ns_b"]) * len(c)
        if len(b) >= min_launches and len(c) >= min_launches:
            rng = _seed(seed, key)
            ratios = bootstrap_medians(c, bootstrap, rng) / bootstrap_medians(b, bootstrap, rng)
            row["ci_low"], row["ci_high"] = (float(v) for v in np.percentile(ratios, [lo_q, hi_q]))
            row["p_value"] = float(mannwhitneyu(c, b, alternative="two-sided").pvalue)
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:  # both runs without a usable kernel: an empty table with every column
        return pd.DataFrame(columns=TABLE_COLUMNS)
    table["q_value"] = benjamini_hochberg(table["p_value"].to_numpy())
    table["verdict"] = [_verdict(r, alpha) for r in table.to_dict("records")]
    table["_order"] = -table["impact_ns"].abs()
    table = table.sort_values(["_order", "key"], kind="mergesort").drop(columns="_order").reset_index(drop=True)
    return table[TABLE_COLUMNS]


FIRST_COLUMNS = [
    "key",
    "status",
    "verdict",
    "ratio",
    "ci_low",
    "ci_high",
    "p_value",
    "q_value",
    "impact_ns",
    "delta_total_ns",
    "delta_cv",
]
TABLE_COLUMNS = FIRST_COLUMNS + [f"{k}_{s}" for s in ("b", "c") for k in SIDE_COLUMNS]


def _verdict(row: dict, alpha: float) -> str:
    if row["status"] != "both":
        return row["status"]
    if not np.isfinite(row["p_value"]):
        return "untested"
    if row["q_value"] < alpha and row["ci_low"] > 1:
        return "slower"
    if row["q_value"] < alpha and row["ci_high"] < 1:
        return "faster"
    return "unchanged"
