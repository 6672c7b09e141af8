"""How much of a target do features whose direction is known explain, and may we say so?

Launch configuration, problem size and context (what ran beside the launch) are set by the program or by
its surroundings, never by the kernel's own duration: their direction is known a priori, so orienting edges
(what DirectLiNGAM tests) is not the question. The question is *how much*, asked so that the answer holds
out of sample:

  share        cross-validated R^2 (k folds; folds are whole steps when steps are known, so launches of one
               iteration never sit on both sides), clipped to [0, 1]: the variance a linear model fitted on
               other launches predicts
  p_value      permutation test of the in-sample R^2 (the target permuted PERMUTATIONS times, seeded)
  residuals    location-scale check: residuals divided by a fitted scale (|residual| regressed on the same
               features), then tested for dependence on the fitted value (HSIC). Timing noise that grows
               with problem size (heteroscedasticity) passes; a remainder that still depends on the
               features (a non-linear effect) fails and is reported as a warning, not hidden

Verdicts (one per finding and per graph):
  explained                          share >= EXPLAINED_SHARE and p < ALPHA
  partly explained                   PARTLY_SHARE <= share < EXPLAINED_SHARE and p < ALPHA
  not explained by recorded features share < PARTLY_SHARE or p >= ALPHA, or no recorded feature varies
                                     (constant features explain nothing: a certain answer, with the reason)
  declined                           the question cannot be asked: too few launches, nothing to explain
                                     (why is said)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EXPLAINED = "explained"
PARTLY = "partly explained"
NOT_EXPLAINED = "not explained by recorded features"
DECLINED = "declined"
VERDICTS = (EXPLAINED, PARTLY, NOT_EXPLAINED, DECLINED)

EXPLAINED_SHARE = 0.5
PARTLY_SHARE = 0.1
ALPHA = 0.01
PERMUTATIONS = 199
PERMUTED_VALUES = 1 << 22  # permuted targets held at a time (32 MiB; their centred copy as much again)
FOLDS = 5
MIN_ROWS = 20
RESIDUAL_ROWS = 300  # HSIC on at most this many rows (quadratic cost)
RESIDUAL_ALPHA = 0.01


@dataclass
class ShareTest:
    """The answer to 'how much do these features explain', with its verdict."""

    verdict: str
    share: float = 0.0
    in_sample: float = 0.0
    p_value: float | None = None
    rows: int = 0
    features: list[str] = field(default_factory=list)
    reason: str | None = None  # why declined
    residuals_depend: bool | None = None
    residual_p: float | None = None

    def record(self) -> dict:
        return {
            "verdict": self.verdict,
            "share": round(self.share, 6),
            "in_sample_share": round(self.in_sample, 6),
            "p_value": None if self.p_value is None else round(self.p_value, 6),
            "rows": self.rows,
            "features": list(self.features),
            "reason": self.reason,
            "residual_check": None
            if self.residuals_depend is None
            else {
                "method": "location-scale standardised residuals vs fitted value, HSIC gamma test",
                "passed": not self.residuals_depend,
                "p_value": None if self.residual_p is None else round(self.residual_p, 6),
            },
        }


def _design(X: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(len(X)), X])


def _fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    coef, *_ = np.linalg.lstsq(_design(X), y, rcond=None)
    return coef


def _predict(X: np.ndarray, coef: np.ndarray) -> np.ndarray:
    return _design(X) @ coef


def fold_of(n: int, groups: np.ndarray | None, folds: int, seed: int) -> np.ndarray:
    """Fold number per row: whole groups (steps) per fold when given, else rows; seeded, so deterministic."""
    rng = np.random.default_rng(seed)
    if groups is not None:
        keys, inverse = np.unique(np.asarray(groups), return_inverse=True)
        if len(keys) >= folds:
            return (rng.permutation(len(keys)) % folds)[inverse]
    return rng.permutation(n) % folds


def cross_validated_r2(X: np.ndarray, y: np.ndarray, folds: np.ndarray) -> float:
    """1 - out-of-fold squared error / variance (each fold predicted by a fit on the others), in [0, 1]."""
    total = float(((y - y.mean()) ** 2).sum())
    if total <= 0:
        return 0.0
    error = 0.0
    for k in np.unique(folds):
        test = folds == k
        coef = _fit(X[~test], y[~test])
        error += float(((y[test] - _predict(X[test], coef)) ** 2).sum())
    return float(min(1.0, max(0.0, 1.0 - error / total)))


def _r2_projection(Q: np.ndarray, y: np.ndarray) -> np.ndarray:
    """In-sample R^2 of y (one column per permutation) on the orthonormal basis Q of the centred features."""
    yc = y - y.mean(axis=0)
    total = (yc**2).sum(axis=0)
    explained = ((Q.T @ yc) ** 2).sum(axis=0)
    return np.where(total > 0, explained / np.where(total > 0, total, 1), 0.0)


def permutation_p(X: np.ndarray, y: np.ndarray, permutations: int, seed: int) -> tuple[float, float]:
    """(in-sample R^2, permutation p-value): how often a permuted target is explained as well."""
    Xc = X - X.mean(axis=0)
    Q, R = np.linalg.qr(Xc)
    del Xc  # given back before the permutations (a copy of X: 0.16 GB for 10 features at 2 M steps)
    keep = np.abs(np.diag(R)) > 1e-9 * max(1.0, float(np.abs(R).max()))
    Q = Q[:, keep]
    observed = float(_r2_projection(Q, y[:, None])[0])
    rng = np.random.default_rng(seed)
    hits = 0
    block = max(1, min(50, PERMUTED_VALUES // max(len(y), 1)))  # a million steps: 4 permutations at a time
    done = 0
    while done < permutations:
        m = min(block, permutations - done)
        Y = np.column_stack([rng.permutation(y) for _ in range(m)])
        hits += int((_r2_projection(Q, Y) >= observed - 1e-12).sum())
        done += m
    return observed, (1 + hits) / (1 + permutations)


def residual_dependence(X: np.ndarray, y: np.ndarray, seed: int) -> float:
    """p-value of HSIC between location-scale standardised residuals and the fitted value (high: no dependence)."""
    fitted = _predict(X, _fit(X, y))
    return residual_dependence_of(X, fitted, y - fitted, seed)


def residual_dependence_of(scale_X: np.ndarray, fitted: np.ndarray, resid: np.ndarray, seed: int) -> float:
    """The same for a model fitted elsewhere: the scale of the residuals is fitted on scale_X (timing noise that
    grows with the size passes), then the standardised residuals are tested against the fitted value."""
    from gpuvar.causal.checks import hsic_p_values

    scale = _predict(scale_X, _fit(scale_X, np.abs(resid)))
    floor = max(1e-12, 0.05 * float(np.abs(resid).mean()))
    z = resid / np.maximum(scale, floor)
    rows = np.arange(len(resid))
    if len(rows) > RESIDUAL_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(rows, RESIDUAL_ROWS, replace=False))
    if np.ptp(fitted[rows]) == 0 or np.ptp(z[rows]) == 0:
        return 1.0
    return float(hsic_p_values(np.column_stack([z[rows], fitted[rows]]))[0, 1])


def varying_columns(X: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Columns that vary and are finite everywhere."""
    keep = [k for k in range(X.shape[1]) if np.isfinite(X[:, k]).all() and np.ptp(X[:, k]) > 0]
    return X[:, keep], [names[k] for k in keep]


def verdict_of(share: float, p: float) -> str:
    """The verdict of a cross-validated share and its permutation p-value (the module docstring's table)."""
    if p >= ALPHA or share < PARTLY_SHARE:
        return NOT_EXPLAINED
    return EXPLAINED if share >= EXPLAINED_SHARE else PARTLY


def share_test(
    X: np.ndarray,
    y: np.ndarray,
    names: list[str],
    groups: np.ndarray | None = None,
    seed: int = 0,
    min_rows: int = MIN_ROWS,
    permutations: int = PERMUTATIONS,
    residual_check: bool = True,
) -> ShareTest:
    """How much of y the columns of X explain out of sample, with a permutation test and a verdict."""
    y = np.asarray(y, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64).reshape(len(y), -1)
    finite = np.isfinite(y)
    n = int(finite.sum())
    if n < min_rows:
        return ShareTest(DECLINED, rows=n, reason=f"too few launches ({n} < {min_rows})")
    if not finite.all():  # a copy only where rows go (at 2 M steps each copy of X is 0.3 GB)
        X, y = X[finite], y[finite]
        groups = None if groups is None else np.asarray(groups)[finite]
    if np.ptp(y) == 0:
        return ShareTest(DECLINED, rows=n, reason="nothing to explain: the target is constant")
    X, names = varying_columns(X, names)
    if not names:  # constant features explain nothing: a certain answer, not a refusal
        return ShareTest(NOT_EXPLAINED, rows=n, reason="no recorded feature varies")
    # scale columns so that lstsq's rank decisions do not depend on units (in place, in varying_columns' copy: its
    # memory layout, which the fits' rounding follows, and one copy of X instead of three)
    scale = X.std(axis=0)
    X -= X.mean(axis=0)
    X /= scale
    y_scale = float(y.std())
    ys = (y - y.mean()) / y_scale
    share = cross_validated_r2(X, ys, fold_of(n, groups, FOLDS, seed))
    in_sample, p = permutation_p(X, ys, permutations, seed)
    result = ShareTest(verdict_of(share, p), share, in_sample, p, n, list(names))
    verdict = result.verdict
    if residual_check and verdict != NOT_EXPLAINED:
        result.residual_p = residual_dependence(X, ys, seed)
        result.residuals_depend = result.residual_p < RESIDUAL_ALPHA
    return result
