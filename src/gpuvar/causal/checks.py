"""Assumption checks for one fitted graph: is this graph a claim the data supports?

DirectLiNGAM's answer is only as good as its assumptions: a linear acyclic model with independent,
non-Gaussian disturbances, and (here) a target that is a sink. Each check below tests one of them on the
fitted model and is reported, never hidden; a graph that fails any is flagged in causal.json, on its
figure and in the run summary.

  r2_parents          share of the target's variance its parents explain (in-sample OLS R^2 of the fit)
  sink                an unconstrained fit (no prior knowledge) gives the target no outgoing edge
  independence        residuals pairwise independent: lingam's HSIC gamma test (the same statistic as
                      `DirectLiNGAM.get_error_independence_p_values`), on at most HSIC_ROWS rows, Bonferroni;
                      indicators of one category are exclusive codes of one variable: not tested together
  non_gaussianity     at most one residual looks Gaussian (Jarque-Bera p >= ALPHA): LiNGAM's identifiability
  total_effects       no |total effect| above MAX_TOTAL_EFFECT SD per SD (collinearity or a leak otherwise)
  conditioning        Belsley condition number of the features <= MAX_CONDITION
  rows_per_variable   at least MIN_ROWS_PER_VARIABLE rows per variable
  bootstrap_bins      when bootstrapping: at least MIN_BOOTSTRAP_BINS distinct bins to resample
"""

from __future__ import annotations

import numpy as np

ALPHA = 0.05
HSIC_ROWS = 300
MAX_TOTAL_EFFECT = 3.0
MAX_CONDITION = 30.0
MIN_ROWS_PER_VARIABLE = 10
MIN_BOOTSTRAP_BINS = 5  # fewer distinct bins than this: the bin bootstrap carries little information


def residuals(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """e = x - B x for every row (lingam's error variables)."""
    return X - X @ B.T


def _kernel_width(x: np.ndarray) -> float:
    """lingam.hsic.get_kernel_width for one column: sqrt(median / 2) of squared distances of the first 100."""
    xm = x[:100]
    d = (xm[:, None] - xm[None, :]) ** 2
    d = d[np.triu_indices(len(xm), 1)]
    d = d[d > 0]
    return float(np.sqrt(0.5 * np.median(d))) if len(d) else 1.0


def _gram(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K, centred K) of the Gaussian kernel with the median-distance width."""
    n = len(x)
    width = _kernel_width(x)
    K = np.exp(-((x[:, None] - x[None, :]) ** 2) / 2 / width**2)
    Kc = K - (K.sum(axis=0)[None, :] + K.sum(axis=1)[:, None]) / n + K.sum() / n**2
    return K, Kc


def _gamma_sf(x: float, shape: float, scale: float) -> float:
    from scipy.special import gammaincc

    return float(gammaincc(shape, x / scale))


def hsic_p_values(E: np.ndarray) -> np.ndarray:
    """Matrix of HSIC gamma-test p-values between the columns of E (lingam.hsic.hsic_test_gamma, pairwise)."""
    n, p = E.shape
    grams = [_gram(E[:, k]) for k in range(p)]
    mus = []
    for K, _ in grams:
        off = K.sum() - np.trace(K)
        mus.append(off / n / (n - 1))
    out = np.ones((p, p))
    factor = 72 * (n - 4) * (n - 5) / n / (n - 1) / (n - 2) / (n - 3)
    for i in range(p):
        Kc = grams[i][1]
        for j in range(i + 1, p):
            Lc = grams[j][1]
            prod = Kc * Lc
            stat = prod.sum() / n
            var = (prod / 6) ** 2
            var = factor * (var.sum() - np.trace(var)) / n / (n - 1)
            mean = (1 + mus[i] * mus[j] - mus[i] - mus[j]) / n
            pv = _gamma_sf(stat, mean**2 / var, var * n / mean) if var > 0 and mean > 0 else 1.0
            out[i, j] = out[j, i] = pv
    return out


def jarque_bera_p(e: np.ndarray) -> float:
    """Jarque-Bera test of normality (chi-square with 2 degrees of freedom: p = exp(-JB / 2))."""
    c = e - e.mean()
    m2 = float((c**2).mean())
    if m2 <= 0:
        return 0.0
    skew = float((c**3).mean()) / m2**1.5
    kurt = float((c**4).mean()) / m2**2
    jb = len(e) / 6 * (skew**2 + (kurt - 3) ** 2 / 4)
    return float(np.exp(-jb / 2))


def subsample(n: int, size: int, seed: int) -> np.ndarray:
    """Sorted row indices of a seeded subsample (all rows when n <= size)."""
    if n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng([int(seed), 0x4853]).choice(n, size=size, replace=False))


def assumption_checks(
    X: np.ndarray,
    B: np.ndarray,
    names: list[str],
    target: int,
    total_effects: np.ndarray,
    condition: float | None,
    unconstrained: tuple[list[int], np.ndarray] | None,
    seed: int = 0,
    siblings: list[list[str]] = (),
    bootstrap_bins: int | None = None,
) -> dict:
    """Every check of the module docstring; `passed` is False when any check fails, `warnings` says which."""
    n, p = X.shape
    E = residuals(X, B)
    checks: dict = {}
    warnings: list[str] = []

    var_t = float(X[:, target].var())
    r2 = 1.0 - float(E[:, target].var()) / var_t if var_t > 0 else 0.0
    parents = [names[j] for j in np.flatnonzero(B[target])]
    checks["r2_parents"] = {"value": round(r2, 6), "parents": parents}

    if unconstrained is not None:
        order, Bu = unconstrained
        out_edges = [names[i] for i in np.flatnonzero(Bu[:, target])]
        position = order.index(target) + 1
        ok = not out_edges
        checks["sink"] = {"passed": ok, "target_position": position, "of": p, "edges_from_target": out_edges}
        if not ok:
            warnings.append(
                f"unconstrained fit has edges out of the target (to {', '.join(out_edges[:3])}): "
                "the target may not be a sink"
            )

    rows = subsample(n, HSIC_ROWS, seed)
    P = hsic_p_values(E[rows])
    category = {n: k for k, group in enumerate(siblings) for n in group}
    iu = np.triu_indices(p, 1)
    same = np.array([category.get(names[i], -1 - i) == category.get(names[j], -2 - j) for i, j in zip(*iu)], bool)
    iu = (iu[0][~same], iu[1][~same])
    pairs = len(iu[0])
    if pairs:
        k = int(np.argmin(P[iu]))
        worst = (names[iu[0][k]], names[iu[1][k]])
        adjusted = min(1.0, float(P[iu][k]) * pairs)
        rejected = int((P[iu] * pairs < ALPHA).sum())
        ok = adjusted >= ALPHA
        checks["independence"] = {
            "passed": ok,
            "test": "HSIC gamma (lingam), Bonferroni",
            "rows": int(len(rows)),
            "pairs": pairs,
            "pairs_dependent": rejected,
            "min_p_adjusted": round(adjusted, 6),
            "worst_pair": list(worst),
        }
        if not ok:
            warnings.append(
                f"dependent residuals in {rejected} of {pairs} pairs (worst {worst[0]} / {worst[1]}): "
                "a hidden common cause or a non-linear effect"
            )

    jb = {names[k]: jarque_bera_p(E[:, k]) for k in range(p)}
    gaussian = [name for name, pv in jb.items() if pv >= ALPHA]
    ok = len(gaussian) <= 1
    checks["non_gaussianity"] = {
        "passed": ok,
        "test": "Jarque-Bera",
        "gaussian_like": gaussian,
        "p_values": {k: round(v, 6) for k, v in jb.items()},
    }
    if not ok:
        warnings.append(
            f"{len(gaussian)} residuals look Gaussian ({', '.join(gaussian[:3])}): "
            "the causal direction is not identifiable"
        )

    feats = [k for k in range(p) if k != target]
    big = {names[k]: round(float(total_effects[k]), 3) for k in feats if abs(total_effects[k]) > MAX_TOTAL_EFFECT}
    checks["total_effects"] = {
        "passed": not big,
        "max_abs": round(float(np.abs(total_effects).max()), 6),
        "limit": MAX_TOTAL_EFFECT,
        "beyond_limit": big,
    }
    if big:
        warnings.append(
            f"total effect beyond ±{MAX_TOTAL_EFFECT:g} SD per SD ({', '.join(big)}): "
            "collinear features or a proxy of the target"
        )

    if condition is not None:
        ok = bool(np.isfinite(condition) and condition <= MAX_CONDITION)
        checks["conditioning"] = {
            "passed": ok,
            "condition_number": round(condition, 3) if np.isfinite(condition) else None,
            "limit": MAX_CONDITION,
        }
        if not ok:
            warnings.append(
                f"ill-conditioned features (condition number {condition:.0f} > {MAX_CONDITION:g}): effects are unstable"
            )

    ok = n >= MIN_ROWS_PER_VARIABLE * p
    checks["rows_per_variable"] = {"passed": ok, "rows": n, "variables": p, "min_per_variable": MIN_ROWS_PER_VARIABLE}
    if not ok:
        warnings.append(f"few rows: {n} rows for {p} variables (< {MIN_ROWS_PER_VARIABLE} per variable)")

    if bootstrap_bins is not None:
        ok = bootstrap_bins >= MIN_BOOTSTRAP_BINS
        checks["bootstrap_bins"] = {"passed": ok, "bins": bootstrap_bins, "min": MIN_BOOTSTRAP_BINS}
        if not ok:
            warnings.append(f"rows from {bootstrap_bins} bin(s): the bin bootstrap says little about stability")
    return {"passed": not warnings, "warnings": warnings, "checks": checks}
